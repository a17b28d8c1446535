"""The floor scripts in docs/ (storage, PostgreSQL, threads), run as benchmarks.md runs them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(r"^(?P<name>.+?)\s+(?P<us>[0-9.]+) us\s+(?P<ratio>[0-9.]+)x the floor$")


def _one_round(script: str, *arguments: str) -> str:
    """What ``docs/<script>`` prints for one round (it must exit 0)."""
    return subprocess.run(
        [sys.executable, str(ROOT / "docs" / script), *arguments, "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout


def _report(script: str, *arguments: str) -> list[re.Match[str]]:
    """Run ``docs/<script>`` for one round; its lines, each checked to be a measure's line."""
    printed = _one_round(script, *arguments)
    lines = [LINE.match(line) for line in printed.splitlines()]
    assert all(lines), printed
    found = [line for line in lines if line is not None]
    assert found[0]["name"].startswith("floor")
    assert found[0]["ratio"] == "1.00"
    assert all(float(line["us"]) > 0 for line in found)
    return found


def _floor_schemas(url: str) -> set[str]:
    import psycopg  # noqa: PLC0415 - only the PostgreSQL script's test needs the driver

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'pgfloor\\_%'"
        ).fetchall()
    return {row[0] for row in rows}


def test_the_storage_floor_script_reports_each_part_beside_the_floor():
    """SQLite, one round: seven measures, each with its microseconds and its ratio to the floor."""
    assert len(_report("storage_floor.py")) == 7


def test_the_postgres_floor_reports_each_part_and_drops_its_schemas(postgres_url: str):
    """PostgreSQL, one round: eight measures; no schema of the script's is left behind."""
    before = _floor_schemas(postgres_url)
    assert len(_report("postgres_floor.py", postgres_url)) == 8
    assert _floor_schemas(postgres_url) == before


def test_the_postgres_floor_without_a_url_is_one_line_and_a_failure():
    """Without a PostgreSQL URL the script says how to run it and exits non-zero."""
    pytest.importorskip("psycopg", reason="the script needs psycopg: pip install -e '.[postgres]'")
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "postgres_floor.py")],
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


THREAD_LINE = re.compile(
    r"^(?P<name>.+?)\s+(?P<rate>[0-9]+) ops/s\s+(?P<speedup>[0-9.]+)x one thread"
    r"\s+CPU (?P<cpu>[0-9.]+)$"
)


def test_the_thread_floor_reports_each_measure_beside_its_one_thread():
    """SQLite, one round: six measures, each a rate; each kind's 1-thread line is its 1.00x."""
    printed = _one_round("thread_floor.py")
    lines = [THREAD_LINE.match(line) for line in printed.splitlines()]
    assert all(lines), printed
    found = {line["name"]: line for line in lines if line is not None}
    assert len(found) == 6
    for one in ("floor, 1 thread", "effectguard, 1 thread"):
        assert found[one]["speedup"] == "1.00"
    for line in found.values():
        assert int(line["rate"]) > 0
        assert 0 < float(line["cpu"]) <= 2.5  # two cores, and some start-up slack
