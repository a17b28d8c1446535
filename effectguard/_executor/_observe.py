"""What an executor reports as it works: every transition and every result, redacted.

An :class:`Observer` sees each :class:`Transition` after its commit and each
call's final result; observers are called in order, an observer that raises is
logged and never changes the outcome. With no observer installed and logging
off for ``effectguard``, a call builds no ``Transition`` at all.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

from effectguard._contract import EffectContract
from effectguard._fingerprint import redact_arguments
from effectguard._model import EffectResult, EffectStatus, EventType

__all__ = [
    "SOURCES",
    "CallStart",
    "CallWatcher",
    "Observer",
    "Transition",
    "context_observers",
    "level",
    "listening",
    "log_transition",
    "logger",
    "notify",
    "observe_everywhere",
    "observing",
    "report_pause",
    "watched",
]


# ---- The observer hook: transitions and results, redacted ----

_observer_log = logging.getLogger("effectguard.observe")


@dataclass(frozen=True, slots=True)
class Transition:
    """One thing an observer learns: a committed transition, or the final result of a call.

    A transition has ``event`` set and ``result`` None; it is reported once its
    event is durable. A call's final result (fresh or replayed) has ``event``
    None, ``from_status`` None, ``to_status`` the result's status and
    ``result`` set. ``evidence`` and ``reason`` never hold a redacted value;
    ``result`` never carries the handler's exception (see
    :attr:`EffectResult.handler_error`), whose message might.
    """

    operation_id: str
    contract: str
    contract_version: int
    from_status: EffectStatus | None
    to_status: EffectStatus
    event: EventType | None
    attempt: int
    evidence: Mapping[str, Any]
    reason: str | None
    replayed: bool = False
    result: EffectResult[Any] | None = None
    #: On a final result: the qualified type name of the exception the handler raised
    #: in this call's last attempt (``module.Class``), if it raised; never its message.
    error_type: str | None = None

    @property
    def final(self) -> bool:
        """True for a call's final result, False for a transition."""
        return self.result is not None

    @classmethod
    def of_result(cls, contract: str, version: int, result: EffectResult[Any]) -> Transition:
        """The notice of a call's final ``result``, without its handler exception."""
        error_type = None
        if result.handler_error is not None:
            error_type = _qualified(type(result.handler_error))
            result = dataclasses.replace(result, handler_error=None)
        return cls(
            operation_id=result.operation_id,
            contract=contract,
            contract_version=version,
            from_status=None,
            to_status=result.status,
            event=None,
            attempt=result.attempts,
            evidence=result.evidence,
            reason=result.reason,
            replayed=result.replayed,
            result=result,
            error_type=error_type,
        )


def _qualified(kind: type) -> str:
    """``module.Qualname`` of an exception type; a builtin's bare name (``TimeoutError``)."""
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


@dataclass(frozen=True, slots=True)
class CallStart:
    """What a :class:`CallWatcher` learns as a call begins, before its first read.

    ``arguments`` are the call's arguments with every value named in the
    contract's ``redact=`` replaced by ``"[redacted]"``.
    """

    operation_id: str
    contract: str
    contract_version: int
    idempotency_guaranteed: bool
    arguments: Mapping[str, Any]


@runtime_checkable
class CallWatcher(Protocol):
    """An observer that is also handed each call as a whole (see the module's docstring)."""

    def __call__(self, transition: Transition) -> None:
        """Hear of one transition or result, like any observer."""

    def watch_call(self, start: CallStart) -> contextlib.AbstractContextManager[object]:
        """Return the context manager that spans the call ``start`` begins.

        What its ``__enter__`` returns, if it has a ``paused(seconds)``
        method, is told of each wait between attempts or probes.
        """


#: ``observer(transition)``; called in whichever thread made the transition, once it is
#: durable. For ``execute_async`` on a SQLite ledger that is the event loop's thread (the
#: ledger's writer thread committed it): an observer that blocks holds the loop up.
Observer = Callable[[Transition], None]


class _Sources:
    """Where a call's observers come from besides its executor.

    Read as attributes, so the executor collects them without a call into
    this module.
    """

    __slots__ = ("context", "everywhere")

    def __init__(self) -> None:
        #: This context's observers (:func:`observing`), outermost first.
        self.context: contextvars.ContextVar[tuple[Observer, ...]] = contextvars.ContextVar(
            "effectguard_observers", default=()
        )
        #: Observers of every call in the process (:func:`observe_everywhere`), oldest first.
        self.everywhere: tuple[Observer, ...] = ()


#: The observers of a call started now: ``everywhere`` (outermost), then ``context``.
SOURCES = _Sources()
_context = SOURCES.context


_everywhere_lock = threading.Lock()


#: What the watchers of the calls being run in this context returned on entering.
_watches: contextvars.ContextVar[tuple[object, ...]] = contextvars.ContextVar(
    "effectguard_watches", default=()
)


@contextlib.contextmanager
def observing(observer: Observer) -> Iterator[None]:
    """Report to ``observer`` every transition and result of effects called in this context.

    Whichever executor runs them: the default, one lent by a runtime, or a
    tool's own ``executor=``. Contexts nest: an observer registered outside
    keeps seeing everything while an inner one is registered. Threads started
    by ``asyncio.to_thread`` and tasks inherit the context; transitions that
    happen after the call returned (a late handler's return) still reach the
    observers that were registered when the call began.
    """
    if not callable(observer):
        msg = f"observing() needs a callable, not {type(observer).__name__}"
        raise TypeError(msg)
    token = _context.set((*_context.get(), observer))
    try:
        yield
    finally:
        _context.reset(token)


def observe_everywhere(observer: Observer) -> Callable[[], None]:
    """Report every transition and result of every call in this process to ``observer``.

    Whichever executor runs it, in whichever context, from calls that start
    from now on. Returns a function that withdraws ``observer`` again
    (calling it twice does nothing more).
    """
    if not callable(observer):
        msg = f"observe_everywhere() needs a callable, not {type(observer).__name__}"
        raise TypeError(msg)
    with _everywhere_lock:
        SOURCES.everywhere = (*SOURCES.everywhere, observer)

    def withdraw() -> None:
        with _everywhere_lock:
            SOURCES.everywhere = tuple(
                known for known in SOURCES.everywhere if known is not observer
            )

    return withdraw


def context_observers() -> tuple[Observer, ...]:
    """The observers of a call started now: the process's (outermost), then this context's."""
    everywhere = SOURCES.everywhere
    return (*everywhere, *_context.get()) if everywhere else _context.get()


class _Watching:
    """The watches of one call, entered together; one that fails is logged and left out."""

    __slots__ = ("_entered", "_token", "_watchers", "start")

    def __init__(self, watchers: list[CallWatcher], start: CallStart) -> None:
        self._watchers = watchers
        self.start = start
        self._entered: list[tuple[contextlib.AbstractContextManager[object], object]] = []
        self._token: contextvars.Token[tuple[object, ...]] | None = None

    def __enter__(self) -> None:
        for watcher in self._watchers:
            try:
                manager = watcher.watch_call(self.start)
                self._entered.append((manager, manager.__enter__()))
            except Exception:  # noqa: BLE001 - a watcher's bug must not turn into an effect's failure
                _observer_log.warning(
                    "observer %r failed watching %s",
                    watcher,
                    self.start.operation_id,
                    exc_info=True,
                )
        self._token = _watches.set((*_watches.get(), *(kept for _, kept in self._entered)))

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._token is not None:
            with contextlib.suppress(ValueError):  # exited in another context than entered
                _watches.reset(self._token)
        for manager, _ in reversed(self._entered):
            try:
                manager.__exit__(kind, error, trace)
            except Exception:  # noqa: BLE001 - ditto: the call's outcome is already decided
                _observer_log.warning(
                    "observer %r failed ending its watch of %s",
                    manager,
                    self.start.operation_id,
                    exc_info=True,
                )


def watched(
    observers: tuple[Observer, ...],
    contract: EffectContract,
    operation_id: str,
    arguments: Mapping[str, Any],
) -> contextlib.AbstractContextManager[None]:
    """The context in which a call runs while its :class:`CallWatcher` observers watch it.

    With no watcher among ``observers`` it is a no-op that builds nothing.
    """
    watchers = [o for o in observers if callable(getattr(o, "watch_call", None))]
    if not watchers:
        return contextlib.nullcontext()
    start = CallStart(
        operation_id=operation_id,
        contract=contract.name,
        contract_version=contract.version,
        idempotency_guaranteed=contract.provider_idempotency_guaranteed,
        arguments=redact_arguments(arguments, contract.redact),
    )
    return _Watching(watchers, start)  # type: ignore[arg-type]  # checked: each has watch_call


def report_pause(seconds: float) -> None:
    """Tell the watches of the calls running in this context of a wait of ``seconds``."""
    for watch in _watches.get():
        paused = getattr(watch, "paused", None)
        if callable(paused):
            try:
                paused(seconds)
            except Exception:  # noqa: BLE001 - a watcher's bug must not turn into an effect's failure
                _observer_log.warning("observer %r failed on a pause", watch, exc_info=True)


def notify(observers: tuple[Observer, ...], transition: Transition) -> None:
    """Hand ``transition`` to each observer; one that raises is logged and skipped.

    Observing an effect never changes its outcome: the transition is already durable.
    """
    for observer in observers:
        try:
            observer(transition)
        except Exception:  # noqa: BLE001 - an observer's bug must not turn into an effect's failure
            _observer_log.warning(
                "observer %r failed on %s of %s",
                observer,
                transition.event or "the result",
                transition.operation_id,
                exc_info=True,
                extra={
                    "operation_id": transition.operation_id,
                    "contract": transition.contract,
                    "status": transition.to_status.value,
                },
            )


# ---- The library's log lines, written from the observer hook ----

logger = logging.getLogger("effectguard.executor")


#: Where a call's outcome waits for someone: a warning, once, when it gets there.
_NEEDS_SOMEONE = frozenset({EffectStatus.QUARANTINED})


_SETTLED = frozenset({EffectStatus.CONFIRMED, EffectStatus.REJECTED})


def level(
    from_status: EffectStatus | None, to_status: EffectStatus, *, final: bool, replayed: bool
) -> int:
    """The level :func:`log_transition` logs such a transition at.

    WARNING only where a person is needed: a transition to QUARANTINED. An
    outcome that becomes unknown is INFO, whether the probe then finds it (the
    happy path of a lost acknowledgement warns nobody) or a later resume or
    recovery sweep will. INFO for a request recorded to wait for its approval,
    a confirmation, a rejection and a replay; DEBUG for the rest.
    """
    if final:
        return logging.INFO if replayed else logging.DEBUG
    if from_status is to_status:
        return logging.DEBUG  # evidence only (a late result): nothing became anything
    if to_status in _NEEDS_SOMEONE:
        return logging.WARNING
    if to_status in (EffectStatus.OUTCOME_UNKNOWN, EffectStatus.AWAITING_APPROVAL):
        return logging.INFO  # a request waiting for its approval is the policy, not a failure
    if to_status in _SETTLED:
        return logging.INFO
    return logging.DEBUG


def listening(
    observers: tuple[Observer, ...],
    from_status: EffectStatus | None,
    to_status: EffectStatus,
    *,
    final: bool = False,
    replayed: bool = False,
) -> tuple[Observer, ...]:
    """``observers`` without a leading :func:`log_transition` that would log nothing for this.

    A notice nobody reads is not built: most calls are observed by the log
    alone, with DEBUG off.
    """
    if not observers or observers[0] is not log_transition:
        return observers
    if logger.isEnabledFor(level(from_status, to_status, final=final, replayed=replayed)):
        return observers
    return observers[1:]


def log_transition(transition: Transition) -> None:
    """Log ``transition`` at the level its kind calls for (see the module's docstring)."""
    at = level(
        transition.from_status,
        transition.to_status,
        final=transition.final,
        replayed=transition.replayed,
    )
    if not logger.isEnabledFor(at):
        return
    extra = {
        "operation_id": transition.operation_id,
        "contract": transition.contract,
        "status": transition.to_status.value,
    }
    reason = f": {transition.reason}" if transition.reason else ""
    if transition.final:
        kind = "replayed" if transition.replayed else "result"
        logger.log(
            at,
            "%s %s %s (attempt %d)%s",
            transition.operation_id,
            kind,
            transition.to_status.value,
            transition.attempt,
            reason,
            extra=extra,
        )
        return
    source = transition.from_status.value if transition.from_status else "new"
    logger.log(
        at,
        "%s %s: %s -> %s (attempt %d)%s",
        transition.operation_id,
        transition.event,
        source,
        transition.to_status.value,
        transition.attempt,
        reason if at >= logging.INFO else "",
        extra=extra,
    )
