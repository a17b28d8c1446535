"""agent-effect scenarios and python -m proofs.matrix: reports, exit codes, bad input."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from effectguard.cli._progress import progress_on_stderr
from effectguard.cli.main import cli
from effectguard.testkit.scenarios import SCENARIOS
from proofs.matrix.__main__ import matrix

REPORT_FIELDS = {
    "scenario",
    "seed",
    "operation_id",
    "final_status",
    "attempts",
    "committed_effects",
    "duplicates_detected",
    "event_types",
    "invariant",
    "invariant_held",
    "checks",
    "details",
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_scenario_holds_its_invariant_and_writes_a_report(name, tmp_path):
    """Each scenario exits 0, prints a summary and writes a parseable report, invariant held."""
    output = tmp_path / "report.json"
    result = CliRunner().invoke(cli, ["--scenario", name, "--seed", "7", "--output", str(output)])
    assert result.exit_code == 0, result.output
    assert f"scenario   {name} (seed 7)" in result.output
    assert "invariant  HELD" in result.output
    report = json.loads(output.read_text())
    assert set(report) == REPORT_FIELDS
    assert report["scenario"] == name
    assert report["invariant_held"] is True
    assert all(check["held"] for check in report["checks"])
    assert report["committed_effects"] == 1
    assert report["duplicates_detected"] == 0
    assert report["event_types"][:1] == ["claimed"]


def test_list_names_every_scenario():
    """--list prints one line per scenario with its summary."""
    result = CliRunner().invoke(cli, ["--list"])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert [line.split()[0] for line in lines] == list(SCENARIOS)


def test_scenario_records_into_the_given_db_and_refuses_to_rerun_over_it(tmp_path):
    """--db keeps the ledger; running the same scenario into it again is refused, unchanged."""
    db = tmp_path / "ledger.db"
    runner = CliRunner()
    assert runner.invoke(cli, ["--scenario", "before-commit", "--db", str(db)]).exit_code == 0
    before = db.read_bytes()
    again = runner.invoke(cli, ["--scenario", "before-commit", "--db", str(db)])
    assert again.exit_code == 2
    assert "already holds operation 'invoice:before-commit-0:capture'" in again.output
    assert db.read_bytes() == before
    other = runner.invoke(cli, ["--scenario", "pending", "--db", str(db)])
    assert other.exit_code == 0
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM operations").fetchone()[0] == 2


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--scenario", "no-such"], "Invalid value for '--scenario'"),
        (["--scenario", "conflict", "--db", "{tmp}/missing/ledger.db"], "cannot create ledger"),
        (["--scenario", "conflict", "--db", "{tmp}/notes.txt"], "is not a SQLite database"),
        (["--scenario", "conflict", "--output", "{tmp}/missing/r.json"], "does not exist"),
        (["--scenario", "conflict", "--output", "{tmp}"], "is a directory"),
        (["--list", "--scenario", "conflict"], "cannot be combined"),
        (["--seed", "3"], "need --scenario NAME"),
        (["--scenario", "conflict", "matrix"], "No such command 'matrix'"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_changes_nothing(arguments, message, tmp_path):
    """Every bad input names the problem, exits 2 and leaves the files it named untouched."""
    notes = tmp_path / "notes.txt"
    notes.write_text("not a ledger\n")
    result = CliRunner().invoke(cli, [a.replace("{tmp}", str(tmp_path)) for a in arguments])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert notes.read_text() == "not a ledger\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_broken_contract_makes_the_matrix_fail_with_exit_1(tmp_path):
    """A key that changes per request, declared guaranteed, is caught as duplicates: exit 1."""
    output = tmp_path / "matrix.json"
    result = CliRunner().invoke(
        matrix,
        ["--episodes", "40", "--seed", "7", "--broken-contract", "--output", str(output)],
    )
    assert result.exit_code == 1, result.output
    assert "FAILED (contract deliberately broken)" in result.output
    assert result.output.splitlines()[-1].endswith(" failed")
    assert not result.output.splitlines()[-1].endswith(" 0 failed")
    report = json.loads(output.read_text())
    assert report["ok"] is False
    assert report["kinds"]["guaranteed-key"]["duplicate_effects"] > 0
    assert (
        report["total"]["duplicate_effects"]
        == report["kinds"]["guaranteed-key"]["duplicate_effects"]
    )


def test_matrix_prints_no_progress_bar_when_piped():
    """Piped, stdout gets the table and verdict only; progress is a plain line on stderr."""
    result = CliRunner().invoke(matrix, ["--episodes", "8", "--seed", "1"])
    assert result.exit_code == 0, result.output
    assert "episodes  [" not in result.output
    assert result.stdout.splitlines()[0].startswith("kind")
    assert result.stdout.splitlines()[-2].startswith("OK: 8 episodes (seed 1)")
    assert result.stdout.splitlines()[-1] == "matrix: 8 passed, 0 failed"
    assert "matrix episodes" not in result.stdout
    assert result.stderr.splitlines()[-1].startswith("matrix episodes: 8/8 in ")


def test_installed_console_script_runs_a_scenario(tmp_path):
    """The installed agent-effect script runs a scenario in a real process and writes its report."""
    script = Path(sys.executable).with_name("agent-effect")
    assert script.exists(), "install the package: pip install -e ."
    output = tmp_path / "report.json"
    completed = subprocess.run(
        [str(script), "--scenario", "after-commit-before-ack", "--output", str(output)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    assert "invariant  HELD" in completed.stdout
    report = json.loads(output.read_text())
    assert report["final_status"] == "CONFIRMED"
    assert report["committed_effects"] == 1


@pytest.mark.parametrize(
    ("scenario", "level", "shown"),
    [
        ("timeout-no-probe", None, None),
        ("timeout-no-probe", "WARNING", "effectguard.executor WARNING"),
        ("after-commit-before-ack", "WARNING", None),  # settled by the probe: nobody is needed
        ("after-commit-before-ack", "info", "effectguard.executor INFO"),
    ],
)
def test_the_librarys_log_lines_show_only_from_the_level_asked_for(scenario, level, shown):
    """The log stays off stderr unless EFFECTGUARD_LOG_LEVEL asks; a WARNING means a person."""
    script = Path(sys.executable).with_name("agent-effect")
    env = {k: v for k, v in os.environ.items() if k != "EFFECTGUARD_LOG_LEVEL"}
    if level is not None:
        env["EFFECTGUARD_LOG_LEVEL"] = level
    completed = subprocess.run(
        [str(script), "--scenario", scenario],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=env,
    )
    assert completed.returncode == 0, completed.stderr
    if shown is None:
        assert "effectguard" not in completed.stderr, completed.stderr
    else:
        assert shown in completed.stderr, completed.stderr


def test_an_unknown_log_level_is_one_line_and_exit_2():
    """EFFECTGUARD_LOG_LEVEL that names no level is refused before anything runs."""
    script = Path(sys.executable).with_name("agent-effect")
    completed = subprocess.run(
        [str(script), "--scenario", "after-commit-before-ack"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={**os.environ, "EFFECTGUARD_LOG_LEVEL": "loud"},
    )
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines() == [
        "agent-effect: EFFECTGUARD_LOG_LEVEL='LOUD' is not a logging level"
    ]


def test_matrix_progress_is_a_line_every_few_seconds_off_a_terminal():
    """Off a terminal, progress is one line per interval (and one at the end), not one per item."""
    stream = io.StringIO()
    now = [0.0]
    with progress_on_stderr(
        "matrix episodes", 10, stream=stream, every=5.0, clock=lambda: now[0]
    ) as tick:
        for _ in range(9):
            now[0] += 1.0
            tick(1)
        now[0] += 1.0
        tick(1)
    lines = stream.getvalue().splitlines()
    assert lines == [
        "matrix episodes: 5/10 in 5s (1.0/s, about 5s left)",
        "matrix episodes: 10/10 in 10s (1.0/s, about 0s left)",
    ]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--backend", "postgres"], "--backend postgres needs --db"),
        (["--db", "ledger.db"], "--db is for --backend postgres"),
        (["--backend", "postgres", "--db", "mysql://x/y"], "is not a postgresql:// URL"),
        (["--workers", "0"], "--workers"),
        (["--episodes", "0"], "Invalid value for '--episodes'"),
    ],
)
def test_matrix_bad_backend_options_are_one_line_errors(arguments, message):
    """A backend option that cannot work is refused before anything runs, with exit status 2."""
    result = CliRunner().invoke(matrix, ["--episodes", "2", *arguments])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "kind" not in result.stdout


def test_output_refuses_an_existing_file_unless_forced_and_writes_whole_reports(tmp_path):
    """An existing --output is kept, exit 2, before the scenario runs; --force replaces it whole."""
    output = tmp_path / "report.json"
    output.write_text("my notes\n")
    runner = CliRunner()
    refused = runner.invoke(cli, ["--scenario", "conflict", "--output", str(output)])
    assert refused.exit_code == 2, refused.output
    assert "already exists" in refused.output
    assert "--force" in refused.output
    assert "scenario" not in refused.output.splitlines()[0]  # refused before running
    assert output.read_text() == "my notes\n"
    forced = runner.invoke(cli, ["--scenario", "conflict", "--output", str(output), "--force"])
    assert forced.exit_code == 0, forced.output
    assert json.loads(output.read_text())["scenario"] == "conflict"
    # Nothing is left beside it: the temporary file was renamed onto it.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]
    assert runner.invoke(cli, ["--force"]).exit_code == 2


def test_output_with_a_name_too_long_is_one_line(tmp_path):
    """A path the OS refuses (ENAMETOOLONG) is one line naming --output, exit 2."""
    result = CliRunner().invoke(
        cli, ["--scenario", "conflict", "--output", str(tmp_path / ("r" * 5000))]
    )
    assert result.exit_code == 2, result.output
    assert "--output" in result.output
    assert "Traceback" not in result.output
    assert len(result.output.splitlines()) <= 3
