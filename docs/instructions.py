"""Instructions per call: before/after numbers that a busy machine cannot blur.

Run from the repository root, under valgrind's callgrind, which counts the
instructions the process executes, not seconds::

    python docs/instructions.py MODE N              # N calls of MODE, then exit
    python docs/instructions.py --measure MODE      # valgrind at two N, the difference

MODE is one of:

- ``guarded``: fresh guarded calls through ``EffectExecutor`` on a SQLite
  ledger in a RAM-backed directory when there is one (``/dev/shm``), so that the
  count is the CPU's work, not the disk's;
- ``replay``: replays of 200 confirmed operations, served by the replay cache;
- ``read``: ``ledger.get`` of 200 confirmed operations (one row read and its
  record built).

``--measure`` runs the mode at N=100 and N=400 under
``valgrind --tool=callgrind`` and prints the difference divided by 300:
start-up, imports and warm-up cancel out. The count is the same from one run
to the next whatever else the machine does, so a change is compared by running
this on the code before it and after it. It says nothing about fsync, which
``agent-effect bench`` measures.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import _checkout  # noqa: F401 - puts the checkout's benchmarks/ on sys.path

from benchmarks._calls import CONTRACT, arguments, handler
from effectguard import EffectExecutor, SQLiteEffectLedger

MODES = ("guarded", "replay", "read")
_FEW, _MANY = 100, 400
_COLLECTED = re.compile(r"Collected : (\d+)")


def run(mode: str, calls: int) -> None:
    """Make ``calls`` calls of ``mode`` after a warm-up, in a ledger removed afterwards."""
    shm = Path("/dev/shm")  # noqa: S108 - a private mkdtemp directory inside it
    directory = Path(tempfile.mkdtemp(dir=shm if shm.is_dir() else None))
    try:
        with SQLiteEffectLedger(directory / "ledger.db") as ledger:
            executor = EffectExecutor(ledger)
            for n in range(200):
                executor.execute(CONTRACT, arguments("warm", n), handler)
            for n in range(200):  # the first replay of each reads the ledger and caches it
                executor.execute(CONTRACT, arguments("warm", n), handler)
            for n in range(calls):
                if mode == "guarded":
                    executor.execute(CONTRACT, arguments("fresh", n), handler)
                elif mode == "replay":
                    executor.execute(CONTRACT, arguments("warm", n % 200), handler)
                else:
                    ledger.get(f"bench:warm:{n % 200}")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def measure(mode: str) -> int:
    """Instructions per call of ``mode``: two runs under callgrind, their difference."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        sys.exit("docs/instructions.py --measure needs valgrind (apt-get install valgrind)")
    counts = []
    for calls in (_FEW, _MANY):
        command = [valgrind, "--tool=callgrind", f"--callgrind-out-file={os.devnull}"]
        done = subprocess.run(  # noqa: S603 - valgrind running this very script
            [*command, sys.executable, __file__, mode, str(calls)],
            capture_output=True,
            text=True,
            check=True,
        )
        found = _COLLECTED.search(done.stderr)
        if found is None:
            sys.exit(f"callgrind printed no instruction count:\n{done.stderr[-2000:]}")
        counts.append(int(found.group(1)))
    return (counts[1] - counts[0]) // (_MANY - _FEW)


def main(argv: list[str]) -> None:
    """``MODE N`` runs the calls; ``--measure MODE`` prints instructions per call."""
    first, second = (*argv, "", "")[:2]
    if len(argv) == len(("--measure", "MODE")) and first == "--measure" and second in MODES:
        sys.stdout.write(f"{second}: {measure(second):,} instructions per call\n")
    elif len(argv) == len(("MODE", "N")) and first in MODES and second.isdigit():
        run(first, int(second))
    else:
        sys.exit(f"usage: python docs/instructions.py [--measure] {{{','.join(MODES)}}} [N]")


if __name__ == "__main__":
    main(sys.argv[1:])
