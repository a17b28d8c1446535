"""Attempts that were never sent: retried with a backoff, never quarantined, the id kept.

A handler that raises :class:`~effectguard.errors.EffectNotSent` (or an
exception its contract names in ``not_sent_on``) proves that *this* attempt's
request never left. What that proves about the operation depends on what came
before it:

- nothing committed before (a fresh claim, a PREPARED row, an authoritative
  NOT_COMMITTED with no overlap risk): the operation provably holds no effect.
  It goes back to PREPARED and is sent again after a backoff while the call has
  attempts and time left; otherwise it stays PREPARED, dispatchable by the next
  call (with a fresh attempt budget once this one is spent).
- an earlier attempt's outcome is still unknown (it was retried under the
  provider's idempotency guarantee, or may still be sending): this attempt
  proves nothing about that one. The operation returns to reconciling the
  earlier uncertainty; when no attempts are left it is kept OUTCOME_UNKNOWN,
  with a fresh budget, for the next call to reconcile. It is not quarantined
  on account of an attempt that sent nothing.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from effectguard.errors import EffectNotSent
from effectguard.executor.outputs import jsonable
from effectguard.ledger.protocol import Changes, EventDraft, Expect
from effectguard.model import EffectResult, EffectStatus, EventType, OperationRecord

if TYPE_CHECKING:
    from effectguard.executor.handler import HandlerOutcome
    from effectguard.executor.machine import StateMachine
    from effectguard.executor.steps import Call, Step

__all__ = ["not_sent"]

_DISPATCHED = EffectStatus.DISPATCHED
_PREPARED = EffectStatus.PREPARED
_UNKNOWN = EffectStatus.OUTCOME_UNKNOWN


def not_sent(
    machine: StateMachine,
    call: Call,
    record: OperationRecord,
    token: str,
    outcome: HandlerOutcome,
    *,
    unsent: bool,
) -> Generator[Step, Any, OperationRecord | EffectResult[Any]]:
    """Record an attempt that was not sent; a record back is DISPATCHED (send now) or RECONCILING.

    ``unsent`` says the operation provably held no effect before this attempt.
    """
    attempt = record.attempts
    error = outcome.error
    detail = error.reason if isinstance(error, EffectNotSent) else outcome.describe()
    evidence: dict[str, Any] = {"handler": outcome.describe(), "not_sent": True}
    if isinstance(error, EffectNotSent) and error.evidence:
        evidence["evidence"] = jsonable(error.evidence)
    fence = Expect(lease_token=token)
    attempts_left = attempt < record.attempt_budget
    if not unsent:
        return (yield from _earlier_unknown(machine, call, record, token, detail, evidence))
    wait = call.pace.next_wait() if attempts_left else None
    if wait is None:
        budget = record.attempt_budget
        if attempts_left:
            why = f"the next attempt would start past the call's {call.pace.deadline:g}s deadline"
        else:
            budget = attempt + call.contract.max_attempts
            evidence["attempt_budget"] = budget
            why = f"no attempts were left in this call; the next call has {budget - attempt}"
        changes = Changes(
            _PREPARED,
            lease=None,
            attempt_budget=budget,
            reason=f"not sent: {detail}; {why}. Call again with the same id to send it",
            evidence=evidence,
        )
        event = EventDraft(EventType.NOT_SENT, _DISPATCHED, _PREPARED, attempt, evidence)
        prepared: OperationRecord = yield machine.write(call, fence, changes, event)
        return machine.result(call, prepared, replayed=False)
    # PREPARED while waiting, under our lease: if this process dies now, the next
    # call finds a row that provably sent nothing and sends it, without reconciling.
    changes = Changes(
        _PREPARED,
        lease=machine.lease(call, token),
        reason=f"not sent: {detail}; sending again after {wait:.3f}s",
        evidence=evidence,
    )
    event = EventDraft(EventType.NOT_SENT, _DISPATCHED, _PREPARED, attempt, evidence)
    yield machine.write(call, fence, changes, event)
    yield machine.backoff(wait)
    changes = Changes(
        _DISPATCHED, lease=machine.lease(call, token), attempts=attempt + 1, reason=None
    )
    event = EventDraft(EventType.DISPATCHED, _PREPARED, _DISPATCHED, attempt + 1)
    dispatched: OperationRecord = yield machine.write(call, fence, changes, event)
    return dispatched


def _earlier_unknown(
    machine: StateMachine,
    call: Call,
    record: OperationRecord,
    token: str,
    detail: str,
    evidence: dict[str, Any],
) -> Generator[Step, Any, OperationRecord | EffectResult[Any]]:
    """This attempt sent nothing, but an earlier one may have: back to that uncertainty."""
    attempt = record.attempts
    fence = Expect(lease_token=token)
    reason = (
        f"outcome unknown: attempt {attempt} was not sent ({detail}), "
        "but an earlier attempt's outcome is still unknown"
    )
    if attempt < record.attempt_budget:
        changes = Changes(
            EffectStatus.RECONCILING,
            lease=machine.lease(call, token),
            reason=reason,
            evidence=evidence,
        )
        reconciling: OperationRecord = yield machine.write(
            call,
            fence,
            changes,
            EventDraft(EventType.NOT_SENT, _DISPATCHED, _UNKNOWN, attempt, evidence),
            EventDraft(EventType.RECONCILING, _UNKNOWN, EffectStatus.RECONCILING, attempt),
        )
        return reconciling
    budget = attempt + call.contract.max_attempts
    evidence["attempt_budget"] = budget
    changes = Changes(
        _UNKNOWN,
        lease=None,
        attempt_budget=budget,
        reason=f"{reason}; the next call reconciles it, with {budget - attempt} more attempts",
        evidence=evidence,
    )
    event = EventDraft(EventType.NOT_SENT, _DISPATCHED, _UNKNOWN, attempt, evidence)
    unknown: OperationRecord = yield machine.write(call, fence, changes, event)
    return machine.result(call, unknown, replayed=False)
