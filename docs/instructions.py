"""Instructions per call: before/after numbers that a busy machine cannot blur.

Run from the repository root, under valgrind's callgrind, which counts the
instructions the process executes, not seconds::

    python docs/instructions.py MODE N              # N calls of MODE, then exit
    python docs/instructions.py --measure MODE      # valgrind at two N, the difference

MODE is one of:

- ``fresh`` (also ``guarded``): fresh guarded calls through ``EffectExecutor``
  on a SQLite ledger in a RAM-backed directory when there is one
  (``/dev/shm``), so that the count is the CPU's work, not the disk's: a claim
  and a confirmation, two commits at ``synchronous=FULL``;
- ``uncached``: replays of 200 confirmed operations by an executor whose replay
  cache is off, as a new process resuming a run makes them (one indexed read
  and the check of the stored output against its confirmation);
- ``cached`` (also ``replay``): the same replays served by the replay cache;
- ``read``: ``ledger.get`` of 200 confirmed operations (one row read and its
  record built);
- ``raw-write``: the floor a fresh call is compared with, the bench's
  hand-written baseline: plain ``sqlite3``, an ``INSERT`` and an ``UPDATE``,
  each its own commit, in the same kind of file;
- ``raw-read``: a primary-key ``SELECT`` of the baseline's table, the floor a
  replay is compared with.

``--measure MODE`` runs the mode at N=200 and N=1200 under
``valgrind --tool=callgrind``, with a fixed hash seed, and prints the
difference divided by 1,000:
start-up, imports and warm-up cancel out. ``--measure all`` measures every
mode and prints each beside its floor. The count is the same from one run
to the next whatever else the machine does, so a change is compared by running
this on the code before it and after it. It says nothing about fsync, which
``python -m benchmarks`` measures.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import _checkout  # noqa: F401 - puts the checkout's benchmarks/ on sys.path

from benchmarks._calls import CONTRACT, arguments, handler
from benchmarks._sqlite_site import SQLiteRaw
from effectguard import EffectExecutor, SQLiteEffectLedger

MODES = ("fresh", "uncached", "cached", "read", "raw-write", "raw-read")
ALIASES = {"guarded": "fresh", "replay": "cached"}
#: Each mode beside the floor it is compared with.
FLOORS = {"fresh": "raw-write", "uncached": "raw-read", "cached": "raw-read", "read": "raw-read"}
_FEW, _MANY = 200, 1200
_COLLECTED = re.compile(r"Collected : (\d+)")
_WARM = 200


def _directory() -> Path:
    shm = Path("/dev/shm")  # noqa: S108 - a private mkdtemp directory inside it
    return Path(tempfile.mkdtemp(dir=shm if shm.is_dir() else None))


def _run_raw(mode: str, calls: int, directory: Path) -> None:
    raw = SQLiteRaw(directory / "raw.db")
    try:
        for n in range(_WARM):
            given = arguments("warm", n)
            raw.record(
                f"raw:warm:{n}", json.dumps(given), json.dumps(handler(given, idempotency_key=None))
            )
        for n in range(calls):
            if mode == "raw-write":
                given = arguments("fresh", n)
                output = handler(given, idempotency_key=None)
                raw.record(f"raw:fresh:{n}", json.dumps(given), json.dumps(output))
            else:
                raw.read(f"raw:warm:{n % _WARM}")
    finally:
        raw.close()


def run(mode: str, calls: int) -> None:
    """Make ``calls`` calls of ``mode`` after a warm-up, in a ledger removed afterwards."""
    directory = _directory()
    try:
        if mode.startswith("raw-"):
            _run_raw(mode, calls, directory)
            return
        with SQLiteEffectLedger(directory / "ledger.db") as ledger:
            executor = EffectExecutor(ledger)
            for n in range(_WARM):
                executor.execute(CONTRACT, arguments("warm", n), handler)
            for n in range(_WARM):  # the first replay of each reads the ledger and caches it
                executor.execute(CONTRACT, arguments("warm", n), handler)
            uncached = EffectExecutor(ledger, replay_cache=0)
            for n in range(calls):
                if mode == "fresh":
                    executor.execute(CONTRACT, arguments("fresh", n), handler)
                elif mode == "cached":
                    executor.execute(CONTRACT, arguments("warm", n % _WARM), handler)
                elif mode == "uncached":
                    uncached.execute(CONTRACT, arguments("warm", n % _WARM), handler)
                else:
                    ledger.get(f"bench:warm:{n % _WARM}")
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
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        found = _COLLECTED.search(done.stderr)
        if found is None:
            sys.exit(f"callgrind printed no instruction count:\n{done.stderr[-2000:]}")
        counts.append(int(found.group(1)))
    return (counts[1] - counts[0]) // (_MANY - _FEW)


def main(argv: list[str]) -> None:
    """``MODE N`` runs the calls; ``--measure MODE`` (or ``all``) prints instructions per call."""
    first, second = (*argv, "", "")[:2]
    second = ALIASES.get(second, second)
    if len(argv) == len(("--measure", "MODE")) and first == "--measure" and second == "all":
        counts = {mode: measure(mode) for mode in MODES}
        for mode in MODES:
            floor = FLOORS.get(mode)
            beside = "" if floor is None else f"  {counts[mode] / counts[floor]:5.2f}x {floor}"
            sys.stdout.write(f"{mode:>9}: {counts[mode]:>9,} instructions per call{beside}\n")
    elif len(argv) == len(("--measure", "MODE")) and first == "--measure" and second in MODES:
        sys.stdout.write(f"{second}: {measure(second):,} instructions per call\n")
    elif (
        len(argv) == len(("MODE", "N")) and ALIASES.get(first, first) in MODES and second.isdigit()
    ):
        run(ALIASES.get(first, first), int(second))
    else:
        modes = ",".join([*MODES, "all"])
        sys.exit(f"usage: python docs/instructions.py [--measure] {{{modes}}} [N]")


if __name__ == "__main__":
    main(sys.argv[1:])
