"""Performing the machine's steps: ledger calls, handlers and probes under deadlines, pauses.

:class:`StepPerformer` is what :class:`~effectguard.executor.driver.EffectExecutor`'s
two drivers hand each step to. The sync and async paths differ only here, in
how a step runs (a thread, a worker thread, the event loop); what a step's
result means stays in the state machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from effectguard.errors import EffectNotSent, InternalError
from effectguard.executor import handler as _handler
from effectguard.executor.handler import HandlerOutcome, Outcome
from effectguard.executor.lease import TOKENS
from effectguard.executor.machine import StateMachine
from effectguard.executor.observe import report_pause
from effectguard.executor.steps import Call, HandlerStep, LedgerStep, PauseStep, ProbeStep, Step
from effectguard.model import OutcomeProbeResult

__all__ = ["StepPerformer"]


class StepPerformer:
    """Performs one step of a call and returns what the state machine is sent back.

    A handler that passes its deadline keeps its lease token active until it
    ends; its late return is recorded through ``states`` and only then is the
    token released. A backoff pause advances ``advance`` (an injected manual
    clock) instead of sleeping when one is given.
    """

    def __init__(self, states: StateMachine, advance: Callable[[float], None] | None) -> None:
        self._states = states
        self._advance = advance

    def perform(self, call: Call, step: Step) -> Any:
        """Perform ``step`` in this thread (a handler with a deadline in a thread of its own)."""
        if isinstance(step, LedgerStep):
            return step.run()
        if isinstance(step, HandlerStep):
            return self._call_handler(call, step)
        if isinstance(step, ProbeStep):
            return self._call_probe(call)
        if not self._advanced(step):
            time.sleep(step.seconds)
        return None

    async def perform_async(self, call: Call, step: Step) -> Any:
        """Perform ``step`` without blocking the event loop: ledger I/O runs in other threads."""
        if isinstance(step, LedgerStep):
            if step.run_async is not None:
                return await step.run_async()
            return await asyncio.to_thread(step.run)
        if isinstance(step, HandlerStep):
            return await self._call_handler_async(call, step)
        if isinstance(step, ProbeStep):
            probe = call.contract.outcome_probe
            if inspect.iscoroutinefunction(probe):
                outcome = await _handler.call_async(
                    lambda: probe(call.arguments, idempotency_key=call.provider_key),
                    call.contract.handler_timeout,
                )
                return _probe_outcome(outcome)
            return await asyncio.to_thread(self._call_probe, call)
        if not self._advanced(step):
            await asyncio.sleep(step.seconds)
        return None

    def _advanced(self, step: PauseStep) -> bool:
        """Advance an injected manual clock by a backoff wait instead of sleeping it."""
        if step.backoff:
            report_pause(step.seconds)  # to the call's watchers (telemetry), if any
        if step.backoff and self._advance is not None:
            self._advance(step.seconds)
            return True
        return False

    def _call_handler(self, call: Call, step: HandlerStep) -> HandlerOutcome:
        def invoke() -> Any:
            with _not_sent_on(call):
                return call.handler(call.arguments, idempotency_key=call.provider_key)

        timeout = call.contract.handler_timeout
        if timeout is None:
            return _handler.classify(invoke)
        TOKENS.hold(step.token)  # the handler's thread keeps the token active until it ends
        outcome = _handler.call_in_thread(
            invoke,
            timeout,
            functools.partial(self._record_late_and_release, call, step),
            name=f"effectguard-handler-{call.operation_id}",
        )
        if not outcome.still_running:
            TOKENS.release(step.token)
        return outcome

    async def _call_handler_async(self, call: Call, step: HandlerStep) -> HandlerOutcome:
        # The token stays active for as long as the handler may run, which can outlast
        # this call (a deadline, a cancelled caller): only then is the lease provably idle.
        TOKENS.hold(step.token)
        late = functools.partial(self._record_late_and_release, call, step)
        if inspect.iscoroutinefunction(call.handler):
            outcome = await _handler.call_async(
                lambda: _await_not_sent_on(call),
                call.contract.handler_timeout,
                lambda ended: _in_thread(late, ended),
            )
        else:

            def invoke() -> Any:
                with _not_sent_on(call):
                    return call.handler(call.arguments, idempotency_key=call.provider_key)

            outcome = await _handler.call_thread_async(
                invoke,
                call.contract.handler_timeout,
                late,
                name=f"effectguard-handler-{call.operation_id}",
            )
        if not outcome.still_running:
            TOKENS.release(step.token)
        return outcome

    def _record_late_and_release(
        self, call: Call, step: HandlerStep, outcome: HandlerOutcome
    ) -> None:
        try:
            self._states.record_late(call, step.token, step.attempt, outcome)
        finally:
            TOKENS.release(step.token)

    def _call_probe(self, call: Call) -> OutcomeProbeResult:
        probe = call.contract.outcome_probe
        if probe is None:
            msg = f"a probe step for {call.operation_id!r}, whose contract has no probe"
            raise InternalError(msg)

        def invoke() -> Any:
            value = probe(call.arguments, idempotency_key=call.provider_key)
            if inspect.isawaitable(value):
                return asyncio.run(_await(value))
            return value

        timeout = call.contract.handler_timeout
        if timeout is None:
            return _probe_outcome(_handler.classify(invoke))
        outcome = _handler.call_in_thread(
            invoke, timeout, lambda _: None, name=f"effectguard-probe-{call.operation_id}"
        )
        return _probe_outcome(outcome)


def _probe_outcome(outcome: HandlerOutcome) -> OutcomeProbeResult:
    if outcome.kind is Outcome.RETURNED:
        return _handler.probe_result(outcome.value)
    if outcome.kind is Outcome.INTERRUPTED and outcome.error is not None:
        raise outcome.error
    return OutcomeProbeResult.unknown({"probe_error": outcome.describe()})


async def _await(value: Any) -> Any:
    return await value


@contextlib.contextmanager
def _not_sent_on(call: Call) -> Iterator[None]:
    """Turn an exception the contract names in ``not_sent_on`` into :class:`EffectNotSent`."""
    kinds = call.contract.not_sent_on
    try:
        yield
    except kinds as exc:
        reason = f"the request was not sent ({type(exc).__name__}: {exc})"
        raise EffectNotSent(reason, evidence={"error": type(exc).__name__}) from exc


async def _await_not_sent_on(call: Call) -> Any:
    with _not_sent_on(call):
        return await call.handler(call.arguments, idempotency_key=call.provider_key)


def _in_thread(work: Callable[[HandlerOutcome], None], outcome: HandlerOutcome) -> None:
    """Run ``work(outcome)`` in a daemon thread: ledger I/O never blocks the event loop."""
    threading.Thread(
        target=work, args=(outcome,), name="effectguard-late-result", daemon=True
    ).start()
