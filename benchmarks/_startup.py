"""CLI start-up: ``agent-effect-ops --help`` beside an interpreter importing only what it must.

An operator's first command during an incident should answer at once. The
operator CLI needs Python, Click, sqlite3 and json whatever we do, so the
baseline is a fresh interpreter importing exactly those; the subject is a
fresh interpreter running the CLI's ``--help`` the way the installed script
does. The two alternate, so a slow moment of a shared machine lands on both.
"""

from __future__ import annotations

import subprocess
import sys
import time

from benchmarks._config import BenchError
from benchmarks._stats import Comparison

__all__ = ["BASELINE", "SUBJECT", "TARGET", "measure", "runs_for"]

#: What every start of the CLI must pay anyway.
BASELINE = "import click, sqlite3, json"
#: What the installed ``agent-effect-ops`` script runs for ``--help``.
SUBJECT = (
    "import sys; from effectguard.cli.ops import main; "
    "sys.argv = ['agent-effect-ops', '--help']; main()"
)
#: The CLI's start-up may cost at most this many times the baseline's.
TARGET = 2.0


def runs_for(rounds: int) -> int:
    """Interpreter starts of each kind for a bench of ``rounds`` rounds: odd, at least three."""
    return max(3, 2 * rounds + 1)


def _start_us(code: str) -> float:
    started = time.perf_counter()
    done = subprocess.run(  # noqa: S603 - the running interpreter, with our own constant code
        [sys.executable, "-c", code],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
        timeout=60,
    )
    elapsed = (time.perf_counter() - started) * 1_000_000
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        msg = f"could not time the CLI's start-up: {code!r} exited {done.returncode}: {last}"
        raise BenchError(msg)
    return elapsed


def measure(runs: int) -> Comparison:
    """Time ``runs`` fresh starts of the CLI and of the baseline, alternating; microseconds each.

    Raises:
        BenchError: either command failed (the CLI is broken or not importable).
    """
    # One start of each first, so that both find their bytecode compiled and cached.
    _start_us(SUBJECT)
    _start_us(BASELINE)
    subject: list[float] = []
    baseline: list[float] = []
    for index in range(runs):
        pair = [(subject, SUBJECT), (baseline, BASELINE)]
        if index % 2:
            pair.reverse()
        for times, code in pair:
            times.append(_start_us(code))
    return Comparison(
        subject="agent-effect-ops --help",
        baseline=f'python -c "{BASELINE}"',
        subject_rounds=tuple(subject),
        baseline_rounds=tuple(baseline),
        target=TARGET,
        note="each round is one fresh interpreter; medians of the rounds",
    )
