"""Retention on every backend: settled operations pruned to tombstones that never dispatch again.

Every fault test counts what the fake provider actually committed.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from support import ARGS, capture_contract

from effectguard import (
    EffectExecutor,
    EffectLedger,
    EffectPruned,
    EffectStatus,
    InvalidRequestError,
    OperationConflictError,
)
from effectguard.ledger import Prunable
from effectguard.ledger import _retention as retention
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, Lookup

DAY = 86_400.0
#: When the operations these tests prune were written: 40 days ago.
OLD = time.time() - 40 * DAY
OP = "invoice:INV-1042:capture"


def _old_executor(ledger: EffectLedger, **options: Any) -> EffectExecutor:
    return EffectExecutor(ledger, clock=lambda: OLD, **options)


def _confirmed(ledger: EffectLedger, provider: FakePaymentProvider, **contract: Any) -> str:
    result = _old_executor(ledger).execute(
        capture_contract(provider, **contract), ARGS, provider.handler
    )
    assert result.status is EffectStatus.CONFIRMED
    return result.operation_id


def _snapshot(ledger: EffectLedger) -> Any:
    assert isinstance(ledger, Prunable)
    records = ledger.list_operations(limit=1000)
    return (
        sorted((r.operation_id, r.status, r.event_count, r.event_head) for r in records),
        {r.operation_id: [e.hash for e in ledger.events(r.operation_id)] for r in records},
        sorted(ledger.tombstones()),
    )


def test_a_pruned_id_called_again_raises_effect_pruned_and_sends_nothing(ledger):
    """Same id, same request after a prune: EffectPruned naming the id, 0 new commits."""
    provider = FakePaymentProvider()
    operation_id = _confirmed(ledger, provider)

    report = ledger.prune(older_than=30 * DAY)

    assert report.pruned == (operation_id,)
    assert ledger.get(operation_id) is None
    stone = ledger.tombstone(operation_id)
    assert stone is not None
    assert (stone.status, stone.provider_operation_id) == (EffectStatus.CONFIRMED, "cap_000001")
    with pytest.raises(EffectPruned, match=r"'invoice:INV-1042:capture' was CONFIRMED and pruned"):
        EffectExecutor(ledger).execute(capture_contract(provider), ARGS, provider.handler)
    assert (provider.requests, provider.committed()) == (1, 1)
    assert ledger.get(operation_id) is None  # the refused claim wrote nothing


def test_a_different_request_under_a_pruned_id_is_still_a_conflict(ledger):
    """Another amount under a pruned id: OperationConflictError, nothing dispatched."""
    provider = FakePaymentProvider()
    _confirmed(ledger, provider)
    ledger.prune(older_than=30 * DAY)

    with pytest.raises(OperationConflictError, match="CONFIRMED and pruned at"):
        EffectExecutor(ledger).execute(
            capture_contract(provider), {**ARGS, "amount_cents": 5}, provider.handler
        )
    assert (provider.requests, provider.committed()) == (1, 1)


def test_an_async_call_of_a_pruned_id_is_refused_too(ledger):
    """execute_async meets the same tombstone: EffectPruned, nothing sent."""
    provider = FakePaymentProvider()
    _confirmed(ledger, provider)
    ledger.prune(older_than=30 * DAY)

    with pytest.raises(EffectPruned):
        asyncio.run(
            EffectExecutor(ledger).execute_async(capture_contract(provider), ARGS, provider.handler)
        )
    assert (provider.requests, provider.committed()) == (1, 1)


def test_a_replay_cached_in_this_process_is_forgotten_by_the_prune(ledger):
    """The executor's replay cache does not outlive a prune: the next call reads the tombstone."""
    provider = FakePaymentProvider()
    executor = _old_executor(ledger)
    contract = capture_contract(provider)
    executor.execute(contract, ARGS, provider.handler)
    assert executor.execute(contract, ARGS, provider.handler).replayed  # now cached

    ledger.prune(older_than=30 * DAY)

    with pytest.raises(EffectPruned):
        executor.execute(contract, ARGS, provider.handler)
    assert provider.committed() == 1


def test_a_non_terminal_operation_is_never_pruned(ledger):
    """A QUARANTINED operation as old as the settled one stays; asking for it is refused."""
    provider = FakePaymentProvider()
    settled = _confirmed(ledger, provider)
    lost = FakePaymentProvider(
        idempotency_guaranteed=False, lookup=Lookup.NONE, faults=FaultPlan([Fault.LOSE_ACK])
    )
    other = {**ARGS, "invoice_id": "INV-7"}
    stuck = _old_executor(ledger).execute(capture_contract(lost, probe=False), other, lost.handler)
    assert stuck.status is EffectStatus.QUARANTINED

    before = _snapshot(ledger)
    with pytest.raises(InvalidRequestError, match="cannot prune QUARANTINED"):
        ledger.prune(older_than=0, statuses=[EffectStatus.QUARANTINED])
    assert _snapshot(ledger) == before

    report = ledger.prune(older_than=0)
    assert report.pruned == (settled,)
    assert ledger.get(stuck.operation_id).status is EffectStatus.QUARANTINED
    assert ledger.tombstone(stuck.operation_id) is None


def test_dry_run_and_a_recent_operation_write_nothing(ledger):
    """A dry run reports what it would prune; an operation newer than the cut-off stays."""
    provider = FakePaymentProvider()
    operation_id = _confirmed(ledger, provider)
    before = _snapshot(ledger)

    assert ledger.prune(older_than=30 * DAY, dry_run=True).pruned == (operation_id,)
    assert ledger.prune(older_than=60 * DAY).pruned == ()
    assert _snapshot(ledger) == before


def test_a_provider_that_still_remembers_the_key_keeps_the_operation_unless_forced(ledger):
    """provider_key_retention_seconds longer than the age keeps it; force prunes it."""
    provider = FakePaymentProvider()
    operation_id = _confirmed(ledger, provider)
    retention_of = {"payments.capture": 90 * DAY}
    assert ledger.get(operation_id).contract == "payments.capture"

    kept = ledger.prune(older_than=30 * DAY, key_retention=retention_of)
    assert (kept.pruned, kept.kept) == ((), (operation_id,))
    assert ledger.get(operation_id) is not None

    forced = ledger.prune(older_than=30 * DAY, key_retention=retention_of, force=True)
    assert forced.pruned == (operation_id,)


def test_prune_runs_in_batches_and_misses_none(ledger, monkeypatch):
    """Five operations in batches of two: every one pruned, none twice."""
    monkeypatch.setattr(retention, "BATCH", 2)
    provider = FakePaymentProvider()
    executor = _old_executor(ledger)
    contract = capture_contract(provider)
    for number in range(5):
        executor.execute(contract, {**ARGS, "invoice_id": f"INV-{number}"}, provider.handler)

    report = ledger.prune(older_than=30 * DAY)

    assert sorted(report.pruned) == [f"invoice:INV-{n}:capture" for n in range(5)]
    assert len(ledger.tombstones()) == 5
    assert ledger.list_operations() == []


def test_batches_page_past_kept_operations_in_a_dry_run_and_an_archived_prune(
    ledger, monkeypatch, tmp_path
):
    """Batches of two over three kept and two prunable: a dry run and the prune agree, once each."""
    monkeypatch.setattr(retention, "BATCH", 2)
    provider = FakePaymentProvider()
    executor = _old_executor(ledger)
    for number, name in enumerate(["payments.capture"] * 3 + ["payments.refund"] * 2):
        contract = capture_contract(provider, name=name)
        executor.execute(contract, {**ARGS, "invoice_id": f"INV-{number}"}, provider.handler)
    keys = {"payments.capture": 90 * DAY}
    kept = sorted(f"invoice:INV-{n}:capture" for n in range(3))
    pruned = sorted(f"invoice:INV-{n}:capture" for n in (3, 4))
    before = _snapshot(ledger)

    dry = ledger.prune(older_than=30 * DAY, key_retention=keys, dry_run=True)
    assert (sorted(dry.pruned), sorted(dry.kept)) == (pruned, kept)
    assert len(dry.pruned + dry.kept) == 5
    assert _snapshot(ledger) == before

    path = tmp_path / "archive.jsonl"
    report = ledger.prune(older_than=30 * DAY, key_retention=keys, archive=str(path))
    assert (sorted(report.pruned), sorted(report.kept)) == (pruned, kept)
    assert sorted(ledger.tombstones()) == pruned
    assert sorted(r.operation_id for r in ledger.list_operations()) == kept
    assert retention.check_archive(path.read_text().splitlines(), ledger.tombstones()) == (2, [])


def test_verify_passes_after_a_prune_and_catches_an_edited_tombstone(ledger, ledger_sql):
    """The anchor still recomputes through the tombstone; a tombstone edited by hand fails."""
    provider = FakePaymentProvider()
    operation_id = _confirmed(ledger, provider)
    _old_executor(ledger).execute(
        capture_contract(provider), {**ARGS, "invoice_id": "INV-2"}, provider.handler
    )
    anchored = ledger.verify().anchored
    ledger.prune(older_than=30 * DAY)

    after = ledger.verify()
    assert after.ok, after.problems
    assert after.anchored == anchored == 2

    edit = "UPDATE tombstones SET fingerprint = ? WHERE operation_id = ?"
    ledger_sql(edit, "0" * 64, operation_id)
    problems = ledger.verify().problems
    assert [(p.operation_id, p.problem) for p in problems] == [
        (operation_id, "tombstone does not match its digest (the tombstone was edited)")
    ]


def test_verify_catches_a_tombstone_deleted_by_hand(ledger, ledger_sql):
    """Deleting the tombstone too: the anchor still names the claim whose row is gone."""
    provider = FakePaymentProvider()
    operation_id = _confirmed(ledger, provider)
    ledger.prune(older_than=30 * DAY)

    ledger_sql("DELETE FROM tombstones WHERE operation_id = ?", operation_id)
    assert any("row is gone" in p.problem for p in ledger.verify().problems)


def test_the_archive_holds_what_was_pruned_and_checks_against_the_tombstones(ledger, tmp_path):
    """--archive: every record and event, the chain recomputed to the tombstone's head."""
    provider = FakePaymentProvider()
    operation_id = _confirmed(ledger, provider)
    path = tmp_path / "archive.jsonl"

    ledger.prune(older_than=30 * DAY, archive=str(path))

    assert path.stat().st_mode & 0o777 == 0o600
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["kind"] for line in lines] == ["archive", "operation", "event", "event"]
    assert lines[1]["record"]["output"] == {**provider.find_capture("capture:INV-1042")}
    assert retention.check_archive(path.read_text().splitlines(), ledger.tombstones()) == (1, [])

    # An event's document edited in the archive: its hash no longer recomputes.
    lines[-1]["document"] = lines[-1]["document"].replace("CONFIRMED", "REJECTED")
    assert "REJECTED" in lines[-1]["document"]
    edited = "\n".join(json.dumps(line) for line in lines)
    checked, problems = retention.check_archive(edited.splitlines(), ledger.tombstones())
    assert checked == 1
    assert {p.operation_id for p in problems} == {operation_id}
    assert any("does not hash" in p.problem for p in problems)


@pytest.mark.parametrize(
    ("field", "value"),
    [("to_status", "REJECTED"), ("type", "operator_rejected"), ("seq", 7), ("operation_id", "x")],
)
def test_an_archive_line_whose_readable_fields_disagree_with_its_hashed_document_fails(
    ledger, tmp_path, field, value
):
    """``to_status`` and ``type`` beside the document are checked against it, not trusted."""
    operation_id = _confirmed(ledger, FakePaymentProvider())
    path = tmp_path / "archive.jsonl"
    ledger.prune(older_than=30 * DAY, archive=str(path))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert retention.check_archive(path.read_text().splitlines(), ledger.tombstones()) == (1, [])
    lines[-1][field] = value  # the document and its hash untouched
    edited = "\n".join(json.dumps(line) for line in lines)
    checked, problems = retention.check_archive(edited.splitlines(), ledger.tombstones())
    assert checked == 1
    assert {p.operation_id for p in problems} == {operation_id}
    assert any(p.seq == len(lines) - 2 and "edited" in p.problem for p in problems)


def test_an_archive_is_never_overwritten(ledger, tmp_path):
    """An existing archive file: refused before anything is pruned."""
    provider = FakePaymentProvider()
    _confirmed(ledger, provider)
    path = tmp_path / "archive.jsonl"
    path.write_text("keep me\n")
    before = _snapshot(ledger)

    with pytest.raises(InvalidRequestError, match="already exists"):
        ledger.prune(older_than=30 * DAY, archive=str(path))
    assert path.read_text() == "keep me\n"
    assert _snapshot(ledger) == before


def test_an_archive_that_cannot_be_created_is_a_clear_error(tmp_path: Path) -> None:
    """A missing directory for the archive is a clear InvalidRequestError."""
    with pytest.raises(InvalidRequestError, match="cannot create archive"):
        retention.open_archive(str(tmp_path / "missing" / "a.jsonl"))


def test_a_bulk_load_cannot_bring_a_pruned_id_back(ledger):
    """Restoring an operation under a pruned id is refused, and nothing of the load is kept."""
    provider = FakePaymentProvider()
    operation_id = _confirmed(ledger, provider)
    record = ledger.get(operation_id)
    events = ledger.events(operation_id)
    ledger.prune(older_than=30 * DAY)
    before = _snapshot(ledger)

    with pytest.raises(InvalidRequestError, match="pruned"):
        ledger.bulk_load([(record, events)])
    assert _snapshot(ledger) == before
