"""A ledger written by main before the lean core (commit f4e2028) opens, migrates and verifies.

``data/f4e2028.db`` holds, in schema 5, claims as PREPARED and DISPATCHED events
with commitments v1 and an eager claims anchor: a confirmed operation, a
quarantined one, a rejected one, one authorized for a retry, and two pruned to
tombstones. ``data/make_f4e2028_ledger.py`` says how it was made.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from effectguard import EffectExecutor, EffectStatus, EventType, SQLiteEffectLedger, effect
from effectguard.errors import EffectPruned
from effectguard.ledger import AnchorHead
from effectguard.testkit import FakePaymentProvider

DATA = Path(__file__).parent / "data"


@pytest.fixture
def old_ledger(tmp_path: Path) -> Path:
    path = tmp_path / "effects.db"
    shutil.copyfile(DATA / "f4e2028.db", path)
    path.chmod(0o600)
    return path


def _anchor() -> AnchorHead:
    return AnchorHead.loads((DATA / "f4e2028.anchor.json").read_text(encoding="utf-8"))


def test_it_opens_migrates_and_verifies_against_the_anchor_exported_before(old_ledger: Path):
    """Every chain and the claims anchor check out, including against the old exported head."""
    assert sqlite3.connect(old_ledger).execute("PRAGMA user_version").fetchone()[0] == 5
    ledger = SQLiteEffectLedger(old_ledger)
    report = ledger.verify(anchor=_anchor())
    assert report.ok, report.problems
    assert report.operations_checked == 4
    statuses = {record.operation_id: record.status for record in ledger.list_operations()}
    assert statuses == {
        "invoice:INV-3:capture": EffectStatus.CONFIRMED,
        "invoice:LOST-1:capture": EffectStatus.QUARANTINED,
        "invoice:LOST-2:capture": EffectStatus.REJECTED,
        "invoice:LOST-3:capture": EffectStatus.PREPARED,
    }
    types = [event.type for event in ledger.events("invoice:INV-3:capture")]
    assert types == [EventType.PREPARED, EventType.DISPATCHED, EventType.CONFIRMED]
    ledger.close()
    assert sqlite3.connect(old_ledger).execute("PRAGMA user_version").fetchone()[0] >= 6


def test_old_operations_replay_and_resume_and_new_ones_chain_on(old_ledger: Path, tmp_path: Path):
    """A stored result replays with no dispatch, a retry resumes, a pruned id stays refused."""
    ledger = SQLiteEffectLedger(old_ledger)
    provider = FakePaymentProvider(idempotency_guaranteed=True, path=tmp_path / "provider.db")

    @effect(
        name="payments.capture",
        operation_id="invoice:{invoice_id}:capture",
        idempotency_key="capture:{invoice_id}",
        idempotency_guaranteed=True,
        executor=EffectExecutor(ledger),
    )
    def capture(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> dict:
        return provider.handler(
            {"invoice_id": invoice_id, "amount_cents": amount_cents},
            idempotency_key=idempotency_key,
        )

    before = len(ledger.events("invoice:INV-3:capture"))
    capture("INV-3", 300)  # a replay: nothing sent, nothing written
    assert provider.committed() == 0
    assert len(ledger.events("invoice:INV-3:capture")) == before
    capture("LOST-3", 300)  # authorized for a retry under the old format
    capture("INV-4", 400)
    for invoice in ("LOST-3", "INV-4"):
        record = ledger.get(f"invoice:{invoice}:capture")
        assert record is not None
        assert record.status is EffectStatus.CONFIRMED
    with pytest.raises(EffectPruned):
        capture("INV-1", 100)
    assert provider.committed() == 2  # LOST-3's retry and INV-4; nothing replayed was resent
    types = [event.type for event in ledger.events("invoice:INV-4:capture")]
    assert types == [EventType.CLAIMED, EventType.CONFIRMED]
    report = ledger.verify(anchor=_anchor())
    assert report.ok, report.problems
    assert report.operations_checked == 5
    ledger.close()


def test_an_edit_to_an_old_event_is_still_detected(old_ledger: Path):
    """The old format's chains are checked as strictly after the migration as before it."""
    SQLiteEffectLedger(old_ledger).close()  # migrate first
    with sqlite3.connect(old_ledger) as conn:
        conn.execute(
            "UPDATE events SET attempt = 9 WHERE operation_id = ? AND seq = 2",
            ("invoice:LOST-1:capture",),
        )
    ledger = SQLiteEffectLedger(old_ledger)
    report = ledger.verify()
    assert not report.ok
    assert {problem.operation_id for problem in report.problems} == {"invoice:LOST-1:capture"}
    ledger.close()
