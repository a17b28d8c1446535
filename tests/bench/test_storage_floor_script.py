"""docs/storage_floor.py, the command docs/benchmarks.md gives, runs and reports every part."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(r"^(?P<name>.+?)\s+(?P<us>[0-9.]+) us\s+(?P<ratio>[0-9.]+)x the floor$")


def test_the_storage_floor_script_reports_each_part_beside_the_floor():
    """One round: seven measures, each with its microseconds and its ratio to the floor."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "storage_floor.py"), "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    lines = [LINE.match(line) for line in done.stdout.splitlines()]
    assert len(lines) == 7, done.stdout
    assert all(lines), done.stdout
    assert lines[0]["name"].startswith("floor")
    assert lines[0]["ratio"] == "1.00"
    assert all(float(match["us"]) > 0 for match in lines if match)
