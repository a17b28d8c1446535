"""The fault matrix with several processes contending, on SQLite and on PostgreSQL."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest
from postgres_support import import_psycopg

from effectguard.testkit._crash.kinds import ContractKind
from effectguard.testkit.clock import SharedClock
from proofs.matrix import MatrixReport, Metrics, run_matrix

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sqlite_report() -> MatrixReport:
    """60 episodes from seed 5, every call round made by two processes on one SQLite file."""
    return run_matrix(60, 5, workers=2)


def _assert_exactly_once(report: MatrixReport) -> None:
    assert report.ok
    assert report.ledger_verified
    assert report.total.duplicate_effects == 0
    assert report.total.lost_confirmations == 0
    assert report.total.needlessly_quarantined == 0
    assert report.total.unexpected == 0
    # Judged by the providers' own files, which every process wrote to.
    assert all(result.committed <= 1 for result in report.results)


def test_two_processes_on_sqlite_keep_every_effect_exactly_once(sqlite_report):
    """Two processes calling every operation at once: no duplicate, lost or needless outcome."""
    _assert_exactly_once(sqlite_report)
    assert sqlite_report.workers == 2
    assert sqlite_report.total.killed > 0  # SIGKILLed owners were taken over by the survivors


def test_two_processes_on_sqlite_really_contended(sqlite_report):
    """The report shows takeovers, lease expiries, fenced-out writes and calls that met a lease."""
    total = sqlite_report.total
    assert sqlite_report.contended
    assert total.takeovers > 0
    assert 0 < total.lease_expiries <= total.takeovers
    assert total.fenced > 0
    assert total.met_live_lease > 0
    assert sqlite_report.to_json()["contended"] is True
    assert sqlite_report.to_json()["workers"] == 2


def test_ledger_faults_on_sqlite_have_their_expected_outcomes(sqlite_report):
    """At claim: refused, nothing sent; at outcome: reconciled later; clock jump: taken over."""
    faults = sqlite_report.ledger_faults
    assert set(faults) == {
        "ledger-unavailable-at-claim",
        "ledger-unavailable-at-outcome",
        "clock-jump",
    }
    assert all(metrics.episodes > 0 for metrics in faults.values())
    assert all(metrics.unexpected == 0 for metrics in faults.values())
    at_claim = faults["ledger-unavailable-at-claim"]
    assert at_claim.refused == at_claim.episodes
    at_outcome = faults["ledger-unavailable-at-outcome"]
    assert at_outcome.refused == at_outcome.episodes
    assert at_outcome.takeovers >= at_outcome.episodes  # the DISPATCHED row was taken over later
    jump = faults["clock-jump"]
    assert jump.takeovers >= jump.episodes
    assert jump.fenced >= jump.episodes  # the owner's late write was refused
    for result in sqlite_report.results:
        if result.spec.ledger_fault.value in faults:
            assert result.committed <= 1
    table = sqlite_report.table()
    assert "  clock-jump" in table
    assert "expected outcomes of the ledger faults:" in table


def test_a_broken_contract_is_caught_with_workers_too():
    """A new key per request, declared guaranteed, duplicates effects across processes too."""
    broken = run_matrix(24, 5, workers=2, broken_contract=True)
    assert not broken.ok
    assert broken.kinds[ContractKind.GUARANTEED_KEY].duplicate_effects > 0


def test_a_run_with_workers_that_never_contended_fails():
    """Workers that never met prove nothing about concurrency: the report is not ok."""
    quiet = MatrixReport(
        seed=1,
        broken_contract=False,
        total=Metrics(episodes=10, confirmed=10),
        kinds={},
        crash_points={},
        results=(),
        workers=2,
    )
    assert not quiet.contended
    assert not quiet.ok
    assert dataclasses.replace(quiet, workers=1).ok  # one process is not asked to contend


def test_a_fault_that_never_happened_fails_the_report(monkeypatch):
    """A ledger that never becomes unavailable makes those episodes unexpected, not a pass."""
    from proofs.matrix import run as run_module  # noqa: PLC0415 - the module patched
    from proofs.matrix.site import SQLiteSite  # noqa: PLC0415 - subclassed here only

    class NeverDown(SQLiteSite):
        def make_unavailable(self) -> None:
            """Pretend: the ledger stays writable."""

    monkeypatch.setattr(run_module, "open_site", lambda backend, workdir, db: NeverDown(workdir))
    report = run_matrix(60, 5)
    assert report.ledger_faults["ledger-unavailable-at-claim"].unexpected > 0
    assert report.total.duplicate_effects == 0
    assert not report.ok


def test_the_shared_clock_is_one_time_for_several_processes(tmp_path):
    """An advance in another process is seen here, and one here is seen there."""
    clock = SharedClock.create(tmp_path / "clock", 1000.0)
    code = (
        "import sys\n"
        "from effectguard.testkit.clock import SharedClock\n"
        "clock = SharedClock(sys.argv[1])\n"
        "print(clock())\n"
        "clock.advance(5)\n"
    )
    clock.advance(2.5)
    seen = subprocess.run(
        [sys.executable, "-c", code, str(clock.path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert float(seen) == 1002.5
    assert clock() == 1007.5
    with pytest.raises(ValueError, match="only moves forward"):
        clock.advance(-1)
    clock.close()


@pytest.mark.postgres
def test_two_processes_on_postgres_keep_every_effect_exactly_once(postgres_url):
    """On PostgreSQL, with lost commit acks and outages through a proxy: exactly once, contended."""
    psycopg = import_psycopg()
    report = run_matrix(60, 6, workers=2, backend="postgres", db=postgres_url)
    _assert_exactly_once(report)
    assert report.contended
    assert report.total.killed > 0
    faults = report.ledger_faults
    assert set(faults) == {
        "ledger-unavailable-at-claim",
        "ledger-unavailable-at-outcome",
        "lost-claim-ack",
        "lost-outcome-ack",
        "clock-jump",
    }
    assert all(metrics.episodes > 0 for metrics in faults.values())
    assert all(metrics.unexpected == 0 for metrics in faults.values())
    assert faults["lost-claim-ack"].refused == faults["lost-outcome-ack"].refused == 0
    assert report.ledger_replaced.episodes == 0  # no file to replace on PostgreSQL
    prefix = f"ematrix_{os.getpid()}_"
    with psycopg.connect(postgres_url) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE starts_with(nspname, %s)", (prefix,)
        ).fetchone()[0]
    assert left == 0  # the run's schema was dropped
