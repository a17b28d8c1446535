"""Listing the operations an operator looks at during an incident, on both backends.

The listing must return every field of each record, newest first, whichever
index serves it; on SQLite the statuses that need attention are read from
migration 4's index alone (its query plan names no table lookup).
"""

from __future__ import annotations

import sqlite3

import pytest
from support import ARGS, capture_contract

from effectguard import EffectExecutor, EffectLedger, EffectStatus, SQLiteEffectLedger
from effectguard.ledger.sqlite import SCHEMA_VERSION
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, ManualClock


def quarantine_and_confirm(ledger: EffectLedger, count: int) -> int:
    """Run ``count`` captures, every third one quarantined; return the effects committed.

    The third ones lose their acknowledgement and have no probe.
    """
    lost = FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan({1: Fault.LOSE_ACK}))
    fine = FakePaymentProvider(idempotency_guaranteed=False)
    clock = ManualClock()
    executor = EffectExecutor(ledger, clock=clock)
    for number in range(count):
        provider = lost if number % 3 == 0 else fine
        contract = capture_contract(provider, probe=False)
        executor.execute(contract, {**ARGS, "invoice_id": f"INV-{number}"}, provider.handler)
        clock.advance(1.0)
    return len(lost.effects()) + len(fine.effects())


@pytest.mark.parametrize("limit", [1, 2, 100])
def test_quarantined_operations_are_listed_whole_and_newest_first(
    ledger: EffectLedger, limit: int
) -> None:
    """The listing equals each record read alone, newest first, up to the limit."""
    assert quarantine_and_confirm(ledger, 9) == 9
    listed = ledger.list_operations(status=EffectStatus.QUARANTINED, limit=limit)
    expected = [f"invoice:INV-{n}:capture" for n in (6, 3, 0)][:limit]
    assert [record.operation_id for record in listed] == expected
    for record in listed:
        assert record.status is EffectStatus.QUARANTINED
        assert record == ledger.get(record.operation_id)
    confirmed = ledger.list_operations(status=EffectStatus.CONFIRMED)
    assert len(confirmed) == 6
    assert all(record == ledger.get(record.operation_id) for record in confirmed)


def test_sqlite_lists_statuses_needing_attention_from_one_covering_index(tmp_path):
    """The query for QUARANTINED reads migration 4's index only; CONFIRMED uses the others."""
    path = tmp_path / "ledger.db"
    with SQLiteEffectLedger(path) as ledger:
        quarantine_and_confirm(ledger, 3)
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        traced: list[str] = []
        conn.set_trace_callback(traced.append)
        with SQLiteEffectLedger(path) as ledger:
            ledger._open(write=False).set_trace_callback(traced.append)
            assert len(ledger.list_operations(status=EffectStatus.QUARANTINED)) == 1
        (query,) = [text for text in traced if "ORDER BY updated_us" in text]
        plan = " ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {query}"))
        assert "COVERING INDEX operations_needing_attention" in plan
    finally:
        conn.close()
