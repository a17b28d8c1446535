"""Transitions that several writers make, built once so they cannot drift apart.

The executor's settle and reconcile, a late handler's return and an operator's
confirmation all move an operation to CONFIRMED. What that move writes is
decided here, once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from effectguard.ledger.protocol import Changes, EventDraft
from effectguard.model import EffectStatus, EventType

__all__ = ["to_confirmed"]


def to_confirmed(
    from_status: EffectStatus,
    attempt: int,
    *,
    output_json: str | None,
    provider_operation_id: str | None,
    reason: str | None,
    evidence: Mapping[str, Any],
    event: EventType = EventType.CONFIRMED,
) -> tuple[Changes, EventDraft]:
    """Return the change and the event that move an operation to CONFIRMED.

    The move always stores the output, the provider's id, the reason and the
    evidence given (the previous ones never linger on a confirmed record),
    releases the lease, and clears the overlap risk: once the effect is
    confirmed, what an earlier handler still does is evidence only (it is
    recorded as a late result and never changes the output). ``event`` names
    who confirmed it (the executor, a late handler, an operator); the event
    carries the same evidence as the record.
    """
    changes = Changes(
        EffectStatus.CONFIRMED,
        lease=None,
        output_json=output_json,
        provider_operation_id=provider_operation_id,
        reason=reason,
        evidence=evidence,
        overlap=(),
    )
    draft = EventDraft(event, from_status, EffectStatus.CONFIRMED, attempt, evidence)
    return changes, draft
