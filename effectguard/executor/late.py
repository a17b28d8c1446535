"""Late results: what a handler that lost its deadline or its lease finally did."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from effectguard.contract import EffectContract
from effectguard.errors import FencedWriteError
from effectguard.executor.handler import HandlerOutcome, Outcome
from effectguard.executor.outputs import Stored, store
from effectguard.ledger.protocol import Changes, EffectLedger, EventDraft, Expect
from effectguard.model import EffectStatus, EventType

__all__ = ["record_late"]

logger = logging.getLogger("effectguard")

#: Re-reads after losing a race with another writer; each loss means the row moved on,
#: so a handful suffices unless the operation is extremely busy (then: log and give up).
_ATTEMPTS = 8


def record_late(
    ledger: EffectLedger,
    now: Callable[[], float | None],
    contract: EffectContract,
    operation_id: str,
    token: str,
    attempt: int,
    outcome: HandlerOutcome,
) -> None:
    """Record what a handler that lost its deadline or its lease finally did.

    A return that passes the postcondition confirms any operation not yet
    terminal, with its output marked not stored if it cannot be stored: it is
    the effect's own acknowledgement. Anything else
    is evidence only, and clears the overlap risk that handler carried.
    """
    stored = store(contract, outcome.value) if outcome.kind is Outcome.RETURNED else None
    for _ in range(_ATTEMPTS):
        record = ledger.get(operation_id, now=now())
        if record is None:
            return
        # One lease token serves every attempt of a call: only this attempt has ended.
        remaining = tuple(h for h in record.overlap if (h.token, h.attempt) != (token, attempt))
        evidence: dict[str, Any] = {"attempt": attempt, "handler": outcome.describe()}
        if isinstance(stored, Stored) and not record.status.terminal:
            # An output that cannot be stored confirms too: the handler returned.
            evidence = stored.evidence(evidence)
            late = f"the handler of attempt {attempt} returned after its deadline"
            changes = Changes(
                EffectStatus.CONFIRMED,
                lease=None,
                output_json=stored.json,
                provider_operation_id=stored.provider_operation_id,
                reason=f"{late}; {stored.note}" if stored.note else late,
                evidence=evidence,
                overlap=(),
            )
            target = EffectStatus.CONFIRMED
        else:
            if isinstance(stored, str):
                evidence["unconfirmable"] = stored
            if isinstance(stored, Stored) and record.status is EffectStatus.CONFIRMED:
                evidence["matches_confirmed_output"] = stored.json == record.output_json
            changes = Changes(record.status, overlap=remaining)
            target = record.status
        event = EventDraft(EventType.LATE_RESULT, record.status, target, attempt, evidence)
        try:
            ledger.transition(
                operation_id,
                Expect(event_count=record.event_count),
                changes,
                [event],
                now=now(),
            )
        except FencedWriteError:
            continue  # the operation moved on while we read it: read again
        return
    logger.warning("could not record the late result of %s", operation_id)
