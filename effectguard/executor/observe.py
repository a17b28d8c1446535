"""Observers: one hook that sees every transition of an operation and every call's result.

Logging, the agent runtime and any telemetry a user adds all watch effects
through this hook. An observer is a callable taking a :class:`Transition`; it
is registered on an executor (``EffectExecutor(observers=...)``,
:meth:`~effectguard.EffectExecutor.add_observer`) or for a context with
:func:`observing`, which reaches every executor a call in that context uses,
including a tool's own ``executor=``.

Nothing an observer receives holds a value named in the contract's
``redact=``: no arguments at all, and evidence and reasons scrubbed of
redacted values before they are even stored.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from effectguard.model import EffectResult, EffectStatus, EventType

__all__ = ["Observer", "Transition", "context_observers", "notify", "observing"]

logger = logging.getLogger("effectguard.observe")


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

    @property
    def final(self) -> bool:
        """True for a call's final result, False for a transition."""
        return self.result is not None

    @classmethod
    def of_result(cls, contract: str, version: int, result: EffectResult[Any]) -> Transition:
        """The notice of a call's final ``result``, without its handler exception."""
        if result.handler_error is not None:
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
        )


#: ``observer(transition)``; called in whichever thread made the transition.
Observer = Callable[[Transition], None]

_context: contextvars.ContextVar[tuple[Observer, ...]] = contextvars.ContextVar(
    "effectguard_observers", default=()
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


def context_observers() -> tuple[Observer, ...]:
    """The observers registered for the current context, outermost first."""
    return _context.get()


def notify(observers: tuple[Observer, ...], transition: Transition) -> None:
    """Hand ``transition`` to each observer; one that raises is logged and skipped.

    Observing an effect never changes its outcome: the transition is already durable.
    """
    for observer in observers:
        try:
            observer(transition)
        except Exception:  # an observer's bug must not turn into an effect's failure
            logger.warning(
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
