"""The ledger contract, every backend: tamper-evident history and operator resolution."""

from __future__ import annotations

import pytest
from _ledger_samples import operation, quarantine, three_operations

from effectguard import EffectStatus, EventType
from effectguard.errors import IllegalTransitionError
from effectguard.ledger import Changes, EventDraft, Expect

# -- verify ----------------------------------------------------------------------------------


def test_verify_reports_a_clean_ledger_as_ok(ledger, clock):
    """An untouched ledger verifies, counting every operation and event."""
    three_operations(ledger, clock())
    report = ledger.verify()
    assert report.ok
    assert (report.operations_checked, report.events_checked) == (3, 6)


def test_verify_detects_an_edited_event(ledger, ledger_sql, clock):
    """Editing an event's evidence breaks its hash, and verify names it."""
    three_operations(ledger, clock())
    ledger_sql(
        "UPDATE events SET evidence = ? WHERE operation_id = ? AND seq = ?", '{"n":7}', "op-1", 2
    )
    report = ledger.verify()
    assert not report.ok
    assert {(p.operation_id, p.seq) for p in report.problems} == {("op-1", 2)}
    assert "edited or reordered" in report.problems[0].problem


def test_verify_detects_a_deleted_event(ledger, ledger_sql, clock):
    """Deleting an event leaves a gap and a count that no longer matches the row."""
    three_operations(ledger, clock())
    # A third event, so that the one deleted has events on both sides of it.
    ledger.transition(
        "op-2",
        Expect(lease_token=None),
        Changes(EffectStatus.CONFIRMED),
        [EventDraft(EventType.LATE_RESULT, EffectStatus.CONFIRMED, EffectStatus.CONFIRMED, 1)],
        now=clock() + 2,
    )
    ledger_sql("DELETE FROM events WHERE operation_id = ? AND seq = ?", "op-2", 2)
    report = ledger.verify()
    assert not report.ok
    assert {p.operation_id for p in report.problems} == {"op-2"}
    text = " ".join(p.problem for p in report.problems)
    assert "missing or out of order" in text
    assert "records 3 events but 2 are stored" in text


def test_verify_detects_a_deleted_last_event(ledger, ledger_sql, clock):
    """Deleting the newest event no longer matches the chain head kept on the row."""
    three_operations(ledger, clock())
    ledger_sql("DELETE FROM events WHERE operation_id = ? AND seq = ?", "op-0", 2)
    problems = ledger.verify().problems
    assert {p.operation_id for p in problems} == {"op-0"}
    assert any("chain head" in p.problem for p in problems)


def test_verify_detects_a_reordered_chain(ledger, ledger_sql, clock):
    """Swapping two events' places breaks the chain from the first swapped event."""
    three_operations(ledger, clock())
    for statement, params in [
        ("UPDATE events SET seq = -1 WHERE operation_id = ? AND seq = 1", ("op-0",)),
        ("UPDATE events SET seq = 1 WHERE operation_id = ? AND seq = 2", ("op-0",)),
        ("UPDATE events SET seq = 2 WHERE operation_id = ? AND seq = -1", ("op-0",)),
    ]:
        ledger_sql(statement, *params)
    problems = ledger.verify().problems
    assert {p.operation_id for p in problems} == {"op-0"}
    assert {p.seq for p in problems if p.seq is not None} == {1, 2}


def test_verify_reports_events_without_an_operation(ledger, ledger_sql, clock):
    """Events whose operation row was deleted are reported, not silently skipped."""
    three_operations(ledger, clock())
    ledger_sql("DELETE FROM operations WHERE operation_id = ?", "op-1")
    report = ledger.verify()
    assert report.operations_checked == 2
    assert {p.operation_id for p in report.problems} == {"op-1"}


def test_verify_reports_an_event_edited_past_parsing_instead_of_crashing(ledger, ledger_sql, clock):
    """An event whose type is no longer a valid value is reported by verify, not raised."""
    three_operations(ledger, clock())
    ledger_sql("UPDATE events SET type = ? WHERE operation_id = ? AND seq = ?", "bogus", "op-1", 2)
    report = ledger.verify()
    assert {(p.operation_id, p.seq) for p in report.problems} == {("op-1", 2)}
    assert "cannot be read" in report.problems[0].problem


def test_verify_detects_a_row_whose_status_disagrees_with_its_history(ledger, ledger_sql, clock):
    """Editing an operation's status alone is caught: its last event says otherwise."""
    three_operations(ledger, clock())
    ledger_sql("UPDATE operations SET status = ? WHERE operation_id = ?", "REJECTED", "op-2")
    problems = ledger.verify().problems
    assert {p.operation_id for p in problems} == {"op-2"}
    assert "last event leaves it" in problems[0].problem


# -- operator resolution ---------------------------------------------------------------------


def test_operator_confirm_records_the_output_and_the_audit(ledger, clock):
    """An operator confirmation stores the output to replay and who vouched for it."""
    claimed, _ = ledger.claim(operation(), now=clock())
    quarantine(ledger, claimed.operation_id, clock())
    record = ledger.confirm(
        claimed.operation_id,
        output={"id": "cap_9"},
        provider_operation_id="cap_9",
        actor="ops@example.com",
        reason="found in the provider dashboard",
        evidence_reference="TICKET-12",
    )
    assert record.status is EffectStatus.CONFIRMED
    assert (record.output, record.provider_operation_id) == ({"id": "cap_9"}, "cap_9")
    last = ledger.events(claimed.operation_id)[-1]
    assert last.type is EventType.OPERATOR_CONFIRMED
    assert last.evidence["actor"] == "ops@example.com"
    assert last.evidence["evidence_reference"] == "TICKET-12"
    assert last.evidence["host"]
    assert ledger.verify().ok


def test_operator_retry_authorization_allows_one_more_attempt(ledger, clock):
    """Authorizing a retry moves the operation to PREPARED with a budget of one more attempt."""
    claimed, _ = ledger.claim(operation(), now=clock())
    quarantine(ledger, claimed.operation_id, clock())
    record = ledger.authorize_retry(
        claimed.operation_id,
        actor="ops",
        reason="provider says no charge",
        evidence_reference="T-1",
    )
    assert record.status is EffectStatus.PREPARED
    assert record.attempt_budget == claimed.attempts + 1
    assert ledger.events(claimed.operation_id)[-1].type is EventType.OPERATOR_RETRY_AUTHORIZED


def test_operator_actions_that_make_no_sense_are_refused(ledger, clock):
    """Rejecting a confirmed operation is refused and leaves it as it was."""
    claimed, _ = ledger.claim(operation(), now=clock())
    quarantine(ledger, claimed.operation_id, clock())
    ledger.reject(claimed.operation_id, actor="ops", reason="declined", evidence_reference="T-2")
    before = ledger.get(claimed.operation_id, now=clock())
    with pytest.raises(IllegalTransitionError, match="it is REJECTED"):
        ledger.confirm(
            claimed.operation_id,
            output=None,
            provider_operation_id=None,
            actor="ops",
            reason="oops",
            evidence_reference="T-3",
        )
    assert ledger.get(claimed.operation_id, now=clock()) == before
