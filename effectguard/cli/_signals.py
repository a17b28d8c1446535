"""A long ``agent-effect`` run stopped by SIGTERM cleans up as if it had ended.

Python's default answer to SIGTERM ends the process at once, so no ``finally``
runs: the bench's ledger files and PostgreSQL schemas, and the matrix's
schema, would stay behind. Inside :func:`cleaned_up_on_sigterm`, SIGTERM
instead raises ``SystemExit(143)`` (128 + SIGTERM, what a shell reports for a
process SIGTERM ended) in the main thread, so every ``finally`` between here
and the signal runs and removes what the run made.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

import click

__all__ = ["TERMINATED", "cleaned_up_on_sigterm"]

#: The exit status of a run SIGTERM stopped.
TERMINATED = 128 + signal.SIGTERM


class _Terminated(SystemExit):
    """SIGTERM arrived: unwind, run every ``finally``, exit with :data:`TERMINATED`."""


def _stop(signum: int, frame: FrameType | None) -> None:
    del signum, frame
    raise _Terminated(TERMINATED)


@contextlib.contextmanager
def cleaned_up_on_sigterm(label: str) -> Iterator[None]:
    """While inside, SIGTERM unwinds the run (its clean-up runs) and exits 143.

    ``label`` names the run in the one line written to standard error. Outside
    the main thread (where Python delivers signals) it changes nothing. The
    previous SIGTERM handler is back on exit.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        yield
    except _Terminated:
        click.echo(f"{label}: stopped by SIGTERM; what the run made was removed", err=True)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
