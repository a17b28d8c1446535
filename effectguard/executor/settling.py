"""Settling a handler's outcome: what one attempt's return, rejection or failure becomes.

A function over the :class:`~effectguard.executor.machine.StateMachine` (as in
:mod:`~effectguard.executor.not_sent`, which settles an attempt that was not
sent). A return that can be stored confirms; an :class:`EffectRejected`
rejects; anything else leaves the outcome unknown and moves the operation to
RECONCILING under the same lease, in one commit, for
:mod:`~effectguard.executor.reconciling` to resolve. Every write is fenced by
the lease token: a worker that lost the lease records its outcome as evidence
only.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from effectguard import process as _process
from effectguard.errors import EffectRejected, FencedWriteError, InternalError
from effectguard.executor.handler import HandlerOutcome, Outcome
from effectguard.executor.lease import live_overlap
from effectguard.executor.not_sent import not_sent
from effectguard.executor.outputs import Stored, jsonable, store
from effectguard.executor.redaction import scrub
from effectguard.executor.steps import LedgerStep
from effectguard.ledger.protocol import Changes, EventDraft, Expect
from effectguard.ledger.transitions import to_confirmed
from effectguard.model import EffectResult, EffectStatus, EventType, OperationRecord, OverlapHolder

if TYPE_CHECKING:
    from effectguard.executor.machine import StateMachine
    from effectguard.executor.steps import Call, Step

__all__ = ["settle"]


def settle(
    machine: StateMachine,
    call: Call,
    record: OperationRecord,
    token: str,
    outcome: HandlerOutcome,
    *,
    unsent: bool,
) -> Generator[Step, Any, OperationRecord | EffectResult[Any]]:
    """Record a handler's outcome; a record back means reconcile it (RECONCILING, our lease).

    A DISPATCHED record back means the attempt was not sent and is to be sent again now.
    """
    attempt = record.attempts
    try:
        if outcome.kind is Outcome.RETURNED:
            stored = store(call.contract, outcome.value)
            if isinstance(stored, Stored):
                return (yield from _confirm(machine, call, attempt, token, outcome, stored))
            reason = scrub(stored, call.secrets)
        elif outcome.kind is Outcome.REJECTED:
            return (yield from _reject(machine, call, attempt, token, outcome))
        elif outcome.kind is Outcome.NOT_SENT:
            return (yield from not_sent(machine, call, record, token, outcome, unsent=unsent))
        elif outcome.kind is Outcome.TIMED_OUT:
            reason = f"the handler passed its {call.contract.handler_timeout:g}s deadline"
            if outcome.still_running:
                reason += " and may still be sending"
        else:
            reason = scrub(_unknown_because(outcome), call.secrets)
        return (yield from _unknown(machine, call, record, token, outcome, reason))
    except FencedWriteError:
        # Another worker took the operation over: what this handler did is evidence only.
        # A handler still running records its outcome itself when it ends; recording
        # "timed out" now would clear the overlap risk it still carries.
        if not outcome.still_running:
            yield LedgerStep(lambda: machine.record_late(call, token, attempt, outcome))
        if outcome.kind is Outcome.INTERRUPTED and outcome.error is not None:
            raise outcome.error from None
        current = yield LedgerStep(lambda: machine.ledger.get(call.operation_id, now=machine.now()))
        return machine.result(call, current, replayed=False)


def _confirm(
    machine: StateMachine,
    call: Call,
    attempt: int,
    token: str,
    outcome: HandlerOutcome,
    stored: Stored,
) -> Generator[Step, Any, EffectResult[Any]]:
    """The handler returned: CONFIRMED, with its output if it could be stored."""
    # An output that cannot be stored still confirms: the handler returned.
    changes, event = to_confirmed(
        EffectStatus.DISPATCHED,
        attempt,
        output_json=stored.json,
        provider_operation_id=stored.provider_operation_id,
        reason=stored.note,
        evidence=stored.evidence({"handler": outcome.describe()}),
    )
    confirmed = yield machine.write(call, Expect(lease_token=token), changes, event)
    return machine.result(call, confirmed, replayed=False, live=outcome.value)


def _reject(
    machine: StateMachine, call: Call, attempt: int, token: str, outcome: HandlerOutcome
) -> Generator[Step, Any, EffectResult[Any]]:
    """The handler raised :class:`EffectRejected`: REJECTED, with the provider's evidence."""
    error = outcome.error
    if not isinstance(error, EffectRejected):
        msg = f"a rejection of {call.operation_id!r} without its EffectRejected"
        raise InternalError(msg)
    rejection = scrub(jsonable(error.evidence), call.secrets)
    changes = Changes(
        EffectStatus.REJECTED,
        lease=None,
        reason=scrub(str(error.reason), call.secrets),
        evidence=rejection,
    )
    event = EventDraft(
        EventType.REJECTED, EffectStatus.DISPATCHED, EffectStatus.REJECTED, attempt, rejection
    )
    rejected = yield machine.write(call, Expect(lease_token=token), changes, event)
    return machine.result(call, rejected, replayed=False)


def _unknown(
    machine: StateMachine,
    call: Call,
    record: OperationRecord,
    token: str,
    outcome: HandlerOutcome,
    reason: str,
) -> Generator[Step, Any, OperationRecord]:
    """The outcome is unknown: RECONCILING under our lease, or OUTCOME_UNKNOWN if interrupted."""
    attempt = record.attempts
    fence = Expect(lease_token=token)
    dispatched = EffectStatus.DISPATCHED
    overlap = list(live_overlap(record))
    if outcome.still_running:
        overlap.append(OverlapHolder(token, attempt, _process.current_owner()))
    evidence: dict[str, Any] = {
        "handler": scrub(outcome.describe(), call.secrets),
        "reason": reason,
        "overlap_risk": bool(overlap),
    }
    if outcome.kind is Outcome.RAISED and outcome.error is not None:
        evidence["error"] = _error_evidence(outcome.error, call.secrets)
    unknown = EffectStatus.OUTCOME_UNKNOWN
    if outcome.kind is Outcome.INTERRUPTED:
        changes = Changes(
            unknown, lease=None, overlap=tuple(overlap), reason=reason, evidence=evidence
        )
        event = EventDraft(EventType.OUTCOME_UNKNOWN, dispatched, unknown, attempt, evidence)
        yield machine.write(call, fence, changes, event)
        if outcome.error is None:
            msg = f"an interruption of {call.operation_id!r} without its exception"
            raise InternalError(msg)
        raise outcome.error
    changes = Changes(
        EffectStatus.RECONCILING,
        lease=machine.lease(call, token),
        overlap=tuple(overlap),
        reason=f"outcome unknown: {reason}",
        evidence=evidence,
    )
    # Unknown and reconciling share one commit; the probe runs under the same lease.
    reconciling: OperationRecord = yield machine.write(
        call,
        fence,
        changes,
        EventDraft(EventType.OUTCOME_UNKNOWN, dispatched, unknown, attempt, evidence),
        EventDraft(EventType.RECONCILING, unknown, EffectStatus.RECONCILING, attempt),
    )
    return reconciling


def _unknown_because(outcome: HandlerOutcome) -> str:
    """Why a handler's outcome leaves the effect in doubt, in a sentence an operator reads."""
    error = outcome.error
    if outcome.kind is Outcome.RAISED and error is not None:
        return (
            f"the handler raised {type(error).__name__}: {error} "
            "(a handler that raised may already have sent the request)"
        )
    return f"the handler {outcome.describe()}"


def _error_evidence(error: BaseException, secrets: tuple[str, ...]) -> dict[str, str]:
    """The type and message of a handler's exception, as the ledger keeps them."""
    return {"type": type(error).__name__, "message": scrub(str(error), secrets)}
