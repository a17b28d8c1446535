"""docs/postgres_floor.py, the command docs/benchmarks.md gives for PostgreSQL's storage floor."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "postgres_floor.py"
LINE = re.compile(r"^(?P<name>.+?)\s+(?P<us>[0-9.]+) us\s+(?P<ratio>[0-9.]+)x the floor$")


def _floor_schemas(url: str) -> set[str]:
    import psycopg  # noqa: PLC0415 - only this test's PostgreSQL half needs the driver

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'pgfloor\\_%'"
        ).fetchall()
    return {row[0] for row in rows}


def test_the_postgres_floor_reports_each_part_and_drops_its_schemas(postgres_url: str):
    """One round: eight measures with their ratio to the floor; no schema is left behind."""
    before = _floor_schemas(postgres_url)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), postgres_url, "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    lines = [LINE.match(line) for line in done.stdout.splitlines()]
    assert len(lines) == 8, done.stdout
    assert all(lines), done.stdout
    assert lines[0]["name"].startswith("floor")
    assert lines[0]["ratio"] == "1.00"
    assert all(float(match["us"]) > 0 for match in lines if match)
    assert _floor_schemas(postgres_url) == before


def test_a_missing_url_is_one_line_and_a_failure():
    """Without a PostgreSQL URL the script says how to run it and exits non-zero."""
    pytest.importorskip("psycopg", reason="the script needs psycopg: pip install -e '.[postgres]'")
    done = subprocess.run(
        [sys.executable, str(SCRIPT)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "usage: python docs/postgres_floor.py postgresql://URL [ROUNDS]"
    ]
