"""Late results: what a handler that lost its deadline or its lease finally did."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from effectguard.contract import EffectContract
from effectguard.errors import FencedWriteError
from effectguard.executor.handler import HandlerOutcome, Outcome
from effectguard.executor.outputs import Stored, store
from effectguard.executor.redaction import scrub, scrub_write
from effectguard.ledger.protocol import Changes, EffectLedger, EventDraft, Expect
from effectguard.ledger.transitions import to_confirmed
from effectguard.model import EffectStatus, EventType, OperationRecord

__all__ = ["record_late"]

logger = logging.getLogger("effectguard.executor")

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
    *,
    secrets: tuple[str, ...] = (),
    written: Callable[[EventDraft, OperationRecord], None] | None = None,
) -> None:
    """Record what a handler that lost its deadline or its lease finally did.

    A return that passes the postcondition confirms any operation not yet
    terminal, with its output marked not stored if it cannot be stored: it is
    the effect's own acknowledgement. Anything else is evidence only, and
    clears the overlap risk that handler carried; it never changes a
    confirmed output. ``secrets`` are masked in what the
    handler's exception says; ``written`` hears of the event once it is durable.
    """
    stored = store(contract, outcome.value) if outcome.kind is Outcome.RETURNED else None
    status: str | None = None
    for _ in range(_ATTEMPTS):
        record = ledger.get(operation_id, now=now())
        if record is None:
            return
        status = record.status.value
        changes, event = _late_write(record, stored, token, attempt, outcome, secrets)
        # The output and the not-stored marker are user text too, as is the reason quoting it.
        changes, (event,) = scrub_write(secrets, changes, (event,))
        try:
            after = ledger.transition(
                operation_id,
                Expect(event_count=record.event_count),
                changes,
                [event],
                now=now(),
            )
        except FencedWriteError:
            continue  # the operation moved on while we read it: read again
        if written is not None:
            written(event, after)
        return
    logger.warning(
        "could not record the late result of %s (attempt %d): it kept changing; "
        "what that handler did is in this line only: %s",
        operation_id,
        attempt,
        scrub(outcome.describe(), secrets),
        extra={"operation_id": operation_id, "contract": contract.name, "status": status},
    )


def _late_write(
    record: OperationRecord,
    stored: Stored | str | None,
    token: str,
    attempt: int,
    outcome: HandlerOutcome,
    secrets: tuple[str, ...],
) -> tuple[Changes, EventDraft]:
    """The write a late ``outcome`` makes to ``record``: a confirmation, or evidence only.

    Only an output that can be confirmed (``stored``) on an operation not yet
    terminal confirms; otherwise the status stays and this attempt's overlap
    risk is cleared. ``secrets`` are masked in the handler's text and in why an
    output is unconfirmable; the caller masks the rest of the write.
    """
    evidence: dict[str, Any] = {
        "attempt": attempt,
        "handler": scrub(outcome.describe(), secrets),
    }
    if isinstance(stored, Stored) and not record.status.terminal:
        # An output that cannot be stored confirms too: the handler returned.
        evidence = stored.evidence(evidence)
        late = f"the handler of attempt {attempt} returned after its deadline"
        return to_confirmed(
            record.status,
            attempt,
            output_json=stored.json,
            provider_operation_id=stored.provider_operation_id,
            reason=f"{late}; {stored.note}" if stored.note else late,
            evidence=evidence,
            event=EventType.LATE_RESULT,
        )
    if isinstance(stored, str):
        evidence["unconfirmable"] = scrub(stored, secrets)
    if isinstance(stored, Stored) and record.status is EffectStatus.CONFIRMED:
        evidence["matches_confirmed_output"] = stored.json == record.output_json
    # One lease token serves every attempt of a call: only this attempt has ended.
    remaining = tuple(h for h in record.overlap if (h.token, h.attempt) != (token, attempt))
    changes = Changes(record.status, overlap=remaining)
    return changes, EventDraft(
        EventType.LATE_RESULT, record.status, record.status, attempt, evidence
    )
