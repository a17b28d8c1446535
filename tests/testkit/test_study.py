"""The strategy study: the same faults through four strategies, counted by the destination."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from effectguard.testkit.clock import ManualClock
from proofs.study import Cost, Strategy, StudyReport, run_study
from proofs.study.__main__ import study
from proofs.study.destination import Destination, Lookup, StudyFault
from proofs.study.strategies import Subject, call


@pytest.fixture(scope="module")
def report() -> StudyReport:
    """The study CI runs: 500 episodes from seed 7."""
    return run_study(500, 7)


def test_effectguard_duplicates_nothing_and_the_naive_baseline_does(report):
    """Effectguard's row has no duplicate and loses nothing; naive retry duplicates and loses."""
    guarded = report.costs[Strategy.EFFECTGUARD]["total"]
    naive = report.costs[Strategy.NAIVE]["total"]
    assert report.ok
    assert guarded.episodes == naive.episodes == 500
    assert guarded.duplicates == 0
    assert guarded.lost == 0
    assert naive.duplicates > 0
    assert naive.lost > 0  # a long outage exhausts three blind resends


def test_late_commits_defeat_verification_and_key_less_destinations_defeat_keys(report):
    """Verify-then-retry duplicates on late commits; a key alone, where keys are ignored."""
    assert report.costs[Strategy.VERIFY]["late-commit"].duplicates > 0
    assert report.costs[Strategy.KEY_ONLY]["lost-ack"].duplicates > 0
    assert report.costs[Strategy.KEY_ONLY]["total"].duplicates < (
        report.costs[Strategy.NAIVE]["total"].duplicates
    )


def test_the_same_seed_gives_the_same_report(report):
    """The study is deterministic for a seed: two runs, one JSON."""
    assert run_study(500, 7).to_json() == report.to_json()
    assert run_study(50, 8).to_json() != run_study(50, 9).to_json()


def _destination(fault: StudyFault, *, keyed: bool, lookup: Lookup, clock: ManualClock):
    return Destination(keyed=keyed, lookup=lookup, fault=fault, clock=clock)


def test_a_late_commit_lands_behind_a_verified_resend():
    """An eventual read says "missing" after the timeout; verify resends; both land."""
    clock = ManualClock(0.0)
    destination = _destination(
        StudyFault.LATE_COMMIT, keyed=False, lookup=Lookup.EVENTUAL, clock=clock
    )
    call(Strategy.VERIFY, destination, Subject("op", "key"))
    destination.settle()
    assert destination.committed == 2
    strong = _destination(StudyFault.LATE_COMMIT, keyed=False, lookup=Lookup.STRONG, clock=clock)
    call(Strategy.VERIFY, strong, Subject("op", "key"))  # the read sees it in flight
    strong.settle()
    assert strong.committed == 1


def test_a_key_older_than_the_retention_window_is_forgotten():
    """A resend with the same key a day later commits again: the key guarantee has a window."""
    clock = ManualClock(0.0)
    destination = _destination(StudyFault.LOST_ACK, keyed=True, lookup=Lookup.STRONG, clock=clock)
    assert call(Strategy.KEY_ONLY, destination, Subject("op", "key")).value == "done"
    assert destination.committed == 1  # the resend within the window was deduplicated
    clock.advance(25 * 3600)
    destination.send("key")
    assert destination.committed == 2


def test_the_verdict_needs_a_failing_baseline_and_a_clean_effectguard_row():
    """No naive duplicate proves nothing; any effectguard duplicate fails."""

    def report_with(naive: int, guarded: int) -> StudyReport:
        costs = {strategy.value: {"total": Cost()} for strategy in Strategy}
        costs[Strategy.NAIVE.value]["total"].duplicates = naive
        costs[Strategy.EFFECTGUARD.value]["total"].duplicates = guarded
        return StudyReport(seed=0, episodes=1, costs=costs)

    assert report_with(naive=3, guarded=0).ok
    assert not report_with(naive=0, guarded=0).ok
    assert not report_with(naive=3, guarded=1).ok


def test_the_study_command_prints_the_table_and_writes_json(tmp_path):
    """The CLI prints one row per strategy and fault, a verdict, and the same JSON as Python."""
    output = tmp_path / "study.json"
    result = CliRunner().invoke(study, ["--episodes", "60", "--seed", "3", "--output", str(output)])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1].startswith("OK: 60 episodes (seed 3)")
    assert "verify-then-retry   late-commit" in result.stdout
    assert json.loads(output.read_text()) == run_study(60, 3).to_json()
    assert result.stderr.splitlines()[-1].startswith("study episodes: 60/60")
    as_json = CliRunner().invoke(study, ["--episodes", "60", "--seed", "3", "--json"])
    assert json.loads(as_json.stdout) == json.loads(output.read_text())
