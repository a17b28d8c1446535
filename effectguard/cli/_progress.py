"""Progress of a long ``agent-effect`` run, on standard error.

On a terminal, a bar; otherwise (CI logs, a file, a pipe) one line every few
seconds, so a long run is seen to be alive without flooding the log. Standard
output stays the report's alone.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import TextIO

import click

__all__ = ["progress_on_stderr"]

#: Seconds between two progress lines when standard error is not a terminal.
EVERY_SECONDS = 5.0


class _Lines:
    """Counts progress and writes a line when :data:`EVERY_SECONDS` have passed since the last."""

    def __init__(
        self,
        label: str,
        total: int,
        stream: TextIO,
        every: float,
        clock: Callable[[], float],
    ) -> None:
        self.label = label
        self.total = total
        self.stream = stream
        self.every = every
        self.clock = clock
        self.started = self.last = clock()
        self.done = 0

    def update(self, count: int) -> None:
        self.done += count
        now = self.clock()
        if now - self.last >= self.every or self.done == self.total:
            self.last = now
            self._write(now - self.started)

    def _write(self, elapsed: float) -> None:
        rate = self.done / elapsed if elapsed > 0 else 0.0
        left = f", about {(self.total - self.done) / rate:.0f}s left" if rate else ""
        self.stream.write(
            f"{self.label}: {self.done}/{self.total} in {elapsed:.0f}s ({rate:.1f}/s{left})\n"
        )
        self.stream.flush()


@contextlib.contextmanager
def progress_on_stderr(
    label: str,
    total: int,
    *,
    stream: TextIO | None = None,
    every: float = EVERY_SECONDS,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[Callable[[int], None]]:
    """Yield a callback taking how many more items are done; it reports them on standard error."""
    out = stream if stream is not None else sys.stderr
    if out.isatty():
        with click.progressbar(length=total, label=label, file=out) as bar:
            yield bar.update
        return
    yield _Lines(label, total, out, every, clock).update
