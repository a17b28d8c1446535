"""python -m benchmarks from the command line: bad input is refused before anything runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from postgres_support import import_psycopg

from benchmarks.__main__ import bench

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--ops", "3", "--rounds", "1", "--ledger-size", "100"]


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(bench, list(args))
    return result.exit_code, result.output


def test_postgres_without_a_url_is_refused():
    """--backend postgres needs --db URL: exit 2 and one line saying so."""
    code, output = invoke("--backend", "postgres", *TINY)
    assert code == 2
    assert "--backend postgres needs --db postgresql://" in output


def test_a_postgres_url_for_the_sqlite_backend_is_refused(tmp_path: Path):
    """A postgresql:// --db without --backend postgres is refused, not taken for a directory."""
    code, output = invoke("--db", "postgresql://nobody@127.0.0.1:1/none", *TINY)
    assert code == 2
    assert "add --backend postgres" in output
    assert not (Path.cwd() / "postgresql:").exists()


def test_a_db_that_is_not_a_directory_is_refused(tmp_path: Path):
    """For SQLite, --db must be a directory; a file is refused and left as it was."""
    path = tmp_path / "ledger.db"
    path.write_bytes(b"keep me")
    code, output = invoke("--db", str(path), *TINY)
    assert code == 2
    assert "is not a directory" in output
    assert path.read_bytes() == b"keep me"
    assert sorted(tmp_path.iterdir()) == [path]


def test_an_unreachable_postgres_is_one_line_and_exit_2():
    """A PostgreSQL URL nobody answers at is a one-line error, exit 2."""
    import_psycopg()
    code, output = invoke("--backend", "postgres", "--db", "postgresql://x@127.0.0.1:1/none", *TINY)
    assert code == 2
    assert output.startswith("Error: cannot connect to postgresql://x@127.0.0.1:1/none")
    assert len(output.strip().splitlines()) == 1


@pytest.mark.parametrize("option", ["--ops", "--rounds", "--ledger-size"])
def test_sizes_below_one_are_refused(option: str):
    """--ops, --rounds and --ledger-size below 1 are usage errors (exit 2)."""
    code, output = invoke(option, "0")
    assert code == 2
    assert option in output


def test_an_output_in_a_missing_directory_is_refused_before_running(tmp_path: Path):
    """--output into a directory that does not exist fails at once (nothing is measured)."""
    code, output = invoke("--output", str(tmp_path / "missing" / "bench.json"), *TINY)
    assert code == 2
    assert "does not exist" in output
    assert "bench:" not in output  # no measurement started


@pytest.mark.slow
def test_the_installed_command_writes_the_same_report_it_prints(tmp_path: Path):
    """A real `python -m benchmarks --json --output` run: exit 0, stdout and file hold a report."""
    output = tmp_path / "bench.json"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            *TINY,
            "--db",
            str(tmp_path),
            "--json",
            "--output",
            str(output),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    printed = json.loads(completed.stdout)
    assert json.loads(output.read_text()) == printed
    assert printed["ok"] is True
    assert "bench: guarded calls" in completed.stderr
    assert sorted(tmp_path.iterdir()) == [output]
