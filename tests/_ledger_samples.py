"""Sample operations and events the ledger conformance tests write."""

from __future__ import annotations

from effectguard import EffectLedger, EffectStatus, EventType
from effectguard._model import LeaseOwner
from effectguard.ledger import Changes, EventDraft, Expect, Lease, NewOperation

OWNER = LeaseOwner("host-a.example", "boot-a", "pid:[1]", 4242, "17")
OTHER = LeaseOwner("host-b.example", "boot-b", "pid:[1]", 5353, "99")
DISPATCHED = EffectStatus.DISPATCHED
# Lease tokens, not secrets.
TOKEN_A, TOKEN_B, TOKEN_Z = "token-a", "token-b", "token-z"


def operation(
    operation_id: str = "invoice:INV-1:capture",
    *,
    token: str = TOKEN_A,
    contract: str = "capture",
    seconds: float = 30.0,
    fingerprint: str = "f" * 64,
) -> NewOperation:
    return NewOperation(
        operation_id=operation_id,
        contract=contract,
        contract_version=1,
        fingerprint=fingerprint,
        provider_key=f"key:{operation_id}",
        arguments={"invoice_id": "INV-1", "amount_cents": 1250, "note": "café ☕"},
        attempt_budget=3,
        lease=Lease(token, OWNER, seconds),
    )


def event(
    type_: EventType = EventType.CONFIRMED,
    to: EffectStatus = EffectStatus.CONFIRMED,
    evidence: dict[str, object] | None = None,
) -> EventDraft:
    return EventDraft(type_, DISPATCHED, to, 1, evidence or {})


def quarantine(ledger: EffectLedger, operation_id: str, now: float) -> None:
    """Leave ``operation_id`` QUARANTINED with no lease, as the executor would."""
    ledger.transition(
        operation_id,
        Expect(lease_token=TOKEN_A),
        Changes(EffectStatus.QUARANTINED, lease=None, reason="probe could not tell"),
        [event(EventType.QUARANTINED, EffectStatus.QUARANTINED)],
        now=now,
    )


def three_operations(ledger: EffectLedger, now: float) -> None:
    """Claim three operations and confirm each, two events apiece (claimed, confirmed)."""
    for index in range(3):
        ledger.claim(operation(f"op-{index}"), now=now)
        ledger.transition(
            f"op-{index}",
            Expect(lease_token=TOKEN_A),
            Changes(EffectStatus.CONFIRMED, lease=None, output_json="1"),
            [event(evidence={"n": index})],
            now=now + 1,
        )
