"""The executor: records an operation before dispatch and settles its outcome.

The rules live once, in :class:`~effectguard.executor.machine.StateMachine`, a generator
that yields the I/O it needs (a ledger call, the handler, the probe, a pause).
Two thin drivers perform those steps: :meth:`EffectExecutor.execute` directly,
and :meth:`EffectExecutor.execute_async` with ledger I/O kept off the event loop;
both hand each step to :class:`~effectguard.executor.performing.StepPerformer`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from types import FunctionType
from typing import Any

from effectguard.contract import EffectContract, seconds_problem
from effectguard.errors import ConfigurationError, InvalidRequestError
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
from effectguard.executor.performing import StepPerformer
from effectguard.executor.redaction import secrets_of
from effectguard.executor.replays import DEFAULT_REPLAY_CACHE, ReplayCache, cached_replay
from effectguard.executor.steps import Call
from effectguard.fingerprint import check_json_value, request_fingerprint
from effectguard.ledger.protocol import EffectLedger
from effectguard.model import EffectResult

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

    ``replay_cache`` is how many CONFIRMED and REJECTED operations this
    executor keeps in memory to replay without reading the ledger (least
    recently replayed dropped first; 0 disables it). An operation enters it
    on its first replay, once its stored output has passed the integrity
    check; every call still has its request fingerprint checked, and one
    that differs reads the ledger and raises the conflict as always. See
    :mod:`effectguard.executor.replays` for why it never goes stale.
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
        replay_cache: int = DEFAULT_REPLAY_CACHE,
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
        self._states = StateMachine(ledger, clock, poll_interval, ReplayCache(replay_cache))
        self._performer = StepPerformer(self._states, advance if callable(advance) else None)
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

    def forget(self, operation_id: str) -> None:
        """Drop ``operation_id`` from the replay cache: its next replay reads the ledger.

        For whatever removes or rewrites a terminal operation (pruning); an
        operation not cached is a no-op.
        """
        self._states.replays.forget(operation_id)

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
        if _coroutine_function(handler):
            msg = "handler is a coroutine function; use execute_async"
            raise TypeError(msg)
        call = self._prepare(contract, arguments, handler, wait_for_peer, wait_seconds)
        if isinstance(call, EffectResult):
            return call
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
                value = self._performer.perform(call, step)
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

        Ledger I/O never runs on the event loop: a SQLite ledger's first read,
        claim and transitions go to its writer thread (which commits the writes
        with the others queued meanwhile), and every other ledger call runs in
        a worker thread.
        An async handler that passes its timeout is cancelled and awaited until
        it has stopped, so it leaves no overlap risk; a sync one runs in a
        thread and does.
        """
        call = self._prepare(
            contract, arguments, handler, wait_for_peer, wait_seconds, on_loop=True
        )
        if isinstance(call, EffectResult):
            return call
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
                value = await self._performer.perform_async(call, step)
            except BaseException as exc:  # noqa: BLE001 - handed to the machine, which re-raises
                value, error = None, exc

    def _prepare(
        self,
        contract: EffectContract,
        arguments: Mapping[str, Any],
        handler: Handler,
        wait_for_peer: float | None,
        wait_seconds: float | None = None,
        *,
        on_loop: bool = False,
    ) -> Call | EffectResult[Any]:
        """The checked call, or its replay when the replay cache holds its terminal result.

        The cache is consulted as soon as the request's fingerprint is known:
        a replay needs nothing the rest of a call is built of.
        """
        if not isinstance(contract, EffectContract):
            msg = f"contract must be an EffectContract, not {type(contract).__name__}"
            raise TypeError(msg)
        if not callable(handler):
            msg = f"handler must be callable, not {type(handler).__name__}"
            raise TypeError(msg)
        if type(arguments) is not dict and not isinstance(arguments, Mapping):
            msg = f"arguments must be a mapping of parameter names, not {type(arguments).__name__}"
            raise TypeError(msg)
        wait = _peer_wait(contract, self.wait_for_peer, wait_for_peer, wait_seconds)
        arguments = dict(arguments)
        # Before the contract's callables see them, and before anything is recorded: a
        # lone surrogate or a 100,000-deep value would otherwise fail half-way through.
        check_json_value(arguments)
        operation_id, key = contract.identity(arguments)
        fingerprint = request_fingerprint(
            contract.name, contract.version, arguments, key, contract.redact, checked=True
        )
        # Taken now: a late handler reports, from its own thread, to the observers of its call.
        observers = (log_transition, *self._observers, *context_observers())
        replayed = cached_replay(
            self._states.replays, contract, operation_id, fingerprint, observers
        )
        if replayed is not None:
            return replayed
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
            on_loop,
        )


def _coroutine_function(handler: object) -> bool:
    """``inspect.iscoroutinefunction(handler)``, read straight off a plain function's code."""
    if type(handler) is FunctionType:
        return bool(handler.__code__.co_flags & inspect.CO_COROUTINE)
    return inspect.iscoroutinefunction(handler)


def _peer_wait(
    contract: EffectContract,
    executor_wait: float | None,
    wait_for_peer: float | None,
    wait_seconds: float | None,
) -> float:
    """Seconds a call waits for a peer's live lease: the call's, the contract's, the executor's, 0.

    Raises ``TypeError`` when both names are given and :class:`InvalidRequestError` for a
    value that is not a bounded number of seconds.
    """
    if wait_for_peer is not None and wait_seconds is not None:
        msg = "pass wait_for_peer= or its older name wait_seconds=, not both"
        raise TypeError(msg)
    given = wait_for_peer if wait_seconds is None else wait_seconds
    problem = (
        None
        if given is None
        else seconds_problem(
            "wait_for_peer" if wait_seconds is None else "wait_seconds",
            given,
            zero_ok=True,
            optional=True,
        )
    )
    if problem is not None:
        msg = f"EffectExecutor.execute(): {problem}; nothing was recorded or sent"
        raise InvalidRequestError(msg)
    for wait in (given, contract.wait_for_peer, executor_wait):
        if wait is not None:
            return wait
    return 0.0


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
