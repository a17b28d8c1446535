"""How ``f4e2028.db`` was written: run once with the code of commit f4e2028 on the path.

    git worktree add /tmp/f4e2028 f4e2028
    PYTHONPATH=/tmp/f4e2028 python tests/ledger/data/make_f4e2028_ledger.py tests/ledger/data

It leaves a ledger in the format main wrote before the lean core (schema 5: a
claim as PREPARED and DISPATCHED events, commitments v1, an eager claims
anchor) holding one operation in each state an operator meets, one pruned
operation, and the anchor's exported head beside it (``f4e2028.anchor.json``).
Today's code must open, migrate and verify it (tests/ledger/test_old_format.py).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path

from effectguard import (
    AnchorHead,
    EffectExecutor,
    EffectOutcomeUnknown,
    EffectQuarantined,
    EffectStatus,
    SQLiteEffectLedger,
    effect,
)
from effectguard.testkit import FakePaymentProvider


def main(folder: Path) -> None:
    path = folder / "f4e2028.db"
    for stale in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        stale.unlink(missing_ok=True)
    ledger = SQLiteEffectLedger(path)
    executor = EffectExecutor(ledger)
    provider = FakePaymentProvider(idempotency_guaranteed=False)

    @effect(
        name="payments.capture",
        operation_id="invoice:{invoice_id}:capture",
        idempotency_key="capture:{invoice_id}",
        executor=executor,
    )
    def capture(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> dict:
        if invoice_id.startswith("LOST"):
            raise TimeoutError("the acknowledgement was lost")
        return provider.handler(
            {"invoice_id": invoice_id, "amount_cents": amount_cents},
            idempotency_key=idempotency_key,
        )

    capture("INV-1", 100)  # CONFIRMED
    capture("INV-2", 200)  # CONFIRMED, then pruned below
    for lost in ("LOST-1", "LOST-2", "LOST-3"):
        with contextlib.suppress(EffectOutcomeUnknown, EffectQuarantined):
            capture(lost, 300)  # QUARANTINED: no probe, no guaranteed key
    ledger.reject(
        "invoice:LOST-2:capture", actor="ops", reason="not charged", evidence_reference="T-1"
    )
    ledger.authorize_retry(
        "invoice:LOST-3:capture", actor="ops", reason="safe to resend", evidence_reference="T-2"
    )
    ledger.prune(older_than=0, now=time.time() + 60, statuses=[EffectStatus.CONFIRMED], force=True)
    capture("INV-3", 300)  # CONFIRMED after the prune, so one confirmed operation stays
    report = ledger.verify()
    assert report.ok, report.problems
    head = AnchorHead(report.anchored, report.anchor_running)
    (folder / "f4e2028.anchor.json").write_text(json.dumps(head.to_json()) + "\n", encoding="utf-8")
    ledger.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
