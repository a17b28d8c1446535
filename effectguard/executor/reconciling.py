"""Reconciling an uncertain outcome: probe, apply the reconcile table, write its ruling.

Functions over the :class:`~effectguard.executor.machine.StateMachine` (as in
:mod:`~effectguard.executor.not_sent`). The table itself, what a probe's
answer and the overlap risk allow, is :func:`effectguard.executor.reconcile.decide`;
this module asks the probe (again, after a backoff, while it answers PENDING),
turns the ruling into one fenced write (CONFIRMED, a retry under the same key,
QUARANTINED or OUTCOME_UNKNOWN), and leaves a retry that would start past the
call's deadline to the next call (:func:`give_up_waiting`).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from effectguard.errors import FencedWriteError, InternalError
from effectguard.executor.lease import live_overlap
from effectguard.executor.outputs import Stored, jsonable, store
from effectguard.executor.reconcile import Ruling, Verdict, decide
from effectguard.executor.redaction import scrub
from effectguard.executor.steps import LedgerStep, ProbeStep
from effectguard.ledger.protocol import Changes, EventDraft, Expect
from effectguard.ledger.transitions import to_confirmed
from effectguard.model import (
    EffectResult,
    EffectStatus,
    EventType,
    OperationRecord,
    OutcomeProbeResult,
    OverlapHolder,
    ProbeStatus,
)

if TYPE_CHECKING:
    from effectguard.executor.machine import StateMachine
    from effectguard.executor.steps import Call, Step

__all__ = ["give_up_waiting", "probe", "reconcile"]

_RECONCILING = EffectStatus.RECONCILING


def probe(
    machine: StateMachine, call: Call
) -> Generator[Step, Any, tuple[OutcomeProbeResult | None, int]]:
    """Probe; while the provider answers PENDING, probe again after a backoff.

    Returns the last answer (None without a probe) and how many probes ran.
    Re-probing uses no attempt and sends nothing; it stops at the call's deadline.
    """
    if call.contract.outcome_probe is None:
        return None, 0
    probes = 0
    while True:
        answer: OutcomeProbeResult = yield ProbeStep()
        probes += 1
        if answer.status is not ProbeStatus.PENDING:
            return answer, probes
        wait = call.pace.next_wait()
        if wait is None:
            return answer, probes
        yield machine.backoff(wait)


def reconcile(
    machine: StateMachine, call: Call, record: OperationRecord, token: str
) -> Generator[Step, Any, tuple[OperationRecord, bool] | EffectResult[Any]]:
    """Apply the reconcile table; a record back means dispatch again (DISPATCHED, our lease).

    With it comes whether the operation provably holds no effect (see
    :meth:`~effectguard.executor.machine.StateMachine.work`).
    """
    contract = call.contract
    answer, probes = yield from probe(machine, call)
    stored: Stored | str | None = None
    if answer is not None and answer.status is ProbeStatus.COMMITTED:
        stored = store(contract, answer.output)
    overlap = live_overlap(record)
    ruling = decide(
        answer,
        confirmable=isinstance(stored, Stored),
        guaranteed=machine.guaranteed(contract, record),
        overlap_risk=bool(overlap),
        attempts_left=record.attempts < record.attempt_budget,
        policy=contract.unknown_outcome,
    )
    # Why the outcome was uncertain in the first place stays on the record.
    cause = record.evidence.get("cause") or record.evidence.get("reason")
    evidence = _evidence(call, record, answer, probes, stored, overlap, cause)
    attempt = record.attempts
    fence = Expect(lease_token=token)
    if ruling.verdict is Verdict.CONFIRM:
        if not isinstance(stored, Stored) or answer is None:
            msg = f"a CONFIRM ruling on {call.operation_id!r} without a storable probe output"
            raise InternalError(msg)
        changes, event = to_confirmed(
            _RECONCILING,
            attempt,
            output_json=stored.json,
            provider_operation_id=answer.provider_operation_id or stored.provider_operation_id,
            reason=stored.note or ruling.reason,
            evidence=evidence,
        )
        step = machine.write(call, fence, changes, event)
    elif ruling.verdict is Verdict.RETRY:
        wait = call.pace.next_wait()
        if wait is None:
            return (
                yield from give_up_waiting(machine, call, token, attempt, ruling, evidence, overlap)
            )
        yield machine.backoff(wait)
        step = _retry(machine, call, token, attempt, ruling, evidence, overlap)
    else:
        step = _stop(machine, call, token, attempt, ruling, evidence, overlap, cause)
    try:
        written: OperationRecord = yield step
    except FencedWriteError:
        current = yield LedgerStep(lambda: machine.ledger.get(call.operation_id, now=machine.now()))
        return machine.result(call, current, replayed=False)
    if ruling.verdict is Verdict.RETRY:
        return written, ruling.nothing_committed
    live = answer.output if answer is not None and ruling.verdict is Verdict.CONFIRM else None
    return machine.result(call, written, replayed=False, live=live)


def give_up_waiting(
    machine: StateMachine,
    call: Call,
    token: str,
    attempt: int,
    ruling: Ruling,
    evidence: dict[str, Any],
    overlap: tuple[OverlapHolder, ...],
) -> Generator[Step, Any, EffectResult[Any]]:
    """A retry is allowed but would start past the call's deadline: leave it to the next call.

    Provably unsent, the operation waits PREPARED; otherwise OUTCOME_UNKNOWN,
    so the next call reconciles it again before any resend.
    """
    deadline = f"the next attempt would start past the call's {call.pace.deadline:g}s deadline"
    target, kind = EffectStatus.OUTCOME_UNKNOWN, EventType.OUTCOME_UNKNOWN
    if ruling.nothing_committed:
        target, kind = EffectStatus.PREPARED, EventType.RETRY
    reason = f"{ruling.reason}; {deadline}: call again to retry it"
    changes = Changes(target, lease=None, reason=reason, evidence=evidence, overlap=overlap)
    event = EventDraft(kind, _RECONCILING, target, attempt, evidence)
    try:
        written: OperationRecord = yield machine.write(
            call, Expect(lease_token=token), changes, event
        )
    except FencedWriteError:
        written = yield LedgerStep(lambda: machine.ledger.get(call.operation_id, now=machine.now()))
    return machine.result(call, written, replayed=False)


def _evidence(
    call: Call,
    record: OperationRecord,
    answer: OutcomeProbeResult | None,
    probes: int,
    stored: Stored | str | None,
    overlap: tuple[OverlapHolder, ...],
    cause: Any,
) -> dict[str, Any]:
    """What the ledger keeps of a reconciliation: the probe's answer, the overlap, the cause."""
    secrets = call.secrets
    evidence: dict[str, Any] = {
        "probe": None if answer is None else answer.status.value,
        "probe_evidence": {} if answer is None else scrub(jsonable(answer.evidence), secrets),
        "overlap_risk": bool(overlap),
    }
    if cause:
        evidence["cause"] = cause
    if "error" in record.evidence:
        evidence["error"] = record.evidence["error"]
    if probes > 1:
        evidence["probes"] = probes
    if isinstance(stored, str):
        evidence["unconfirmable"] = scrub(stored, secrets)
    elif stored is not None:
        evidence = stored.evidence(evidence)
    return evidence


def _retry(
    machine: StateMachine,
    call: Call,
    token: str,
    attempt: int,
    ruling: Ruling,
    evidence: dict[str, Any],
    overlap: tuple[OverlapHolder, ...],
) -> LedgerStep:
    """Back to DISPATCHED under our lease, for the next attempt with the same key."""
    changes = Changes(
        EffectStatus.DISPATCHED,
        lease=machine.lease(call, token),
        attempts=attempt + 1,
        reason=f"retrying with the same key: {ruling.reason}",
        evidence=evidence,
        overlap=overlap,
    )
    return machine.write(
        call,
        Expect(lease_token=token),
        changes,
        EventDraft(EventType.RETRY, _RECONCILING, EffectStatus.PREPARED, attempt, evidence),
        EventDraft(
            EventType.DISPATCHED, EffectStatus.PREPARED, EffectStatus.DISPATCHED, attempt + 1
        ),
    )


def _stop(
    machine: StateMachine,
    call: Call,
    token: str,
    attempt: int,
    ruling: Ruling,
    evidence: dict[str, Any],
    overlap: tuple[OverlapHolder, ...],
    cause: Any,
) -> LedgerStep:
    """QUARANTINED for an operator, or OUTCOME_UNKNOWN for the next call, the lease released."""
    if ruling.verdict is Verdict.QUARANTINE:
        target, kind = EffectStatus.QUARANTINED, EventType.QUARANTINED
    else:
        target, kind = EffectStatus.OUTCOME_UNKNOWN, EventType.OUTCOME_UNKNOWN
    reason = f"{cause}; {ruling.reason}" if cause else ruling.reason
    changes = Changes(target, lease=None, reason=reason, evidence=evidence, overlap=overlap)
    return machine.write(
        call,
        Expect(lease_token=token),
        changes,
        EventDraft(kind, _RECONCILING, target, attempt, evidence),
    )
