"""docs/instructions.py, the command docs/benchmarks.md gives for instruction counts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "instructions.py"


def _made_by_mkdtemp() -> set[Path]:
    """The temporary directories in /dev/shm (PostgreSQL's own segments come and go there)."""
    shm = Path("/dev/shm")  # noqa: S108 - only looked at
    return (
        {path for path in shm.iterdir() if path.name.startswith("tmp")} if shm.is_dir() else set()
    )


@pytest.mark.parametrize(
    "mode", ["fresh", "uncached", "cached", "read", "raw-write", "raw-read", "guarded", "replay"]
)
def test_each_mode_makes_its_calls_and_leaves_nothing_behind(mode, tmp_path):
    """A few calls of each mode run to the end; the ledger it made is removed."""
    before = _made_by_mkdtemp()
    subprocess.run(
        [sys.executable, str(SCRIPT), mode, "3"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert _made_by_mkdtemp() - before == set()


def test_a_wrong_command_line_is_one_line_and_a_failure():
    """An unknown mode exits non-zero with the usage line."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "fast", "3"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        (
            "usage: python docs/instructions.py [--measure]"
            " {fresh,uncached,cached,read,raw-write,raw-read,all} [N]"
        )
    ]
