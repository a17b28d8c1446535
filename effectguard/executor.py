"""The executor: records an operation before dispatch and settles its outcome.

The rules live once, in :meth:`EffectExecutor._machine`, a generator that
yields the I/O it needs (a ledger call, the handler, the probe, a pause). Two
thin drivers perform those steps: :meth:`EffectExecutor.execute` directly, and
:meth:`EffectExecutor.execute_async` with ledger I/O kept off the event loop.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import secrets
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

from effectguard import _handler, _process
from effectguard._handler import HandlerOutcome, Outcome
from effectguard._lease import KEEPER, TOKENS
from effectguard._reconcile import Verdict, decide
from effectguard.contract import EffectContract
from effectguard.errors import (
    ConfigurationError,
    EffectRejected,
    FencedWriteError,
    OperationConflictError,
)
from effectguard.fingerprint import canonical_json, redact_arguments, request_fingerprint
from effectguard.ledger.base import Changes, EffectLedger, EventDraft, Expect, Lease, NewOperation
from effectguard.model import (
    EffectResult,
    EffectStatus,
    EventType,
    OperationRecord,
    OutcomeProbeResult,
    OverlapHolder,
    ProbeStatus,
)

__all__ = ["EffectExecutor", "Handler"]

logger = logging.getLogger("effectguard")

#: ``handler(arguments, *, idempotency_key=...)``; the executor calls it at most once per attempt.
Handler = Callable[..., Any]

_HELD = frozenset({EffectStatus.DISPATCHED, EffectStatus.RECONCILING})
_LATE_WRITE_ATTEMPTS = 8


@dataclass(frozen=True, slots=True)
class _Call:
    contract: EffectContract
    arguments: Mapping[str, Any]
    handler: Handler
    operation_id: str
    provider_key: str | None
    fingerprint: str
    wait_seconds: float


@dataclass(frozen=True, slots=True)
class _LedgerStep:
    run: Callable[[], Any]


@dataclass(frozen=True, slots=True)
class _HandlerStep:
    token: str
    attempt: int


@dataclass(frozen=True, slots=True)
class _ProbeStep:
    pass


@dataclass(frozen=True, slots=True)
class _PauseStep:
    seconds: float


_Step = _LedgerStep | _HandlerStep | _ProbeStep | _PauseStep
_Machine = Generator[_Step, Any, EffectResult[Any]]


@dataclass(frozen=True, slots=True)
class _Stored:
    """An output that passed the postcondition and fits the ledger."""

    json: str
    provider_operation_id: str | None


class EffectExecutor:
    """Runs side effects so that each business operation takes effect at most once.

    Before a handler runs, the operation is claimed in one durable commit. A
    confirmed or rejected operation is replayed, never dispatched again. An
    uncertain outcome is reconciled with the contract's probe and retried only
    when the probe's authoritative NOT_COMMITTED, or the provider's documented
    idempotency, makes a resend safe; otherwise it is quarantined (or kept
    unknown) for later evidence or an operator.

    ``clock`` (epoch seconds) replaces the ledger's clock for leases and the
    executor's for key retention, so tests need not sleep.
    """

    def __init__(
        self,
        ledger: EffectLedger,
        *,
        clock: Callable[[], float] | None = None,
        poll_interval: float = 0.05,
    ) -> None:
        self.ledger = ledger
        self._clock = clock
        self.poll_interval = poll_interval

    def __repr__(self) -> str:
        return f"EffectExecutor({self.ledger!r})"

    # -- public drivers ----------------------------------------------------------------

    def execute(
        self,
        contract: EffectContract,
        arguments: Mapping[str, Any],
        handler: Handler,
        *,
        wait_seconds: float = 0.0,
    ) -> EffectResult[Any]:
        """Run ``handler`` for ``arguments`` under ``contract``, at most once per operation.

        Returns the result, fresh or replayed; it raises only for a conflicting
        request (:class:`OperationConflictError`), arguments that are not JSON
        (``TypeError``), an invalid contract (:class:`ConfigurationError`) or a
        ledger failure (:class:`LedgerUnavailableError`), in which case nothing
        is ever dispatched again on the strength of the missing record.
        ``wait_seconds`` waits that long for another worker holding the
        operation to finish, then replays its outcome.
        """
        if inspect.iscoroutinefunction(handler):
            msg = "handler is a coroutine function; use execute_async"
            raise TypeError(msg)
        call = self._prepare(contract, arguments, handler, wait_seconds)
        machine = self._machine(call)
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = machine.throw(error) if error is not None else machine.send(value)
            except StopIteration as stop:
                result: EffectResult[Any] = stop.value
                return result
            error = None
            try:
                value = self._perform(call, step)
            except BaseException as exc:  # noqa: BLE001 - handed to the machine, which re-raises
                value, error = None, exc

    async def execute_async(
        self,
        contract: EffectContract,
        arguments: Mapping[str, Any],
        handler: Handler,
        *,
        wait_seconds: float = 0.0,
    ) -> EffectResult[Any]:
        """Like :meth:`execute`, for async or sync handlers and probes.

        Ledger I/O runs in worker threads, never on the event loop. An async
        handler that passes its timeout is cancelled and awaited until it has
        stopped, so it leaves no overlap risk; a sync one runs in a thread and does.
        """
        call = self._prepare(contract, arguments, handler, wait_seconds)
        machine = self._machine(call)
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = machine.throw(error) if error is not None else machine.send(value)
            except StopIteration as stop:
                result: EffectResult[Any] = stop.value
                return result
            error = None
            try:
                value = await self._perform_async(call, step)
            except BaseException as exc:  # noqa: BLE001 - handed to the machine, which re-raises
                value, error = None, exc

    # -- step performers ---------------------------------------------------------------

    def _perform(self, call: _Call, step: _Step) -> Any:
        if isinstance(step, _LedgerStep):
            return step.run()
        if isinstance(step, _HandlerStep):
            return self._call_handler(call, step)
        if isinstance(step, _ProbeStep):
            return self._call_probe(call)
        time.sleep(step.seconds)
        return None

    async def _perform_async(self, call: _Call, step: _Step) -> Any:
        if isinstance(step, _LedgerStep):
            return await asyncio.to_thread(step.run)
        if isinstance(step, _HandlerStep):
            if inspect.iscoroutinefunction(call.handler):
                return await _handler.call_async(
                    lambda: call.handler(call.arguments, idempotency_key=call.provider_key),
                    call.contract.handler_timeout,
                )
            return await asyncio.to_thread(self._call_handler, call, step)
        if isinstance(step, _ProbeStep):
            probe = call.contract.outcome_probe
            if inspect.iscoroutinefunction(probe):
                outcome = await _handler.call_async(
                    lambda: probe(call.arguments, idempotency_key=call.provider_key),
                    call.contract.handler_timeout,
                )
                return self._probe_outcome(outcome)
            return await asyncio.to_thread(self._call_probe, call)
        await asyncio.sleep(step.seconds)
        return None

    def _call_handler(self, call: _Call, step: _HandlerStep) -> HandlerOutcome:
        def invoke() -> Any:
            return call.handler(call.arguments, idempotency_key=call.provider_key)

        timeout = call.contract.handler_timeout
        if timeout is None:
            return _handler.classify(invoke)
        TOKENS.hold(step.token)  # the handler's thread keeps the token active until it ends

        def late(outcome: HandlerOutcome) -> None:
            try:
                self._record_late(call, step.token, step.attempt, outcome)
            finally:
                TOKENS.release(step.token)

        outcome = _handler.call_in_thread(
            invoke, timeout, late, name=f"effectguard-handler-{call.operation_id}"
        )
        if not outcome.still_running:
            TOKENS.release(step.token)
        return outcome

    def _call_probe(self, call: _Call) -> OutcomeProbeResult:
        probe = call.contract.outcome_probe
        assert probe is not None  # noqa: S101 - the machine yields a probe step only when there is one

        def invoke() -> Any:
            value = probe(call.arguments, idempotency_key=call.provider_key)
            if inspect.isawaitable(value):
                return asyncio.run(_await(value))
            return value

        timeout = call.contract.handler_timeout
        if timeout is None:
            return self._probe_outcome(_handler.classify(invoke))
        outcome = _handler.call_in_thread(
            invoke, timeout, lambda _: None, name=f"effectguard-probe-{call.operation_id}"
        )
        return self._probe_outcome(outcome)

    @staticmethod
    def _probe_outcome(outcome: HandlerOutcome) -> OutcomeProbeResult:
        if outcome.kind is Outcome.RETURNED:
            return _handler.probe_result(outcome.value)
        if outcome.kind is Outcome.INTERRUPTED and outcome.error is not None:
            raise outcome.error
        return OutcomeProbeResult.unknown({"probe_error": outcome.describe()})

    # -- helpers -----------------------------------------------------------------------

    def _now(self) -> float | None:
        return None if self._clock is None else self._clock()

    def _wall(self) -> float:
        return time.time() if self._clock is None else self._clock()

    def _prepare(
        self,
        contract: EffectContract,
        arguments: Mapping[str, Any],
        handler: Handler,
        wait_seconds: float,
    ) -> _Call:
        if not isinstance(contract, EffectContract):
            msg = f"contract must be an EffectContract, not {type(contract).__name__}"
            raise TypeError(msg)
        if not callable(handler):
            msg = f"handler must be callable, not {type(handler).__name__}"
            raise TypeError(msg)
        if not isinstance(arguments, Mapping):
            msg = f"arguments must be a mapping of parameter names, not {type(arguments).__name__}"
            raise TypeError(msg)
        if not wait_seconds >= 0:
            msg = f"wait_seconds must be >= 0, not {wait_seconds!r}"
            raise ValueError(msg)
        arguments = dict(arguments)
        operation_id, key = contract.identity(arguments)
        fingerprint = request_fingerprint(
            contract.name, contract.version, arguments, key, contract.redact
        )
        return _Call(contract, arguments, handler, operation_id, key, fingerprint, wait_seconds)

    def _abandoned(self, token: str | None, owner: Any) -> bool:
        """True when the lease ``token`` of ``owner`` provably has no running holder."""
        if token is None or owner is None:
            return True
        if _process.is_this_process(owner):
            return not TOKENS.active(token)
        return _process.process_gone(owner)

    def _live_overlap(self, record: OperationRecord) -> tuple[OverlapHolder, ...]:
        return tuple(h for h in record.overlap if not self._abandoned(h.token, h.owner))

    def _guaranteed(self, contract: EffectContract, record: OperationRecord) -> bool:
        if not contract.provider_idempotency_guaranteed:
            return False
        retention = contract.provider_key_retention_seconds
        if retention is None:
            return True
        return self._wall() - record.first_dispatched_at.timestamp() < retention

    @staticmethod
    def _store(contract: EffectContract, output: Any) -> _Stored | str:
        """Return the output's stored form, or why it cannot be confirmed."""
        if contract.postcondition is not None:
            try:
                holds = bool(contract.postcondition(output))
            except Exception as exc:  # noqa: BLE001 - a failing check is a failed check
                return f"the postcondition raised {type(exc).__name__}: {exc}"
            if not holds:
                return "the output fails the postcondition"
        try:
            data = contract.codec.encode(output) if contract.codec is not None else output
            text = canonical_json(data)
        except Exception as exc:  # noqa: BLE001 - any encoding failure makes it unstorable
            return f"the output cannot be stored: {exc}"
        size = len(text.encode("utf-8"))
        if size > contract.max_output_bytes:
            return f"the output is {size} bytes, over the {contract.max_output_bytes}-byte limit"
        provider_operation_id = None
        if contract.provider_operation_id is not None:
            try:
                provider_operation_id = contract.provider_operation_id(output)
            except Exception as exc:  # noqa: BLE001 - the id is a convenience, not the outcome
                logger.warning("provider_operation_id of %r failed: %s", contract.name, exc)
        return _Stored(text, provider_operation_id)

    @staticmethod
    def _decode(contract: EffectContract, record: OperationRecord) -> Any:
        data = record.output
        if contract.codec is None or record.output_json is None:
            return data
        try:
            return contract.codec.decode(data)
        except Exception as exc:
            msg = (
                f"operation {record.operation_id!r}: the stored output cannot be decoded by "
                f"contract {contract.name!r}'s codec: {exc}"
            )
            raise ConfigurationError(msg) from exc

    def _result(
        self, call: _Call, record: OperationRecord, *, replayed: bool, reason: str | None = None
    ) -> EffectResult[Any]:
        confirmed = record.status is EffectStatus.CONFIRMED
        return EffectResult(
            status=record.status,
            operation_id=record.operation_id,
            output=self._decode(call.contract, record) if confirmed else None,
            provider_operation_id=record.provider_operation_id,
            attempts=record.attempts,
            replayed=replayed,
            evidence=record.evidence,
            reason=reason or record.reason,
        )

    def _lease(self, call: _Call, token: str) -> Lease:
        return Lease(token, _process.current_owner(), call.contract.lease_seconds)

    def _write(
        self,
        call: _Call,
        expect: Expect,
        changes: Changes,
        *events: EventDraft,
    ) -> _LedgerStep:
        return _LedgerStep(
            lambda: self.ledger.transition(
                call.operation_id, expect, changes, events, now=self._now()
            )
        )

    # -- the state machine -------------------------------------------------------------

    def _machine(self, call: _Call) -> _Machine:
        ledger = self.ledger
        deadline = time.monotonic() + call.wait_seconds
        # Replaying a terminal operation is a plain read: no write lock is taken.
        record: OperationRecord | None = yield _LedgerStep(
            lambda: ledger.get(call.operation_id, now=self._now())
        )
        while True:
            if record is None:
                token = secrets.token_hex(16)
                TOKENS.hold(token)
                try:
                    record, created = yield _LedgerStep(functools.partial(self._claim, call, token))
                except BaseException:
                    TOKENS.release(token)
                    raise
                if created:
                    return (yield from self._hold(call, record, token, dispatch=True))
                TOKENS.release(token)
                continue
            if record.fingerprint != call.fingerprint:
                raise OperationConflictError(
                    call.operation_id, record.fingerprint, call.fingerprint
                )
            if record.status.terminal:
                return self._result(call, record, replayed=True)
            if record.status is EffectStatus.QUARANTINED:
                return self._result(call, record, replayed=True)
            if record.lease_live and not self._abandoned(record.lease_token, record.lease_owner):
                remaining = deadline - time.monotonic()
                if remaining > 0:
                    yield _PauseStep(min(self.poll_interval, remaining))
                    record = yield _LedgerStep(
                        lambda: ledger.get(call.operation_id, now=self._now())
                    )
                    continue
                expires = record.lease_expires_at
                return self._result(
                    call,
                    record,
                    replayed=True,
                    reason=f"another worker holds it (lease until {expires:%H:%M:%S} UTC)",
                )
            token = secrets.token_hex(16)
            TOKENS.hold(token)
            try:
                taken = yield from self._take_over(call, record, token)
            except BaseException:
                TOKENS.release(token)
                raise
            if taken is None:
                TOKENS.release(token)
                record = yield _LedgerStep(lambda: ledger.get(call.operation_id, now=self._now()))
                continue
            return (
                yield from self._hold(
                    call, taken, token, dispatch=taken.status is EffectStatus.DISPATCHED
                )
            )

    def _claim(self, call: _Call, token: str) -> tuple[OperationRecord, bool]:
        operation = NewOperation(
            operation_id=call.operation_id,
            contract=call.contract.name,
            contract_version=call.contract.version,
            fingerprint=call.fingerprint,
            provider_key=call.provider_key,
            arguments=redact_arguments(call.arguments, call.contract.redact),
            attempt_budget=call.contract.max_attempts,
            lease=self._lease(call, token),
        )
        # PREPARED and DISPATCHED share one commit: it is durable before the handler runs.
        events = (
            EventDraft(EventType.PREPARED, None, EffectStatus.PREPARED, 0),
            EventDraft(EventType.DISPATCHED, EffectStatus.PREPARED, EffectStatus.DISPATCHED, 1),
        )
        return self.ledger.claim(operation, events, now=self._now())

    def _take_over(
        self, call: _Call, record: OperationRecord, token: str
    ) -> Generator[_Step, Any, OperationRecord | None]:
        """Take the lease of a record nobody is working on; None if another writer won."""
        status = record.status
        lease = self._lease(call, token)
        if status is EffectStatus.PREPARED:
            expect = Expect(
                statuses=frozenset({status}), lease_expired=True, event_count=record.event_count
            )
            attempt = record.attempts + 1
            changes = Changes(EffectStatus.DISPATCHED, lease=lease, attempts=attempt)
            event = EventDraft(EventType.DISPATCHED, status, EffectStatus.DISPATCHED, attempt)
            step = self._write(call, expect, changes, event)
        elif status in _HELD:
            abandoned = self._abandoned(record.lease_token, record.lease_owner)
            overlap = list(self._live_overlap(record))
            if status is EffectStatus.DISPATCHED and not abandoned and record.lease_owner:
                assert record.lease_token is not None  # noqa: S101 - a live owner has a token
                overlap.append(
                    OverlapHolder(record.lease_token, record.attempts, record.lease_owner)
                )
            evidence = {
                "previous_owner": record.lease_owner.to_json() if record.lease_owner else None,
                "owner_gone": abandoned,
                "overlap_risk": bool(overlap),
            }
            reason = (
                "the previous holder is gone"
                if abandoned
                else "the previous holder's lease expired"
            )
            expect = Expect(
                statuses=frozenset({status}),
                lease_token=record.lease_token,
                lease_expired=not abandoned,
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
            step = self._write(
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
            step = self._write(call, expect, changes, event)
        try:
            taken: OperationRecord = yield step
        except FencedWriteError:
            return None
        return taken

    def _hold(
        self, call: _Call, record: OperationRecord, token: str, *, dispatch: bool
    ) -> _Machine:
        """Work the operation while holding its lease: dispatch, settle, reconcile, retry."""
        renewal = KEEPER.start(
            self.ledger, call.operation_id, token, call.contract.lease_seconds, self._now
        )
        try:
            while True:
                if dispatch:
                    outcome: HandlerOutcome = yield _HandlerStep(token, record.attempts)
                    settled = yield from self._settle(call, record, token, outcome)
                    if isinstance(settled, EffectResult):
                        return settled
                    record = settled
                reconciled = yield from self._reconcile(call, record, token)
                if isinstance(reconciled, EffectResult):
                    return reconciled
                record, dispatch = reconciled, True
        finally:
            KEEPER.stop(renewal)
            TOKENS.release(token)

    def _settle(
        self, call: _Call, record: OperationRecord, token: str, outcome: HandlerOutcome
    ) -> Generator[_Step, Any, OperationRecord | EffectResult[Any]]:
        """Record a handler's outcome; a record back means reconcile it (RECONCILING, our lease)."""
        attempt = record.attempts
        fence = Expect(lease_token=token)
        dispatched = EffectStatus.DISPATCHED
        try:
            if outcome.kind is Outcome.RETURNED:
                stored = self._store(call.contract, outcome.value)
                if isinstance(stored, _Stored):
                    changes = Changes(
                        EffectStatus.CONFIRMED,
                        lease=None,
                        output_json=stored.json,
                        provider_operation_id=stored.provider_operation_id,
                        reason=None,
                    )
                    event = EventDraft(
                        EventType.CONFIRMED, dispatched, EffectStatus.CONFIRMED, attempt
                    )
                    confirmed = yield self._write(call, fence, changes, event)
                    return self._result(call, confirmed, replayed=False)
                reason = stored
            elif outcome.kind is Outcome.REJECTED:
                error = outcome.error
                assert isinstance(error, EffectRejected)  # noqa: S101 - by classification
                changes = Changes(
                    EffectStatus.REJECTED,
                    lease=None,
                    reason=error.reason,
                    evidence=error.evidence,
                )
                event = EventDraft(
                    EventType.REJECTED, dispatched, EffectStatus.REJECTED, attempt, error.evidence
                )
                rejected = yield self._write(call, fence, changes, event)
                return self._result(call, rejected, replayed=False)
            elif outcome.kind is Outcome.TIMED_OUT:
                reason = f"the handler passed its {call.contract.handler_timeout:g}s deadline"
                if outcome.still_running:
                    reason += " and may still be sending"
            else:
                reason = f"the handler {outcome.describe()}"
            overlap = list(self._live_overlap(record))
            if outcome.still_running:
                overlap.append(OverlapHolder(token, attempt, _process.current_owner()))
            evidence = {
                "handler": outcome.describe(),
                "reason": reason,
                "overlap_risk": bool(overlap),
            }
            unknown = EffectStatus.OUTCOME_UNKNOWN
            if outcome.kind is Outcome.INTERRUPTED:
                changes = Changes(
                    unknown, lease=None, overlap=tuple(overlap), reason=reason, evidence=evidence
                )
                event = EventDraft(
                    EventType.OUTCOME_UNKNOWN, dispatched, unknown, attempt, evidence
                )
                yield self._write(call, fence, changes, event)
                assert outcome.error is not None  # noqa: S101 - interruptions carry their exception
                raise outcome.error
            changes = Changes(
                EffectStatus.RECONCILING,
                lease=self._lease(call, token),
                overlap=tuple(overlap),
                reason=f"outcome unknown: {reason}",
                evidence=evidence,
            )
            # Unknown and reconciling share one commit; the probe runs under the same lease.
            reconciling: OperationRecord = yield self._write(
                call,
                fence,
                changes,
                EventDraft(EventType.OUTCOME_UNKNOWN, dispatched, unknown, attempt, evidence),
                EventDraft(EventType.RECONCILING, unknown, EffectStatus.RECONCILING, attempt),
            )
            return reconciling  # noqa: TRY300 - every branch above writes under the same fence
        except FencedWriteError:
            # Another worker took the operation over: what this handler did is evidence only.
            yield _LedgerStep(lambda: self._record_late(call, token, attempt, outcome))
            current = yield _LedgerStep(lambda: self.ledger.get(call.operation_id, now=self._now()))
            return self._result(call, current, replayed=False)

    def _reconcile(
        self, call: _Call, record: OperationRecord, token: str
    ) -> Generator[_Step, Any, OperationRecord | EffectResult[Any]]:
        """Apply the reconcile table; a record back means dispatch again (DISPATCHED, our lease)."""
        contract = call.contract
        probe: OutcomeProbeResult | None = None
        if contract.outcome_probe is not None:
            probe = yield _ProbeStep()
        stored: _Stored | str | None = None
        if probe is not None and probe.status is ProbeStatus.COMMITTED:
            stored = self._store(contract, probe.output)
        overlap = self._live_overlap(record)
        decision = decide(
            probe,
            confirmable=isinstance(stored, _Stored),
            guaranteed=self._guaranteed(contract, record),
            overlap_risk=bool(overlap),
            attempts_left=record.attempts < record.attempt_budget,
            policy=contract.unknown_outcome,
        )
        evidence: dict[str, Any] = {
            "probe": None if probe is None else probe.status.value,
            "probe_evidence": {} if probe is None else dict(probe.evidence),
            "overlap_risk": bool(overlap),
        }
        if isinstance(stored, str):
            evidence["unconfirmable"] = stored
        reconciling = EffectStatus.RECONCILING
        attempt = record.attempts
        fence = Expect(lease_token=token)
        if decision.verdict is Verdict.CONFIRM:
            assert isinstance(stored, _Stored)  # noqa: S101 - CONFIRM needs a storable output
            assert probe is not None  # noqa: S101
            changes = Changes(
                EffectStatus.CONFIRMED,
                lease=None,
                output_json=stored.json,
                provider_operation_id=probe.provider_operation_id or stored.provider_operation_id,
                reason=decision.reason,
                evidence=evidence,
                overlap=(),
            )
            event = EventDraft(
                EventType.CONFIRMED, reconciling, EffectStatus.CONFIRMED, attempt, evidence
            )
            step = self._write(call, fence, changes, event)
        elif decision.verdict is Verdict.RETRY:
            changes = Changes(
                EffectStatus.DISPATCHED,
                lease=self._lease(call, token),
                attempts=attempt + 1,
                reason=f"retrying with the same key: {decision.reason}",
                evidence=evidence,
                overlap=overlap,
            )
            step = self._write(
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
                if decision.verdict is Verdict.QUARANTINE
                else EffectStatus.OUTCOME_UNKNOWN
            )
            kind = (
                EventType.QUARANTINED
                if target is EffectStatus.QUARANTINED
                else EventType.OUTCOME_UNKNOWN
            )
            changes = Changes(
                target, lease=None, reason=decision.reason, evidence=evidence, overlap=overlap
            )
            step = self._write(
                call, fence, changes, EventDraft(kind, reconciling, target, attempt, evidence)
            )
        try:
            written: OperationRecord = yield step
        except FencedWriteError:
            current = yield _LedgerStep(lambda: self.ledger.get(call.operation_id, now=self._now()))
            return self._result(call, current, replayed=False)
        if decision.verdict is Verdict.RETRY:
            return written
        return self._result(call, written, replayed=False)

    # -- late results ------------------------------------------------------------------

    def _record_late(self, call: _Call, token: str, attempt: int, outcome: HandlerOutcome) -> None:
        """Record what a handler that lost its deadline or its lease finally did.

        A storable return that passes the postcondition confirms any operation
        not yet terminal: it is the effect's own acknowledgement. Anything else
        is evidence only, and clears the overlap risk that handler carried.
        """
        stored = (
            self._store(call.contract, outcome.value) if outcome.kind is Outcome.RETURNED else None
        )
        for _ in range(_LATE_WRITE_ATTEMPTS):
            record = self.ledger.get(call.operation_id, now=self._now())
            if record is None:
                return
            remaining = tuple(h for h in record.overlap if h.token != token)
            evidence: dict[str, Any] = {"attempt": attempt, "handler": outcome.describe()}
            if isinstance(stored, _Stored) and not record.status.terminal:
                changes = Changes(
                    EffectStatus.CONFIRMED,
                    lease=None,
                    output_json=stored.json,
                    provider_operation_id=stored.provider_operation_id,
                    reason=f"the handler of attempt {attempt} returned after its deadline",
                    evidence=evidence,
                    overlap=(),
                )
                target = EffectStatus.CONFIRMED
            else:
                if isinstance(stored, str):
                    evidence["unconfirmable"] = stored
                if isinstance(stored, _Stored) and record.status is EffectStatus.CONFIRMED:
                    evidence["matches_confirmed_output"] = stored.json == record.output_json
                changes = Changes(record.status, overlap=remaining)
                target = record.status
            event = EventDraft(EventType.LATE_RESULT, record.status, target, attempt, evidence)
            try:
                self.ledger.transition(
                    call.operation_id,
                    Expect(event_count=record.event_count),
                    changes,
                    [event],
                    now=self._now(),
                )
            except FencedWriteError:
                continue  # the operation moved on while we read it: read again
            return
        logger.warning("could not record the late result of %s", call.operation_id)


async def _await(value: Any) -> Any:
    return await value
