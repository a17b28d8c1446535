"""The lean SQLite write path (issues 15, 32): one fenced statement per transition, same bytes.

A transition starts from the record the caller last received (``known``) and
is one insert into the ``row_writes`` view, whose trigger applies it only if
the row is still that version; the chain document is written from a fixed
template. Neither
may change a single stored byte: a ledger written by effectguard before the
change must still verify, and the same writes through the lean and the
general path must leave identical files.

``data/pre_issue15.db`` was written by ``main`` at 85eb98a (``git archive`` of
it first on ``PYTHONPATH``), with a ManualClock at 1,700,000,000.25: through the
executor, ``pay:ünïcødé-1`` confirmed (non-ASCII arguments and output),
``pay:2`` rejected with nested evidence, ``pay:3`` and ``pay:4`` quarantined
after a handler error, then ``pay:4`` confirmed by an operator; checkpointed
and vacuumed. 4 operations, 17 events, all verified clean when written.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from effectguard import EffectContract, EffectExecutor, EffectStatus, EventType, SQLiteEffectLedger
from effectguard._fingerprint import canonical_json
from effectguard._model import LeaseOwner, OperationRecord
from effectguard.errors import FencedWriteError
from effectguard.ledger import Changes, EventDraft, Expect, Lease, NewOperation
from effectguard.ledger import _chain as chain
from effectguard.testkit import FakePaymentProvider

FIXTURE = Path(__file__).parent / "data" / "pre_issue15.db"
OWNER = LeaseOwner(host="fixture-host", boot_id="b", pid_namespace="n", pid=4242, start_time="1")
NOW = 1_700_000_000.0
FIRST, SECOND = "token-1", "token-2"


def _claim(ledger: SQLiteEffectLedger, operation_id: str, token: str) -> OperationRecord:
    operation = NewOperation(
        operation_id, "c", 1, "f" * 64, "key-1", {"a": "ü"}, 3, Lease(token, OWNER, 30.0)
    )
    record, _ = ledger.claim(operation, now=NOW)
    return record


def _keep_lease(
    ledger: SQLiteEffectLedger,
    operation_id: str,
    token: str,
    known: OperationRecord | None = None,
) -> OperationRecord:
    """DISPATCHED to RECONCILING under the same lease, which the write leaves as it is."""
    return ledger.transition(
        operation_id,
        Expect(lease_token=token),
        Changes(EffectStatus.RECONCILING, reason="checking"),
        (EventDraft(EventType.RECONCILING, EffectStatus.DISPATCHED, EffectStatus.RECONCILING, 1),),
        now=NOW + 1,
        known=known,
    )


def _confirm(
    ledger: SQLiteEffectLedger,
    operation_id: str,
    token: str,
    known: OperationRecord | None = None,
) -> None:
    changes = Changes(
        EffectStatus.CONFIRMED,
        lease=None,
        output_json='{"ok":true}',
        provider_operation_id="ch_1",
        evidence={"handler": "returned", "note": "grüße"},
    )
    event = EventDraft(
        EventType.CONFIRMED,
        EffectStatus.DISPATCHED,
        EffectStatus.CONFIRMED,
        1,
        {"handler": "returned", "note": "grüße"},
    )
    ledger.transition(
        operation_id, Expect(lease_token=token), changes, (event,), now=NOW + 1, known=known
    )


def _dump(path: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        operations = conn.execute("SELECT * FROM operations ORDER BY operation_id").fetchall()
        events = conn.execute("SELECT * FROM events ORDER BY operation_id, seq").fetchall()
        claims = conn.execute("SELECT * FROM claims ORDER BY seq").fetchall()
    finally:
        conn.close()
    return [*operations, *events, *claims]


@pytest.mark.parametrize(
    ("operation_id", "evidence", "commits"),
    [
        ("op:1", {}, None),
        ("ünïcødé:✓", {"b": [1, 2.5, None, True], "a": {"z": "é", "y": -3}}, {"attempts": 2}),
        ('quote"and\\back\nslash\u2028', {"x": "\u0000\t"}, {"lease": None, "output": "ab12"}),
        ("op:2", {"k": 1e300, "j": -0.0}, {}),
    ],
)
def test_the_template_writes_the_general_encoders_bytes(operation_id, evidence, commits):
    """document_text is canonical_json(chain_document(...)), byte for byte, for odd values too."""
    for from_status in (None, EffectStatus.DISPATCHED):
        general = canonical_json(
            chain.chain_document(
                operation_id,
                7,
                EventType.CONFIRMED,
                from_status,
                EffectStatus.CONFIRMED,
                2,
                1_700_000_000_123_456,
                evidence,
                commits,
            )
        )
        template = chain.document_text(
            operation_id,
            7,
            EventType.CONFIRMED,
            from_status,
            EffectStatus.CONFIRMED,
            2,
            1_700_000_000_123_456,
            canonical_json(evidence) if evidence else None,
            canonical_json(commits) if commits else None,
        )
        assert template == general
        assert chain.chain_hash(b"x", template) == chain.chain_hash(b"x", json.loads(general))


def test_a_ledger_written_before_the_change_verifies_and_rehashes_identically(tmp_path):
    """Every stored event of a pre-change ledger hashes the same through today's append."""
    path = tmp_path / "old.db"
    shutil.copyfile(FIXTURE, path)
    with SQLiteEffectLedger(path) as ledger:
        report = ledger.verify()
        assert report.problems == ()
        assert report.operations_checked == 4
        assert report.events_checked == 17
        for record in ledger.list_operations():
            events = ledger.events(record.operation_id)
            head = None
            for event in events:
                draft = EventDraft(
                    event.type, event.from_status, event.to_status, event.attempt, event.evidence
                )
                chained, _, head = chain.append(
                    record.operation_id,
                    [draft],
                    event.seq - 1,
                    head,
                    chain.to_micros(event.at),
                    event.commits,
                )
                assert chained[0][6] == event.hash
            assert head == record.event_head


def test_a_pre_change_ledger_takes_new_writes_and_still_verifies(tmp_path):
    """An operator resolution and fresh calls written today extend the old chains cleanly."""
    path = tmp_path / "old.db"
    shutil.copyfile(FIXTURE, path)
    provider = FakePaymentProvider(path=tmp_path / "provider.db")
    contract = EffectContract(name="fixture.pay", operation_id=lambda a: f"pay:{a['invoice_id']}")
    with SQLiteEffectLedger(path) as ledger:
        ledger.reject("pay:3", actor="ops", reason="never reached", evidence_reference="T-2")
        arguments = {"invoice_id": "5", "amount_cents": 6}
        result = EffectExecutor(ledger).execute(contract, arguments, provider.handler)
        assert result.status is EffectStatus.CONFIRMED
        assert ledger.verify().problems == ()
    assert provider.committed() == 1


def test_lean_and_general_paths_store_identical_bytes(tmp_path):
    """The same claims and transitions, lean or general, leave the very same rows and events."""
    lean = SQLiteEffectLedger(tmp_path / "lean.db")
    general = SQLiteEffectLedger(tmp_path / "general.db")
    for ledger in (lean, general):
        # The lean path is taken from the record the caller holds; without one, the general.
        hint = ledger is lean
        claimed = {n: _claim(ledger, f"op:{n}", f"token-{n}") for n in range(3)}
        known = {n: claimed[n] if hint else None for n in range(3)}
        _confirm(ledger, "op:0", "token-0", known[0])
        ledger.renew("op:1", "token-1", 60.0, now=NOW + 0.5)
        _confirm(ledger, "op:1", "token-1", known[1])
        ledger.renew("op:2", "token-2", 90.0, now=NOW + 0.6)
        _keep_lease(ledger, "op:2", "token-2", known[2])
        ledger.close()
    assert _dump(tmp_path / "lean.db") == _dump(tmp_path / "general.db")
    with SQLiteEffectLedger(tmp_path / "lean.db") as reopened:
        assert reopened.verify().problems == ()
        assert reopened.get("op:1", now=NOW + 2).lease_expires_at is None
        kept = reopened.get("op:2", now=NOW + 2)
        assert kept.status is EffectStatus.RECONCILING
        assert kept.lease_expires_at == chain.from_micros(round((NOW + 90.6) * 1_000_000))


def test_a_write_that_keeps_a_renewed_lease_reads_the_row_first(tmp_path):
    """After renew() moved the expiry, a write keeping the lease cannot trust the guess."""
    ledger = SQLiteEffectLedger(tmp_path / "l.db")
    claimed = _claim(ledger, "op:1", "token-1")
    ledger.renew("op:1", "token-1", 90.0, now=NOW + 0.6)
    statements: list[str] = []
    ledger._open(write=True).set_trace_callback(statements.append)
    returned = _keep_lease(ledger, "op:1", "token-1", known=claimed)
    ledger._open(write=True).set_trace_callback(None)
    # The guess names the expiry it remembers, matches nothing, and the row is read instead.
    remembered = chain.to_micros(claimed.lease_expires_at)
    assert statements[0].startswith("INSERT INTO row_writes VALUES ('op:1',1,'token-1',")
    assert f",{remembered},1," in statements[0]  # the remembered expiry, kept (keep_expiry)
    assert any(s.lstrip().upper().startswith("SELECT") for s in statements)
    renewed = chain.from_micros(round((NOW + 90.6) * 1_000_000))
    assert returned.lease_expires_at == renewed
    record = ledger.get("op:1", now=NOW + 2)
    assert record.status is EffectStatus.RECONCILING
    assert record.lease_token == FIRST
    assert record.lease_expires_at == renewed
    assert ledger.verify().problems == ()
    ledger.close()


def test_a_transition_after_a_claim_reads_no_row(tmp_path):
    """The move to CONFIRMED after this ledger's claim is one statement, no SELECT of the row."""
    ledger = SQLiteEffectLedger(tmp_path / "l.db")
    claimed = _claim(ledger, "op:1", "token-1")
    statements: list[str] = []
    ledger._open(write=True).set_trace_callback(statements.append)
    _confirm(ledger, "op:1", "token-1", known=claimed)
    ledger._open(write=True).set_trace_callback(None)
    reads = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    # The trigger's own statements are traced as the one statement that fired them.
    assert reads == []
    assert len(set(statements)) == 1
    # Fenced on the claimed record's event count and lease token; no RETURNING (it costs
    # ~4x with the partial index).
    assert statements[0].startswith("INSERT INTO row_writes VALUES ('op:1',1,'token-1',")
    assert "RETURNING" not in statements[0]
    assert ledger.get("op:1").status is EffectStatus.CONFIRMED
    ledger.close()


def test_a_stale_guess_falls_back_and_the_fence_still_holds(tmp_path):
    """A row another handle moved on is read again: the fence refuses, nothing is written."""
    path = tmp_path / "l.db"
    first = SQLiteEffectLedger(path)
    second = SQLiteEffectLedger(path)
    claimed = _claim(first, "op:1", "token-1")
    # Another writer (another process, in effect) takes the lease over.
    second.transition(
        "op:1",
        Expect(lease_token=FIRST),
        Changes(EffectStatus.RECONCILING, lease=Lease(SECOND, OWNER, 30.0)),
        (EventDraft(EventType.RECONCILING, EffectStatus.DISPATCHED, EffectStatus.RECONCILING, 1),),
        now=NOW + 0.5,
    )
    with pytest.raises(FencedWriteError, match="lease token"):
        _confirm(first, "op:1", "token-1", known=claimed)
    record = first.get("op:1")
    assert record.status is EffectStatus.RECONCILING
    assert record.event_count == 2
    # The fenced-out writer's stale guess is gone: the new holder's write works through it.
    first.transition(
        "op:1",
        Expect(lease_token=SECOND),
        Changes(EffectStatus.QUARANTINED, lease=None),
        (EventDraft(EventType.QUARANTINED, EffectStatus.RECONCILING, EffectStatus.QUARANTINED, 1),),
        now=NOW + 1,
    )
    assert first.verify().problems == ()
    first.close()
    second.close()


def test_a_stale_guess_with_a_matching_fence_writes_from_the_stored_row(tmp_path):
    """When another handle appended under the same lease, the write extends the stored chain."""
    path = tmp_path / "l.db"
    first = SQLiteEffectLedger(path)
    second = SQLiteEffectLedger(path)
    claimed = _claim(first, "op:1", "token-1")
    second.transition(
        "op:1",
        Expect(lease_token=FIRST),
        Changes(EffectStatus.DISPATCHED, evidence={"late": True}),
        (EventDraft(EventType.LATE_RESULT, EffectStatus.DISPATCHED, EffectStatus.DISPATCHED, 1),),
        now=NOW + 0.5,
    )
    _confirm(first, "op:1", "token-1", known=claimed)
    record = first.get("op:1")
    assert record.status is EffectStatus.CONFIRMED
    assert record.event_count == 3
    assert first.verify().problems == ()
    first.close()
    second.close()
