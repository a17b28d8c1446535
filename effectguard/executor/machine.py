"""The executor's state machine, written once for the sync and async drivers.

:meth:`StateMachine.run` is a generator. It yields the I/O it needs — a ledger
call, the handler, the probe, a pause — as step objects and receives their
results, so every rule lives here exactly once while
:class:`~effectguard.executor.EffectExecutor` decides how each step is performed.
"""

from __future__ import annotations

import dataclasses
import functools
import secrets
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from effectguard import process as _process
from effectguard.contract import EffectContract
from effectguard.errors import (
    EffectRejected,
    FencedWriteError,
    InternalError,
    OperationConflictError,
    OutputNotStored,
)
from effectguard.executor.conflict import differences
from effectguard.executor.handler import HandlerOutcome, Outcome
from effectguard.executor.late import record_late
from effectguard.executor.lease import KEEPER, TOKENS, abandoned, live_overlap
from effectguard.executor.not_sent import not_sent
from effectguard.executor.observe import Observer, Transition, notify
from effectguard.executor.outputs import Stored, decode, jsonable, not_stored, store
from effectguard.executor.pacing import Pace
from effectguard.executor.peers import PeerWait
from effectguard.executor.reconcile import Ruling, Verdict, decide
from effectguard.executor.redaction import scrub
from effectguard.fingerprint import redact_arguments
from effectguard.ledger.protocol import (
    UNSET,
    Changes,
    EffectLedger,
    EventDraft,
    Expect,
    Lease,
    NewOperation,
)
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

__all__ = [
    "Call",
    "HandlerStep",
    "LedgerStep",
    "PauseStep",
    "ProbeStep",
    "StateMachine",
    "Step",
]

HELD = frozenset({EffectStatus.DISPATCHED, EffectStatus.RECONCILING})
#: ``live=`` default of :meth:`StateMachine.result`: no output was produced by this call.
_NO_OUTPUT: Any = object()


@dataclass(frozen=True, slots=True)
class Call:
    """One call of an effect: its contract, arguments, handler and identity.

    ``secrets`` are the redacted argument values, masked in any text user code
    produced before it is stored or observed; ``observers`` hear of every
    transition and of the result.
    """

    contract: EffectContract
    arguments: Mapping[str, Any]
    handler: Callable[..., Any]
    operation_id: str
    provider_key: str | None
    fingerprint: str
    #: How long to wait for a peer holding a live lease (``wait_for_peer``), in seconds.
    wait_seconds: float
    pace: Pace
    secrets: tuple[str, ...] = ()
    observers: tuple[Observer, ...] = ()


@dataclass(frozen=True, slots=True)
class LedgerStep:
    """Run ``run`` (a ledger call) and send back its result."""

    run: Callable[[], Any]


@dataclass(frozen=True, slots=True)
class HandlerStep:
    """Call the handler for ``attempt`` under lease ``token``; send back a HandlerOutcome."""

    token: str
    attempt: int


@dataclass(frozen=True, slots=True)
class ProbeStep:
    """Call the contract's probe; send back an OutcomeProbeResult."""


@dataclass(frozen=True, slots=True)
class PauseStep:
    """Wait ``seconds`` before the next step.

    A ``backoff`` wait (between attempts or probes) advances an injected
    manual clock instead of sleeping; a poll for another worker always sleeps,
    since that worker needs real time to progress.
    """

    seconds: float
    backoff: bool = False


Step = LedgerStep | HandlerStep | ProbeStep | PauseStep
Machine = Generator[Step, Any, EffectResult[Any]]


class StateMachine:
    """The rules of DESIGN.md's executor, over one ledger and one clock."""

    def __init__(
        self, ledger: EffectLedger, clock: Callable[[], float] | None, poll_interval: float
    ) -> None:
        self.ledger = ledger
        self._clock = clock
        self.poll_interval = poll_interval

    def now(self) -> float | None:
        """The injected clock's time, or None for the ledger's own clock."""
        return None if self._clock is None else self._clock()

    def wall(self) -> float:
        """The injected clock's time, or the system's."""
        return time.time() if self._clock is None else self._clock()

    def record_late(self, call: Call, token: str, attempt: int, outcome: HandlerOutcome) -> None:
        """Record what a handler that lost its deadline or its lease finally did."""
        record_late(
            self.ledger,
            self.now,
            call.contract,
            call.operation_id,
            token,
            attempt,
            outcome,
            secrets=call.secrets,
            written=lambda event, record: self.notify(call, (event,), record),
        )

    def notify(self, call: Call, events: Sequence[EventDraft], record: OperationRecord) -> None:
        """Tell the call's observers of ``events``, which ``record`` now holds durably."""
        contract = call.contract
        for event in events:
            transition = Transition(
                operation_id=call.operation_id,
                contract=contract.name,
                contract_version=contract.version,
                from_status=event.from_status,
                to_status=event.to_status,
                event=event.type,
                attempt=event.attempt,
                evidence=event.evidence,
                reason=record.reason,
            )
            notify(call.observers, transition)

    def guaranteed(self, contract: EffectContract, record: OperationRecord) -> bool:
        """Whether a resend is covered by the provider's key: declared, and within its retention."""
        if not contract.provider_idempotency_guaranteed:
            return False
        retention = contract.provider_key_retention_seconds
        if retention is None:
            return True
        return self.wall() - record.first_dispatched_at.timestamp() < retention

    def result(
        self,
        call: Call,
        record: OperationRecord,
        *,
        replayed: bool,
        reason: str | None = None,
        live: Any = _NO_OUTPUT,
    ) -> EffectResult[Any]:
        """The caller's view of ``record``; the output is decoded only when it is CONFIRMED.

        A CONFIRMED operation whose output was not stored raises
        :class:`OutputNotStored` instead, with ``live`` (the output just
        produced) when there is one.
        """
        mark = not_stored(record)
        confirmed = record.status is EffectStatus.CONFIRMED
        result = EffectResult(
            status=record.status,
            operation_id=record.operation_id,
            output=decode(call.contract, record, self.ledger if replayed else None)
            if confirmed and mark is None
            else None,
            provider_operation_id=record.provider_operation_id,
            attempts=record.attempts,
            replayed=replayed,
            evidence=record.evidence,
            reason=reason or record.reason,
        )
        if mark is not None:
            raise OutputNotStored(
                result,
                reason=str(mark.get("reason")),
                path=str(mark.get("path", "$")),
                type_name=str(mark.get("type", "?")),
                output=None if live is _NO_OUTPUT else live,
                has_output=live is not _NO_OUTPUT,
                **({"hint": str(mark["hint"])} if "hint" in mark else {}),
            )
        return result

    def lease(self, call: Call, token: str) -> Lease:
        """A lease for ``token``, owned by this process, for the contract's lease length."""
        return Lease(token, _process.current_owner(), call.contract.lease_seconds)

    def write(
        self,
        call: Call,
        expect: Expect,
        changes: Changes,
        *events: EventDraft,
    ) -> LedgerStep:
        """A step that applies ``changes`` and ``events`` only if ``expect`` still holds.

        The call's observers hear of the events once they are durable.
        """

        def run() -> OperationRecord:
            record = self.ledger.transition(
                call.operation_id, expect, changes, events, now=self.now()
            )
            self.notify(call, events, record)
            return record

        return LedgerStep(run)

    def run(self, call: Call) -> Machine:
        """Drive ``call`` from its first read to the result its caller receives.

        The call's observers hear of that result, fresh or replayed, also when
        it reaches the caller as :class:`OutputNotStored` (the effect happened).
        """
        contract = call.contract
        try:
            result = yield from self.drive(call)
        except OutputNotStored as exc:
            told = exc.result
            notify(call.observers, Transition.of_result(contract.name, contract.version, told))
            raise
        notify(call.observers, Transition.of_result(contract.name, contract.version, result))
        return result

    def drive(self, call: Call) -> Machine:
        """The rules of :meth:`run`, without reporting the result."""
        ledger = self.ledger
        waiting = PeerWait(call.wait_seconds, self._clock, self.poll_interval)
        # Replaying a terminal operation is a plain read: no write lock is taken.
        record: OperationRecord | None = yield LedgerStep(
            lambda: ledger.get(call.operation_id, now=self.now())
        )
        while True:
            if record is None:
                token = secrets.token_hex(16)
                TOKENS.hold(token)
                try:
                    record, created = yield LedgerStep(functools.partial(self.claim, call, token))
                except BaseException:
                    TOKENS.release(token)
                    raise
                if created:
                    return (yield from self.work(call, record, token, dispatch=True))
                TOKENS.release(token)
                continue
            if record.fingerprint != call.fingerprint:
                raise OperationConflictError(
                    call.operation_id,
                    record.fingerprint,
                    call.fingerprint,
                    differences(
                        record,
                        contract=call.contract.name,
                        version=call.contract.version,
                        arguments=call.arguments,
                        provider_key=call.provider_key,
                        redact=call.contract.redact,
                    ),
                )
            if record.status.terminal:
                return self.result(call, record, replayed=True)
            if record.status is EffectStatus.QUARANTINED:
                return self.result(call, record, replayed=True)
            if record.lease_live and not abandoned(record.lease_token, record.lease_owner):
                pause = waiting.next_pause()
                if pause is not None:
                    yield PauseStep(pause)
                    record = yield LedgerStep(lambda: ledger.get(call.operation_id, now=self.now()))
                    continue
                expires = record.lease_expires_at
                waited = f"; waited {call.wait_seconds:g}s for it" if call.wait_seconds else ""
                return self.result(
                    call,
                    record,
                    replayed=True,
                    reason=f"another worker holds it (lease until {expires:%H:%M:%S} UTC){waited}",
                )
            token = secrets.token_hex(16)
            TOKENS.hold(token)
            try:
                taken = yield from self.take_over(call, record, token)
            except BaseException:
                TOKENS.release(token)
                raise
            if taken is None:
                TOKENS.release(token)
                record = yield LedgerStep(lambda: ledger.get(call.operation_id, now=self.now()))
                continue
            return (
                yield from self.work(
                    call, taken, token, dispatch=taken.status is EffectStatus.DISPATCHED
                )
            )

    def claim(self, call: Call, token: str) -> tuple[OperationRecord, bool]:
        """Insert the operation as DISPATCHED under ``token``, or return the record found."""
        operation = NewOperation(
            operation_id=call.operation_id,
            contract=call.contract.name,
            contract_version=call.contract.version,
            fingerprint=call.fingerprint,
            provider_key=call.provider_key,
            arguments=redact_arguments(call.arguments, call.contract.redact),
            attempt_budget=call.contract.max_attempts,
            lease=self.lease(call, token),
        )
        # PREPARED and DISPATCHED share one commit: it is durable before the handler runs.
        events = (
            EventDraft(EventType.PREPARED, None, EffectStatus.PREPARED, 0),
            EventDraft(EventType.DISPATCHED, EffectStatus.PREPARED, EffectStatus.DISPATCHED, 1),
        )
        record, created = self.ledger.claim(operation, events, now=self.now())
        if created:
            self.notify(call, events, record)
        return record, created

    def take_over(
        self, call: Call, record: OperationRecord, token: str
    ) -> Generator[Step, Any, OperationRecord | None]:
        """Take the lease of a record nobody is working on; None if another writer won."""
        status = record.status
        lease = self.lease(call, token)
        if status is EffectStatus.PREPARED:
            # A PREPARED row keeps its lease while its holder waits to retry; if that
            # holder is provably gone, its token fences the takeover instead of expiry.
            gone = record.lease_live and abandoned(record.lease_token, record.lease_owner)
            expect = Expect(
                statuses=frozenset({status}),
                lease_token=record.lease_token if gone else UNSET,
                lease_expired=not gone,
                event_count=record.event_count,
            )
            attempt = record.attempts + 1
            changes = Changes(EffectStatus.DISPATCHED, lease=lease, attempts=attempt)
            event = EventDraft(EventType.DISPATCHED, status, EffectStatus.DISPATCHED, attempt)
            step = self.write(call, expect, changes, event)
        elif status in HELD:
            gone = abandoned(record.lease_token, record.lease_owner)
            overlap = list(live_overlap(record))
            if status is EffectStatus.DISPATCHED and not gone and record.lease_owner:
                if record.lease_token is None:
                    msg = f"{call.operation_id!r} has a lease owner but no lease token"
                    raise InternalError(msg)
                overlap.append(
                    OverlapHolder(record.lease_token, record.attempts, record.lease_owner)
                )
            reason = (
                "the previous holder is gone" if gone else "the previous holder's lease expired"
            )
            evidence = {
                "previous_owner": record.lease_owner.to_json() if record.lease_owner else None,
                "owner_gone": gone,
                "overlap_risk": bool(overlap),
                "reason": reason,
            }
            expect = Expect(
                statuses=frozenset({status}),
                lease_token=record.lease_token,
                lease_expired=not gone,
                event_count=record.event_count,
            )
            changes = Changes(
                EffectStatus.RECONCILING,
                lease=lease,
                overlap=tuple(overlap),
                reason=f"outcome unknown: {reason}",
                evidence=evidence,
            )
            unknown = EffectStatus.OUTCOME_UNKNOWN
            step = self.write(
                call,
                expect,
                changes,
                EventDraft(EventType.LEASE_EXPIRED, status, unknown, record.attempts, evidence),
                EventDraft(
                    EventType.RECONCILING, unknown, EffectStatus.RECONCILING, record.attempts
                ),
            )
        else:
            expect = Expect(
                statuses=frozenset({status}), lease_expired=True, event_count=record.event_count
            )
            changes = Changes(EffectStatus.RECONCILING, lease=lease)
            event = EventDraft(
                EventType.RECONCILING, status, EffectStatus.RECONCILING, record.attempts
            )
            step = self.write(call, expect, changes, event)
        try:
            taken: OperationRecord = yield step
        except FencedWriteError:
            return None
        return taken

    def work(self, call: Call, record: OperationRecord, token: str, *, dispatch: bool) -> Machine:
        """Work the operation while holding its lease: dispatch, settle, reconcile, retry.

        The result carries the exception the last handler call raised, if it
        raised, so that the caller's error can chain it. ``unsent`` tracks
        whether the operation provably holds no effect before the next
        dispatch: true for a fresh claim or a PREPARED row, and after an
        authoritative NOT_COMMITTED with no overlap risk. Only then does an
        attempt that was not sent prove the operation was never sent.
        """
        renewal = KEEPER.start(
            self.ledger, call.operation_id, token, call.contract.lease_seconds, self.now
        )
        raised: BaseException | None = None
        unsent = True
        try:
            while True:
                if dispatch:
                    outcome: HandlerOutcome = yield HandlerStep(token, record.attempts)
                    raised = outcome.error if outcome.kind is Outcome.RAISED else None
                    settled = yield from self.settle(
                        call, record, token, outcome, unsent=unsent
                    )
                    if isinstance(settled, EffectResult):
                        return _carrying(settled, raised)
                    record = settled
                    if record.status is EffectStatus.DISPATCHED:
                        continue  # not sent, and sent again after a wait
                reconciled = yield from self.reconcile(call, record, token)
                if isinstance(reconciled, EffectResult):
                    return _carrying(reconciled, raised)
                (record, unsent), dispatch = reconciled, True
        finally:
            KEEPER.stop(renewal)
            TOKENS.release(token)

    def settle(
        self,
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
        fence = Expect(lease_token=token)
        dispatched = EffectStatus.DISPATCHED
        try:
            if outcome.kind is Outcome.RETURNED:
                stored = store(call.contract, outcome.value)
                if isinstance(stored, Stored):
                    # An output that cannot be stored still confirms: the handler returned.
                    changes, event = to_confirmed(
                        dispatched,
                        attempt,
                        output_json=stored.json,
                        provider_operation_id=stored.provider_operation_id,
                        reason=stored.note,
                        evidence=stored.evidence({"handler": outcome.describe()}),
                    )
                    confirmed = yield self.write(call, fence, changes, event)
                    return self.result(call, confirmed, replayed=False, live=outcome.value)
                reason = scrub(stored, call.secrets)
            elif outcome.kind is Outcome.REJECTED:
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
                    EventType.REJECTED, dispatched, EffectStatus.REJECTED, attempt, rejection
                )
                rejected = yield self.write(call, fence, changes, event)
                return self.result(call, rejected, replayed=False)
            elif outcome.kind is Outcome.NOT_SENT:
                return (yield from not_sent(self, call, record, token, outcome, unsent=unsent))
            elif outcome.kind is Outcome.TIMED_OUT:
                reason = f"the handler passed its {call.contract.handler_timeout:g}s deadline"
                if outcome.still_running:
                    reason += " and may still be sending"
            else:
                reason = scrub(_unknown_because(outcome), call.secrets)
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
                event = EventDraft(
                    EventType.OUTCOME_UNKNOWN, dispatched, unknown, attempt, evidence
                )
                yield self.write(call, fence, changes, event)
                if outcome.error is None:
                    msg = f"an interruption of {call.operation_id!r} without its exception"
                    raise InternalError(msg)
                raise outcome.error
            changes = Changes(
                EffectStatus.RECONCILING,
                lease=self.lease(call, token),
                overlap=tuple(overlap),
                reason=f"outcome unknown: {reason}",
                evidence=evidence,
            )
            # Unknown and reconciling share one commit; the probe runs under the same lease.
            reconciling: OperationRecord = yield self.write(
                call,
                fence,
                changes,
                EventDraft(EventType.OUTCOME_UNKNOWN, dispatched, unknown, attempt, evidence),
                EventDraft(EventType.RECONCILING, unknown, EffectStatus.RECONCILING, attempt),
            )
            return reconciling  # noqa: TRY300 - every branch above writes under the same fence
        except FencedWriteError:
            # Another worker took the operation over: what this handler did is evidence only.
            # A handler still running records its outcome itself when it ends; recording
            # "timed out" now would clear the overlap risk it still carries.
            if not outcome.still_running:
                yield LedgerStep(lambda: self.record_late(call, token, attempt, outcome))
            if outcome.kind is Outcome.INTERRUPTED and outcome.error is not None:
                raise outcome.error from None
            current = yield LedgerStep(lambda: self.ledger.get(call.operation_id, now=self.now()))
            return self.result(call, current, replayed=False)

    def backoff(self, seconds: float) -> PauseStep:
        """A wait between attempts or probes (see :class:`PauseStep`)."""
        return PauseStep(seconds, backoff=True)

    def probe(self, call: Call) -> Generator[Step, Any, tuple[OutcomeProbeResult | None, int]]:
        """Probe; while the provider answers PENDING, probe again after a backoff.

        Returns the last answer (None without a probe) and how many probes ran.
        Re-probing uses no attempt and sends nothing; it stops at the call's deadline.
        """
        if call.contract.outcome_probe is None:
            return None, 0
        probes = 0
        while True:
            probe: OutcomeProbeResult = yield ProbeStep()
            probes += 1
            if probe.status is not ProbeStatus.PENDING:
                return probe, probes
            wait = call.pace.next_wait()
            if wait is None:
                return probe, probes
            yield self.backoff(wait)

    def reconcile(
        self, call: Call, record: OperationRecord, token: str
    ) -> Generator[Step, Any, tuple[OperationRecord, bool] | EffectResult[Any]]:
        """Apply the reconcile table; a record back means dispatch again (DISPATCHED, our lease).

        With it comes whether the operation provably holds no effect (see :meth:`work`).
        """
        contract, secrets = call.contract, call.secrets
        probe, probes = yield from self.probe(call)
        stored: Stored | str | None = None
        if probe is not None and probe.status is ProbeStatus.COMMITTED:
            stored = store(contract, probe.output)
        overlap = live_overlap(record)
        ruling = decide(
            probe,
            confirmable=isinstance(stored, Stored),
            guaranteed=self.guaranteed(contract, record),
            overlap_risk=bool(overlap),
            attempts_left=record.attempts < record.attempt_budget,
            policy=contract.unknown_outcome,
        )
        evidence: dict[str, Any] = {
            "probe": None if probe is None else probe.status.value,
            "probe_evidence": {} if probe is None else scrub(jsonable(probe.evidence), secrets),
            "overlap_risk": bool(overlap),
        }
        # Why the outcome was uncertain in the first place stays on the record.
        cause = record.evidence.get("cause") or record.evidence.get("reason")
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
        reconciling = EffectStatus.RECONCILING
        attempt = record.attempts
        fence = Expect(lease_token=token)
        if ruling.verdict is Verdict.CONFIRM:
            if not isinstance(stored, Stored) or probe is None:
                msg = f"a CONFIRM ruling on {call.operation_id!r} without a storable probe output"
                raise InternalError(msg)
            changes, event = to_confirmed(
                reconciling,
                attempt,
                output_json=stored.json,
                provider_operation_id=probe.provider_operation_id or stored.provider_operation_id,
                reason=stored.note or ruling.reason,
                evidence=evidence,
            )
            step = self.write(call, fence, changes, event)
        elif ruling.verdict is Verdict.RETRY:
            wait = call.pace.next_wait()
            if wait is None:
                return (
                    yield from self.give_up_waiting(
                        call, token, attempt, ruling, evidence, overlap
                    )
                )
            yield self.backoff(wait)
            changes = Changes(
                EffectStatus.DISPATCHED,
                lease=self.lease(call, token),
                attempts=attempt + 1,
                reason=f"retrying with the same key: {ruling.reason}",
                evidence=evidence,
                overlap=overlap,
            )
            step = self.write(
                call,
                fence,
                changes,
                EventDraft(EventType.RETRY, reconciling, EffectStatus.PREPARED, attempt, evidence),
                EventDraft(
                    EventType.DISPATCHED,
                    EffectStatus.PREPARED,
                    EffectStatus.DISPATCHED,
                    attempt + 1,
                ),
            )
        else:
            target = (
                EffectStatus.QUARANTINED
                if ruling.verdict is Verdict.QUARANTINE
                else EffectStatus.OUTCOME_UNKNOWN
            )
            kind = (
                EventType.QUARANTINED
                if target is EffectStatus.QUARANTINED
                else EventType.OUTCOME_UNKNOWN
            )
            reason = f"{cause}; {ruling.reason}" if cause else ruling.reason
            changes = Changes(target, lease=None, reason=reason, evidence=evidence, overlap=overlap)
            step = self.write(
                call, fence, changes, EventDraft(kind, reconciling, target, attempt, evidence)
            )
        try:
            written: OperationRecord = yield step
        except FencedWriteError:
            current = yield LedgerStep(lambda: self.ledger.get(call.operation_id, now=self.now()))
            return self.result(call, current, replayed=False)
        if ruling.verdict is Verdict.RETRY:
            return written, ruling.nothing_committed
        live = probe.output if probe is not None and ruling.verdict is Verdict.CONFIRM else None
        return self.result(call, written, replayed=False, live=live)

    def give_up_waiting(
        self,
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
        reconciling = EffectStatus.RECONCILING
        target, kind = EffectStatus.OUTCOME_UNKNOWN, EventType.OUTCOME_UNKNOWN
        if ruling.nothing_committed:
            target, kind = EffectStatus.PREPARED, EventType.RETRY
        reason = f"{ruling.reason}; {deadline}: call again to retry it"
        changes = Changes(target, lease=None, reason=reason, evidence=evidence, overlap=overlap)
        event = EventDraft(kind, reconciling, target, attempt, evidence)
        try:
            written: OperationRecord = yield self.write(
                call, Expect(lease_token=token), changes, event
            )
        except FencedWriteError:
            written = yield LedgerStep(lambda: self.ledger.get(call.operation_id, now=self.now()))
        return self.result(call, written, replayed=False)


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


def _carrying(result: EffectResult[Any], error: BaseException | None) -> EffectResult[Any]:
    """``result`` carrying the handler's exception of this call (never stored)."""
    return result if error is None else dataclasses.replace(result, handler_error=error)
