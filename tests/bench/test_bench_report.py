"""A tiny bench run completes on each backend and its JSON report has the documented shape.

Timings are never asserted: only that every measurement ran and what it counted.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from postgres_support import import_psycopg

from benchmarks.__main__ import bench

TINY = ["--ops", "4", "--rounds", "1", "--ledger-size", "200"]

TOP_LEVEL = {
    "backend",
    "settings",
    "environment",
    "guarded_call",
    "replay",
    "decorator",
    "decorator_replay",
    "throughput",
    "asyncio",
    "ledger_bytes",
    "large_ledger",
    "cli_startup",
    "telemetry",
    "targets",
    "ok",
    "seconds",
}
COMPARISON = {
    "subject",
    "baseline",
    "subject_us",
    "baseline_us",
    "overhead_us",
    "ratio",
    "target_ratio",
    "met",
    "rounds",
    "note",
}
TARGETS = {
    "guarded_call",
    "replay",
    "decorator",
    "four_threads_at_least_one",
    "zero_lock_errors",
    "list_quarantined",
    "bytes_per_confirmed_operation",
    "cli_startup",
    "four_threads_vs_one_at_least_2x",
    "four_threads_p99_vs_one_at_most_3x",
    "four_processes_vs_one_at_least_3x",
    "asyncio_tasks_vs_one_thread_at_least_2x",
    "asyncio_loop_lag_p99_under_5ms",
    "list_100_quarantined_under_2ms",
    "list_1000_quarantined_under_10ms",
}


def where(backend: str, directory: Path, request: pytest.FixtureRequest) -> str:
    """Where a bench run writes: ``directory``, or the test PostgreSQL database."""
    if backend == "sqlite":
        return str(directory)
    url: str = request.getfixturevalue("postgres_url")
    return url


def run(backend: str, db: str, *extra: str) -> str:
    result = CliRunner().invoke(bench, ["--backend", backend, "--db", db, *TINY, *extra])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture(scope="module")
def reports() -> dict[str, dict[str, Any]]:
    """Reports of this module's runs by backend: one tiny run per backend serves every test."""
    return {}


@pytest.fixture
def report(
    backend: str,
    reports: dict[str, dict[str, Any]],
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> dict[str, Any]:
    """The JSON report of a tiny bench run on the backend under test."""
    if backend not in reports:
        db = where(backend, tmp_path_factory.mktemp("bench"), request)
        reports[backend] = json.loads(run(backend, db, "--json"))
    return reports[backend]


def test_the_json_report_has_the_documented_shape(backend: str, report: dict[str, Any]):
    """--json prints one document with every measurement, its baseline, ratio and target."""
    assert set(report) == TOP_LEVEL
    assert report["backend"] == backend
    assert report["settings"] == {"ops": 4, "rounds": 1, "ledger_size": 200}
    assert report["environment"]["cpus"] >= 1
    for name in ("guarded_call", "replay", "decorator", "decorator_replay"):
        assert set(report[name]) >= COMPARISON, name
        assert len(report[name]["rounds"]["subject_us"]) == 1
        assert report[name]["subject_us"] > 0
        assert report[name]["baseline_us"] > 0
    # Issue 15's targets, per backend.
    assert report["guarded_call"]["target_ratio"] == {"sqlite": 1.1, "postgres": 1.5}[backend]
    assert report["replay"]["target_ratio"] == 2.0
    assert report["ledger_bytes"]["target_bytes"] == {"sqlite": 700, "postgres": 1000}[backend]
    assert report["decorator"]["target_ratio"] == 1.1
    assert set(report["targets"]) == TARGETS
    assert report["ok"] is True


def test_a_guarded_call_takes_two_commits_and_a_replay_none(report: dict[str, Any]):
    """The report counts the ledger's work: 2 commits per call, 1 read per replay.

    A call also reads once first on SQLite; on PostgreSQL its claim is that read.
    """
    guarded, replay = report["guarded_call"], report["replay"]
    reads = 0.0 if report["backend"] == "postgres" else 1.0
    assert (guarded["commits_per_call"], guarded["reads_per_call"]) == (2.0, reads)
    parts = guarded["breakdown"]
    assert parts["ledger_primitives_us"] > 0
    total = parts["by_hand_us"] + parts["ledger_storage_us"] + parts["executor_us"]
    assert total == pytest.approx(guarded["subject_us"], abs=0.5)
    assert (replay["commits_per_replay"], replay["reads_per_replay"]) == (0.0, 1.0)


def test_throughput_runs_every_configuration_without_a_lock_error(report: dict[str, Any]):
    """1, 2, 4 and 8 threads and 1 and 4 processes each ran every call; none failed."""
    throughput = report["throughput"]
    shapes = [(item["mode"], item["workers"]) for item in throughput["configurations"]]
    assert shapes == [
        ("threads", 1),
        ("threads", 2),
        ("threads", 4),
        ("threads", 8),
        ("processes", 1),
        ("processes", 4),
    ]
    for item in throughput["configurations"]:
        assert item["lock_errors"] == 0
        assert item["errors"] == 0, item["first_error"]
        assert item["ops_per_second"] > 0
    assert throughput["lock_errors"] == 0


def test_throughput_reports_latency_percentiles_and_the_issue_15_ratios(
    backend: str, report: dict[str, Any]
):
    """Every configuration has a p50 and a p99 per call; the 4-vs-1 ratios carry their targets."""
    throughput = report["throughput"]
    for item in throughput["configurations"]:
        assert 0 < item["p50_ms"] <= item["p99_ms"], item
        assert len(item["p99_rounds_ms"]) == 1
    assert throughput["four_threads_vs_one_target"] == 2.0
    assert throughput["four_threads_p99_vs_one"] > 0
    assert throughput["four_threads_p99_vs_one_target"] == 3.0
    assert throughput["four_processes_vs_one"] > 0
    on_postgres = backend == "postgres"
    assert throughput["four_processes_vs_one_target"] == (3.0 if on_postgres else None)
    assert (report["targets"]["four_processes_vs_one_at_least_3x"] is None) is not on_postgres


def test_asyncio_tasks_are_measured_beside_one_thread_with_the_loop_lag(report: dict[str, Any]):
    """100 tasks calling execute_async and 1 sync thread each ran; the loop's lag was sampled."""
    section = report["asyncio"]
    assert section["tasks"] == 100
    assert section["tasks_ops_per_second"] > 0
    assert section["thread_ops_per_second"] > 0
    assert section["ratio"] > 0
    assert (section["target_ratio"], section["target_lag_ms"]) == (2.0, 5.0)
    assert section["loop_lag_p99_ms"] >= 0
    assert len(section["rounds"]["loop_lag_p99_ms"]) == 1


def test_the_large_ledger_is_built_and_read(report: dict[str, Any]):
    """The large ledger has the asked size; one in a hundred is quarantined and listed."""
    big = report["large_ledger"]
    assert big["operations"] == 200
    assert big["quarantined"] == 2
    assert big["list_quarantined"]["returned"] == 2
    listed = [(item["limit"], item["returned"]) for item in big["list_quarantined_by_limit"]]
    assert listed == [(100, 2), (1000, 2)]
    targets = [item["target_ms"] for item in big["list_quarantined_by_limit"]]
    assert targets == [2.0, 10.0]
    assert big["events"]["events_per_operation"] == 2  # claimed, confirmed
    assert big["bytes_per_operation"] > 0
    written = report["ledger_bytes"]
    # warm-ups, guarded calls and the ledger's own writes, decorated and direct calls, counted calls
    assert written["operations"] == 2 * 20 + 2 * 4 + 20 + 2 * 4 + 10
    assert written["bytes_per_operation"] > 0


def test_cli_startup_is_timed_beside_a_bare_click_import(report: dict[str, Any]):
    """The CLI's start-up is timed in fresh interpreters beside ``import click, sqlite3, json``."""
    startup = report["cli_startup"]
    assert set(startup) == COMPARISON | {"runs"}
    assert startup["subject"] == "agent-effect-ops --help"
    assert startup["baseline"] == 'python -c "import click, sqlite3, json"'
    assert startup["runs"] == 3
    assert len(startup["rounds"]["subject_us"]) == len(startup["rounds"]["baseline_us"]) == 3
    assert startup["baseline_us"] > 0
    assert startup["subject_us"] > 0
    assert startup["target_ratio"] == 2.0


def test_telemetry_is_measured_when_the_otel_extra_is_installed(report: dict[str, Any]):
    """Instrumented (no-op providers) vs not, fresh and replayed; a note without the extra."""
    section = report["telemetry"]
    if importlib.util.find_spec("opentelemetry") is None:
        assert section == {"skipped": "the otel extra is not installed"}
        return
    assert set(section) == {"fresh", "replay"}
    for item in section.values():
        assert set(item) == COMPARISON
        assert item["subject_us"] > 0
        assert item["baseline_us"] > 0
        assert item["target_ratio"] is None
        assert "no-op" in item["subject"]


def test_the_table_names_each_measurement_and_the_run_leaves_nothing_behind(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
):
    """Without --json a table is printed; every ledger file or schema made is gone at the end."""
    db = where(backend, tmp_path, request)
    table = run(backend, db)
    reads = "0 reads" if backend == "postgres" else "1 read"
    labels = (f"guarded call (2 commits, {reads})", "replay vs indexed read", "throughput")
    labels += ("8 threads", "1 process ", "100 asyncio tasks", "loop lag p99", "limit=1,000")
    for label in (*labels, "CLI start-up", "agent-effect-ops --help"):
        assert label in table
    assert "large ledger: 200 operations (2 quarantined)" in table
    if backend == "sqlite":
        assert list(tmp_path.iterdir()) == []
        return
    with import_psycopg().connect(db) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'ebench\\_%'"
        ).fetchone()
    assert left == (0,)
