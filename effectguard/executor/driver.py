"""The executor: records an operation before dispatch and settles its outcome.

The rules live once, in :class:`~effectguard.executor.machine.StateMachine`, a generator
that yields the I/O it needs (a ledger call, the handler, the probe, a pause).
Two thin drivers perform those steps: :meth:`EffectExecutor.execute` directly,
and :meth:`EffectExecutor.execute_async` with ledger I/O kept off the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from effectguard.contract import EffectContract, seconds_problem
from effectguard.errors import (
    ConfigurationError,
    EffectNotSent,
    InternalError,
    InvalidRequestError,
)
from effectguard.executor import handler as _handler
from effectguard.executor.handler import HandlerOutcome, Outcome
from effectguard.executor.lease import TOKENS
from effectguard.executor.logs import log_transition
from effectguard.executor.machine import StateMachine
from effectguard.executor.observe import Observer, context_observers
from effectguard.executor.pacing import (
    DEFAULT_DEADLINE,
    DEFAULT_RETRY_WAIT_INITIAL,
    DEFAULT_RETRY_WAIT_MAX,
    Jitter,
    Pacing,
    full_jitter,
)
from effectguard.executor.redaction import secrets_of
from effectguard.executor.steps import Call, HandlerStep, LedgerStep, PauseStep, ProbeStep, Step
from effectguard.fingerprint import check_json_value, request_fingerprint
from effectguard.ledger.protocol import EffectLedger
from effectguard.model import EffectResult, OutcomeProbeResult

__all__ = ["EffectExecutor", "Handler"]

#: ``handler(arguments, *, idempotency_key=...)``; the executor calls it at most once per attempt.
Handler = Callable[..., Any]


class EffectExecutor:
    """Runs side effects so that each business operation takes effect at most once.

    Before a handler runs, the operation is claimed in one durable commit. A
    confirmed or rejected operation is replayed, never dispatched again. An
    uncertain outcome is reconciled with the contract's probe and retried only
    when the probe's authoritative NOT_COMMITTED, or the provider's documented
    idempotency, makes a resend safe; otherwise it is quarantined (or kept
    unknown) for later evidence or an operator.

    ``clock`` (epoch seconds) replaces the ledger's clock for leases and the
    executor's for key retention, so tests need not sleep. ``observers`` are
    told of every transition and every result of the calls this executor
    runs (see :mod:`effectguard.executor.observe`), after the executor's own
    log lines and before the observers of the call's context. ``wait_for_peer``
    is how long a call waits for another worker dispatching the same
    operation when neither the call nor its contract says (None: not at all
    for :meth:`execute`; decorated tools then use their own default).

    When it has an ``advance(seconds)`` method
    (:class:`~effectguard.testkit.ManualClock`), the waits between attempts
    advance it instead of sleeping. ``retry_wait_initial``, ``retry_wait_max``
    and ``deadline`` (seconds) are the defaults for contracts that leave them
    unset: automatic retries and re-probes wait
    ``jitter(min(retry_wait_max, retry_wait_initial * 2**n))`` before the
    call's n-th wait, and a call stops waiting once the next wait would end
    past its ``deadline``. ``jitter(ceiling)`` returns a wait in
    ``[0, ceiling]``, uniformly random by default; inject it for
    deterministic tests.
    """

    def __init__(
        self,
        ledger: EffectLedger,
        *,
        clock: Callable[[], float] | None = None,
        poll_interval: float = 0.05,
        observers: Iterable[Observer] = (),
        wait_for_peer: float | None = None,
        retry_wait_initial: float = DEFAULT_RETRY_WAIT_INITIAL,
        retry_wait_max: float = DEFAULT_RETRY_WAIT_MAX,
        deadline: float = DEFAULT_DEADLINE,
        jitter: Jitter = full_jitter,
    ) -> None:
        self.ledger = ledger
        _check_options(
            wait_for_peer=wait_for_peer,
            poll_interval=poll_interval,
            retry_wait_initial=retry_wait_initial,
            retry_wait_max=retry_wait_max,
            deadline=deadline,
        )
        self.wait_for_peer = wait_for_peer
        self.pacing = Pacing(retry_wait_initial, retry_wait_max, deadline, jitter)
        self._check_pacing()
        self._clock = clock
        advance = getattr(clock, "advance", None)
        self._advance: Callable[[float], None] | None = advance if callable(advance) else None
        self._states = StateMachine(ledger, clock, poll_interval)
        self._observers: tuple[Observer, ...] = ()
        for observer in observers:
            self.add_observer(observer)

    def add_observer(self, observer: Observer) -> None:
        """Tell ``observer`` of every transition and result of the calls that start from now on."""
        if not callable(observer):
            msg = f"an observer must be callable, not {type(observer).__name__}"
            raise TypeError(msg)
        self._observers = (*self._observers, observer)

    def remove_observer(self, observer: Observer) -> None:
        """Stop telling ``observer`` about calls that start from now on (unknown ones: no-op)."""
        self._observers = tuple(known for known in self._observers if known != observer)

    def _check_pacing(self) -> None:
        pacing = self.pacing
        if not (0 <= pacing.retry_wait_initial <= pacing.retry_wait_max):
            msg = (
                "retry_wait_initial and retry_wait_max must satisfy 0 <= initial <= max, "
                f"not {pacing.retry_wait_initial!r} and {pacing.retry_wait_max!r}"
            )
            raise ConfigurationError(msg)
        if not callable(pacing.jitter):
            msg = f"jitter must be callable, not {type(pacing.jitter).__name__}"
            raise TypeError(msg)

    @property
    def poll_interval(self) -> float:
        """Seconds before the first re-read while waiting for a peer; later waits back off."""
        return self._states.poll_interval

    def __repr__(self) -> str:
        return f"EffectExecutor({self.ledger!r})"

    # -- public drivers --------------------------------------------------------------

    def execute(
        self,
        contract: EffectContract,
        arguments: Mapping[str, Any],
        handler: Handler,
        *,
        wait_for_peer: float | None = None,
        wait_seconds: float | None = None,
    ) -> EffectResult[Any]:
        """Run ``handler`` for ``arguments`` under ``contract``, at most once per operation.

        Returns the result, fresh or replayed; it raises only for a conflicting
        request (:class:`OperationConflictError`), arguments that are not JSON
        (``TypeError``), an invalid contract (:class:`ConfigurationError`) or a
        ledger failure (:class:`LedgerUnavailableError`), in which case nothing
        is ever dispatched again on the strength of the missing record.
        A call that finds another worker dispatching the operation (a live
        lease) waits up to ``wait_for_peer`` seconds for its outcome, polling
        with backoff, and replays it; after that it returns the DISPATCHED
        result ("another worker is handling it"). The wait is the first of
        ``wait_for_peer``, the contract's, the executor's that is set, else 0.
        ``wait_seconds`` is the earlier name of ``wait_for_peer``.
        """
        if inspect.iscoroutinefunction(handler):
            msg = "handler is a coroutine function; use execute_async"
            raise TypeError(msg)
        call = self._prepare(contract, arguments, handler, wait_for_peer, wait_seconds)
        machine = self._states.run(call)
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
        wait_for_peer: float | None = None,
        wait_seconds: float | None = None,
    ) -> EffectResult[Any]:
        """Like :meth:`execute`, for async or sync handlers and probes.

        Ledger I/O runs in worker threads, never on the event loop. An async
        handler that passes its timeout is cancelled and awaited until it has
        stopped, so it leaves no overlap risk; a sync one runs in a thread and does.
        """
        call = self._prepare(contract, arguments, handler, wait_for_peer, wait_seconds)
        machine = self._states.run(call)
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

    # -- step performers -------------------------------------------------------------

    def _perform(self, call: Call, step: Step) -> Any:
        if isinstance(step, LedgerStep):
            return step.run()
        if isinstance(step, HandlerStep):
            return self._call_handler(call, step)
        if isinstance(step, ProbeStep):
            return self._call_probe(call)
        if not self._advanced(step):
            time.sleep(step.seconds)
        return None

    def _advanced(self, step: PauseStep) -> bool:
        """Advance an injected manual clock by a backoff wait instead of sleeping it."""
        if step.backoff and self._advance is not None:
            self._advance(step.seconds)
            return True
        return False

    async def _perform_async(self, call: Call, step: Step) -> Any:
        if isinstance(step, LedgerStep):
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
                return self._probe_outcome(outcome)
            return await asyncio.to_thread(self._call_probe, call)
        if not self._advanced(step):
            await asyncio.sleep(step.seconds)
        return None

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

    def _prepare(
        self,
        contract: EffectContract,
        arguments: Mapping[str, Any],
        handler: Handler,
        wait_for_peer: float | None,
        wait_seconds: float | None = None,
    ) -> Call:
        if not isinstance(contract, EffectContract):
            msg = f"contract must be an EffectContract, not {type(contract).__name__}"
            raise TypeError(msg)
        if not callable(handler):
            msg = f"handler must be callable, not {type(handler).__name__}"
            raise TypeError(msg)
        if not isinstance(arguments, Mapping):
            msg = f"arguments must be a mapping of parameter names, not {type(arguments).__name__}"
            raise TypeError(msg)
        if wait_for_peer is not None and wait_seconds is not None:
            msg = "pass wait_for_peer= or its older name wait_seconds=, not both"
            raise TypeError(msg)
        given = wait_for_peer if wait_seconds is None else wait_seconds
        problem = seconds_problem(
            "wait_for_peer" if wait_seconds is None else "wait_seconds",
            given,
            zero_ok=True,
            optional=True,
        )
        if problem is not None:
            msg = f"EffectExecutor.execute(): {problem}; nothing was recorded or sent"
            raise InvalidRequestError(msg)
        wait = next(
            (w for w in (given, contract.wait_for_peer, self.wait_for_peer) if w is not None), 0.0
        )
        arguments = dict(arguments)
        # Before the contract's callables see them, and before anything is recorded: a
        # lone surrogate or a 100,000-deep value would otherwise fail half-way through.
        check_json_value(arguments)
        operation_id, key = contract.identity(arguments)
        fingerprint = request_fingerprint(
            contract.name, contract.version, arguments, key, contract.redact
        )
        # Taken now: a late handler reports, from its own thread, to the observers of its call.
        observers = (log_transition, *self._observers, *context_observers())
        return Call(
            contract,
            arguments,
            handler,
            operation_id,
            key,
            fingerprint,
            wait,
            self.pacing.start(contract, self._clock),
            secrets_of(arguments, contract.redact),
            observers,
        )


def _check_options(**seconds: float | None) -> None:
    """Refuse :class:`EffectExecutor` options that are not a bounded number of seconds.

    Raises :class:`ConfigurationError` naming each one; ``inf`` and ``'1'`` would
    otherwise pass here and fail (``OverflowError``, ``TypeError``) mid-call.
    """
    problems = [
        problem
        for name, value in seconds.items()
        if (
            problem := seconds_problem(
                name, value, zero_ok=name != "poll_interval", optional=name == "wait_for_peer"
            )
        )
        is not None
    ]
    if problems:
        msg = "EffectExecutor(): " + "; ".join(problems)
        raise ConfigurationError(msg)


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
