"""The fault matrix: zero duplicates, lost confirmations and needless quarantines, reproducibly."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from effectguard.testkit._crash.kinds import ContractKind
from proofs.matrix import CrashPoint, MatrixReport, run_matrix
from proofs.matrix.__main__ import matrix


@pytest.fixture(scope="module")
def report() -> MatrixReport:
    """The matrix CI runs: 300 episodes from seed 7."""
    return run_matrix(300, 7)


def test_matrix_finds_no_duplicate_no_lost_confirmation_no_needless_quarantine(report):
    """At 300 episodes / seed 7 every contract kind keeps every effect exactly-once."""
    assert report.ok
    assert report.ledger_verified
    assert report.total.episodes == 300
    assert report.total.duplicate_effects == 0
    assert report.total.lost_confirmations == 0
    assert report.total.needlessly_quarantined == 0


def test_matrix_covers_every_kind_and_crash_point_with_real_kills(report):
    """Every contract kind and crash point is exercised, and children really were SIGKILLed."""
    assert {name: m.episodes for name, m in report.kinds.items()} == {
        kind.value: 75 for kind in ContractKind
    }
    assert all(report.crash_points[point.value].episodes > 0 for point in CrashPoint)
    killed = report.crash_points[CrashPoint.BEFORE_COMMIT].killed
    killed += report.crash_points[CrashPoint.AFTER_COMMIT].killed
    assert killed == report.total.killed > 0
    assert report.crash_points[CrashPoint.STALL].killed == 0


def test_matrix_quarantines_only_where_no_evidence_can_settle_it(report):
    """A contract with nothing to go on quarantines; eventual reads leave some unresolved."""
    assert report.kinds[ContractKind.NO_GUARANTEE].quarantined > 0
    assert report.kinds[ContractKind.EVENTUAL_PROBE].quarantined == 0
    assert report.total.confirmed + report.total.quarantined + report.total.unresolved == 300


def test_same_seed_gives_the_same_report_through_the_cli(report, tmp_path):
    """The matrix command with the same episodes and seed writes exactly the same JSON report."""
    output = tmp_path / "matrix.json"
    result = CliRunner().invoke(
        matrix, ["--episodes", "300", "--seed", "7", "--output", str(output)]
    )
    assert result.exit_code == 0, result.output
    assert "OK: 300 episodes (seed 7)" in result.output
    assert json.loads(output.read_text()) == report.to_json()


def test_another_seed_draws_other_episodes():
    """The seed matters: two seeds draw different episodes."""
    first = [r.to_json() for r in run_matrix(12, 1).results]
    second = [r.to_json() for r in run_matrix(12, 2).results]
    assert first != second


def test_broken_contract_is_caught_as_duplicates():
    """A key that changes per request, declared guaranteed, shows up as duplicate effects."""
    broken = run_matrix(40, 7, broken_contract=True)
    assert not broken.ok
    assert broken.kinds[ContractKind.GUARANTEED_KEY].duplicate_effects > 0
    honest_kinds = [kind for kind in ContractKind if kind is not ContractKind.GUARANTEED_KEY]
    assert all(broken.kinds[kind].duplicate_effects == 0 for kind in honest_kinds)


def test_episodes_must_be_positive():
    """Zero episodes is a ValueError, not an empty success."""
    with pytest.raises(ValueError, match="episodes must be >= 1"):
        run_matrix(0, 7)


@pytest.fixture(scope="module")
def replaced_report() -> MatrixReport:
    """60 episodes from seed 7: eight move the ledger file away, at both points, both ways."""
    return run_matrix(60, 7)


def test_ledger_replaced_episodes_are_refused_then_complete_exactly_once(replaced_report):
    """A moved-away or replaced ledger file refuses both calls; restored, one effect each."""
    row = replaced_report.ledger_replaced
    assert row.episodes == 8
    assert row.refused == 16
    assert row.duplicate_effects == row.lost_confirmations == row.needlessly_quarantined == 0
    replaced = [r for r in replaced_report.results if r.spec.ledger_replaced != "none"]
    assert {(r.spec.ledger_replaced.value, r.spec.replaced_by_empty) for r in replaced} == {
        ("before-claim", True),
        ("before-claim", False),
        ("between-claim-and-outcome", True),
        ("between-claim-and-outcome", False),
    }
    for result in replaced:
        assert result.refused == 2
        assert result.dispatched_when_refused == 0  # the provider saw no request from it
        assert result.committed == 1  # counted by the fake provider after the restore
        assert result.final_status in ("CONFIRMED", "QUARANTINED")
    assert "  ledger-replaced" in replaced_report.table()
    assert replaced_report.to_json()["ledger_replaced"]["refused"] == 16
    assert replaced_report.ok


def test_a_process_that_ignores_the_refusal_is_caught_at_the_provider():
    """Reopening the path and carrying on dispatches again: duplicates, and the report fails."""
    broken = run_matrix(60, 7, ignore_ledger_refusal=True)
    assert broken.ledger_replaced.duplicate_effects > 0
    assert any(r.dispatched_when_refused for r in broken.results)
    assert not broken.ok
    honest = [r for r in broken.results if r.spec.ledger_replaced == "none"]
    assert all(r.duplicates == 0 for r in honest)
