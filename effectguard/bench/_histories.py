"""The operations of a fabricated large ledger: what the executor would have written.

Each :class:`History` is an operation as first claimed plus the transitions
that followed, with their events and times, mirroring the executor's own
writes: most operations were confirmed at once; every hundredth timed out,
had no probe and was quarantined. Backends turn histories into rows with the
ledger's own row and chain helpers, so a fabricated ledger verifies.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from effectguard.fingerprint import canonical_json, request_fingerprint
from effectguard.ledger.protocol import Changes, EventDraft, Lease, NewOperation
from effectguard.model import EffectStatus, EventType
from effectguard.process import current_owner

__all__ = [
    "CLAIMED_EVENTS",
    "CONTRACT",
    "QUARANTINE_EVERY",
    "History",
    "Transition",
    "histories",
    "operation_id",
]

#: The contract name fabricated operations are recorded under.
CONTRACT = "bench.capture"
#: One operation in this many was quarantined; the rest were confirmed.
QUARANTINE_EVERY = 100
#: Microseconds between the starts of consecutive fabricated operations.
_SPACING_US = 1000

#: The events of a claim, as the executor writes them.
CLAIMED_EVENTS = (
    EventDraft(EventType.PREPARED, None, EffectStatus.PREPARED, 0),
    EventDraft(EventType.DISPATCHED, EffectStatus.PREPARED, EffectStatus.DISPATCHED, 1),
)


@dataclass(frozen=True, slots=True)
class Transition:
    """One write after the claim: its changes and events, at ``at_us``."""

    changes: Changes
    events: tuple[EventDraft, ...]
    at_us: int


@dataclass(frozen=True, slots=True)
class History:
    """One operation: claimed at ``at_us`` with ``events``, then ``transitions`` in order."""

    operation: NewOperation
    events: tuple[EventDraft, ...]
    at_us: int
    transitions: tuple[Transition, ...]


def operation_id(index: int) -> str:
    """The id of fabricated operation ``index``."""
    return f"invoice:INV-{index:08d}:capture"


def histories(count: int, end_us: int) -> Iterator[History]:
    """Yield ``count`` operations, the last of them starting shortly before ``end_us``."""
    owner = current_owner()
    start = end_us - (count + 1) * _SPACING_US
    for index in range(count):
        at = start + index * _SPACING_US
        invoice = f"INV-{index:08d}"
        arguments = {"amount_cents": 1999 + index % 1000, "currency": "EUR", "invoice_id": invoice}
        key = f"capture:{invoice}"
        operation = NewOperation(
            operation_id=operation_id(index),
            contract=CONTRACT,
            contract_version=1,
            fingerprint=request_fingerprint(CONTRACT, 1, arguments, key),
            provider_key=key,
            arguments=arguments,
            attempt_budget=3,
            lease=Lease(secrets.token_hex(16), owner, 30.0),
        )
        if index % QUARANTINE_EVERY == QUARANTINE_EVERY - 1:
            transitions = _quarantined(operation.lease, at)
        else:
            transitions = (_confirmed(index, at + 800),)
        yield History(operation, CLAIMED_EVENTS, at, transitions)


def _confirmed(index: int, at: int) -> Transition:
    output = canonical_json({"capture_id": f"cap_{index:08d}", "status": "succeeded"})
    changes = Changes(
        EffectStatus.CONFIRMED,
        lease=None,
        output_json=output,
        provider_operation_id=f"cap_{index:08d}",
        reason=None,
    )
    event = EventDraft(EventType.CONFIRMED, EffectStatus.DISPATCHED, EffectStatus.CONFIRMED, 1)
    return Transition(changes, (event,), at)


def _quarantined(lease: Lease, at: int) -> tuple[Transition, ...]:
    reason = "the handler raised: TimeoutError: read timed out"
    unknown_evidence = {"handler": reason, "overlap_risk": False, "reason": reason}
    unknown = Transition(
        Changes(
            EffectStatus.RECONCILING,
            lease=lease,
            overlap=(),
            reason=f"outcome unknown: {reason}",
            evidence=unknown_evidence,
        ),
        (
            EventDraft(
                EventType.OUTCOME_UNKNOWN,
                EffectStatus.DISPATCHED,
                EffectStatus.OUTCOME_UNKNOWN,
                1,
                unknown_evidence,
            ),
            EventDraft(
                EventType.RECONCILING, EffectStatus.OUTCOME_UNKNOWN, EffectStatus.RECONCILING, 1
            ),
        ),
        at + 500,
    )
    verdict_evidence: dict[str, Any] = {"overlap_risk": False, "probe": None, "probe_evidence": {}}
    quarantined = Transition(
        Changes(
            EffectStatus.QUARANTINED,
            lease=None,
            reason="no probe and no idempotency guarantee: quarantined for an operator",
            evidence=verdict_evidence,
            overlap=(),
        ),
        (
            EventDraft(
                EventType.QUARANTINED,
                EffectStatus.RECONCILING,
                EffectStatus.QUARANTINED,
                1,
                verdict_evidence,
            ),
        ),
        at + 600,
    )
    return unknown, quarantined
