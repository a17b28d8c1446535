"""The matrix's own interpreters that speak JSON lines: started, read with a deadline, stopped.

The crash helper (:mod:`effectguard.testkit._crash.child`) and the contending
workers (:mod:`proofs.matrix.workers`) are both a module of this
package run by this interpreter, reading one request a line on standard input
and answering one line on standard output.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import select
import subprocess
import sys
from pathlib import Path
from typing import IO

__all__ = ["read_line", "start", "stop"]

#: How long a stopped process may take to exit on its own before it is killed.
_EXIT_SECONDS = 10


def start(module: str, *arguments: str) -> subprocess.Popen[str]:
    """Run ``python -m module arguments…`` with line-buffered text pipes to and from it.

    The child finds ``module`` wherever this interpreter found its package (a
    checkout's ``proofs`` folder included), whatever its working directory.
    """
    top = importlib.import_module(module.partition(".")[0])
    env = dict(os.environ)
    where = getattr(top, "__file__", None)
    if where is not None:
        root = str(Path(where).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return subprocess.Popen(  # noqa: S603 - our own module, by this interpreter
        [sys.executable, "-m", module, *arguments],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
    )


def stop(*processes: subprocess.Popen[str]) -> None:
    """Close every input first (each exits when its input closes), then wait for each in turn.

    One that has not exited within 10 seconds of its turn is killed.
    """
    for process in processes:
        with contextlib.suppress(OSError):
            if process.stdin is not None:
                process.stdin.close()
    for process in processes:
        try:
            process.wait(timeout=_EXIT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def read_line(stream: IO[str], timeout: float) -> str | None:
    """The next line of ``stream`` ('' at its end), or None when none came within ``timeout``."""
    ready, _, _ = select.select([stream], [], [], timeout)
    return stream.readline() if ready else None
