"""The executor's state machine, written once for the sync and async drivers.

:meth:`StateMachine.run` is a generator. It yields the I/O it needs — a ledger
call, the handler, the probe, a pause — as steps (:mod:`~effectguard.executor.steps`)
and receives their results, so every rule lives here exactly once while
:class:`~effectguard.executor.EffectExecutor` decides how each step is performed.

This module holds the machine's spine: the first read, replay, conflicts,
waiting for a peer, and working an operation under its lease. Each phase it
passes through has a module of its own, written as functions that take the
machine (so the rules stay in one machine, the drivers see one generator):
:mod:`~effectguard.executor.claiming` (claim, take-over),
:mod:`~effectguard.executor.settling` (a handler's outcome, with
:mod:`~effectguard.executor.not_sent` for an attempt that was not sent) and
:mod:`~effectguard.executor.reconciling` (probe, the reconcile table's ruling).
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any

from effectguard import process as _process
from effectguard.contract import EffectContract
from effectguard.errors import OperationConflictError, OutputNotStored
from effectguard.executor import claiming, reconciling, settling
from effectguard.executor.conflict import differences
from effectguard.executor.handler import HandlerOutcome, Outcome
from effectguard.executor.late import record_late
from effectguard.executor.lease import KEEPER, TOKENS, abandoned
from effectguard.executor.logs import listening
from effectguard.executor.observe import Transition, notify, watched
from effectguard.executor.outputs import decode, not_stored
from effectguard.executor.peers import PeerWait
from effectguard.executor.redaction import scrub_write
from effectguard.executor.replays import ReplayCache
from effectguard.executor.steps import Call, HandlerStep, LedgerStep, Machine, PauseStep, Step
from effectguard.ledger.asyncledger import async_ledger
from effectguard.ledger.protocol import (
    Changes,
    EffectLedger,
    EventDraft,
    Expect,
    Lease,
    claims_first,
)
from effectguard.model import EffectResult, EffectStatus, OperationRecord

__all__ = ["StateMachine"]

#: ``live=`` default of :meth:`StateMachine.result`: no output was produced by this call.
_NO_OUTPUT: Any = object()


class StateMachine:
    """The rules of DESIGN.md's executor, over one ledger and one clock."""

    def __init__(
        self,
        ledger: EffectLedger,
        clock: Callable[[], float] | None,
        poll_interval: float,
        replays: ReplayCache | None = None,
    ) -> None:
        self.ledger = ledger
        #: The async forms of the read, claim and transition, when the ledger has its own.
        self.async_ledger = async_ledger(ledger)
        self._clock = clock
        self.poll_interval = poll_interval
        self.replays = ReplayCache(0) if replays is None else replays

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
            observers = listening(call.observers, event.from_status, event.to_status)
            if not observers:
                continue
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
            notify(observers, transition)

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
        verified: bool = False,
    ) -> EffectResult[Any]:
        """The caller's view of ``record``; the output is decoded only when it is CONFIRMED.

        A replayed output is first checked against its confirmation's
        commitment, unless ``verified`` (the replay cache checked it when it
        kept it). A CONFIRMED operation whose output was not stored raises
        :class:`OutputNotStored` instead, with ``live`` (the output just
        produced) when there is one.
        """
        mark = not_stored(record)
        confirmed = record.status is EffectStatus.CONFIRMED
        result = EffectResult(
            status=record.status,
            operation_id=record.operation_id,
            output=decode(call.contract, record, self.ledger if replayed and not verified else None)
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
        changes, events = scrub_write(call.secrets, changes, events)

        def run() -> OperationRecord:
            record = self.ledger.transition(
                call.operation_id, expect, changes, events, now=self.now()
            )
            self.notify(call, events, record)
            return record

        writes = self.async_ledger if call.on_loop else None
        if writes is None:
            return LedgerStep(run)

        async def run_async() -> OperationRecord:
            record = await writes.transition_async(
                call.operation_id, expect, changes, events, now=self.now()
            )
            self.notify(call, events, record)
            return record

        return LedgerStep(run, run_async)

    def read(self, call: Call) -> LedgerStep:
        """A step that reads the operation's record (None when there is none)."""
        ledger, forms = self.ledger, self.async_ledger if call.on_loop else None
        return LedgerStep(
            lambda: ledger.get(call.operation_id, now=self.now()),
            None if forms is None else lambda: forms.get_async(call.operation_id, now=self.now()),
        )

    def backoff(self, seconds: float) -> PauseStep:
        """A wait between attempts or probes (see :class:`PauseStep`)."""
        return PauseStep(seconds, backoff=True)

    def run(self, call: Call) -> Machine:
        """Drive ``call`` from its first read to the result its caller receives.

        The call's observers hear of that result, fresh or replayed, also when
        it reaches the caller as :class:`OutputNotStored` (the effect happened);
        their call watchers watch it from before the first read to after the result.
        """
        contract = call.contract
        with watched(call.observers, contract, call.operation_id, call.arguments):
            try:
                result = yield from self.drive(call)
            except OutputNotStored as exc:
                _report(call, exc.result)
                raise
            _report(call, result)
            return result

    def drive(self, call: Call) -> Machine:
        """The rules of :meth:`run`, without reporting the result."""
        ledger = self.ledger
        waiting = PeerWait(call.wait_seconds, self._clock, self.poll_interval)
        # Replaying a terminal operation is a plain read: no write lock is taken. A ledger
        # that claims first reads by claiming; its claim writes nothing when the row exists.
        record: OperationRecord | None = None if claims_first(ledger) else (yield self.read(call))
        while True:
            if record is None:
                claimed = yield from self._claim_and_work(call)
                if isinstance(claimed, EffectResult):
                    return claimed
                record = claimed
                continue
            if record.fingerprint != call.fingerprint:
                raise _conflict(call, record)
            if record.status.terminal or record.status is EffectStatus.QUARANTINED:
                replayed = self.result(call, record, replayed=True)
                # Only once its output has passed the check; a QUARANTINED one is not kept.
                self.replays.remember(record)
                return replayed
            if record.lease_live and not abandoned(record.lease_token, record.lease_owner):
                pause = waiting.next_pause()
                if pause is not None:
                    yield PauseStep(pause)
                    record = yield self.read(call)
                    continue
                expires = record.lease_expires_at
                waited = f"; waited {call.wait_seconds:g}s for it" if call.wait_seconds else ""
                return self.result(
                    call,
                    record,
                    replayed=True,
                    reason=f"another worker holds it (lease until {expires:%H:%M:%S} UTC){waited}",
                )
            result = yield from self._take_over_and_work(call, record)
            if result is not None:
                return result
            record = yield self.read(call)

    def _claim_and_work(
        self, call: Call
    ) -> Generator[Step, Any, EffectResult[Any] | OperationRecord]:
        """Claim an operation no record was found for and work it; the record found if one won."""
        token = secrets.token_hex(16)
        TOKENS.hold(token)
        try:
            claimed: tuple[OperationRecord, bool] = yield claiming.claim_step(self, call, token)
            record, created = claimed
        except BaseException:
            TOKENS.release(token)
            raise
        if created:
            return (yield from self.work(call, record, token, dispatch=True))
        TOKENS.release(token)
        return record

    def _take_over_and_work(
        self, call: Call, record: OperationRecord
    ) -> Generator[Step, Any, EffectResult[Any] | None]:
        """Take over a record nobody is working on and work it; None if another writer won."""
        token = secrets.token_hex(16)
        TOKENS.hold(token)
        try:
            taken = yield from self.take_over(call, record, token)
        except BaseException:
            TOKENS.release(token)
            raise
        if taken is None:
            TOKENS.release(token)
            return None
        dispatch = taken.status is EffectStatus.DISPATCHED
        return (yield from self.work(call, taken, token, dispatch=dispatch))

    def claim(self, call: Call, token: str) -> tuple[OperationRecord, bool]:
        """Insert the operation as DISPATCHED under ``token``, or return the record found."""
        return claiming.claim(self, call, token)

    def take_over(
        self, call: Call, record: OperationRecord, token: str
    ) -> Generator[Step, Any, OperationRecord | None]:
        """Take the lease of a record nobody is working on; None if another writer won."""
        return claiming.take_over(self, call, record, token)

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
                    settled = yield from self.settle(call, record, token, outcome, unsent=unsent)
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
        """Record a handler's outcome (see :func:`~effectguard.executor.settling.settle`)."""
        return settling.settle(self, call, record, token, outcome, unsent=unsent)

    def reconcile(
        self, call: Call, record: OperationRecord, token: str
    ) -> Generator[Step, Any, tuple[OperationRecord, bool] | EffectResult[Any]]:
        """Apply the reconcile table (see :func:`~effectguard.executor.reconciling.reconcile`)."""
        return reconciling.reconcile(self, call, record, token)


def _report(call: Call, result: EffectResult[Any]) -> None:
    """Tell the call's observers of its ``result``."""
    observers = listening(call.observers, None, result.status, final=True, replayed=result.replayed)
    if observers:
        contract = call.contract
        notify(observers, Transition.of_result(contract.name, contract.version, result))


def _carrying(result: EffectResult[Any], error: BaseException | None) -> EffectResult[Any]:
    """``result`` carrying the handler's exception of this call (never stored)."""
    return result if error is None else dataclasses.replace(result, handler_error=error)


def _conflict(call: Call, record: OperationRecord) -> OperationConflictError:
    """The error for a call whose request differs from the one ``record`` was claimed for."""
    return OperationConflictError(
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
