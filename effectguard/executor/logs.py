"""The executor's log lines, written by an observer like any other.

Logger ``effectguard.executor``; every record carries ``operation_id``,
``contract`` and ``status`` as attributes (``extra=``), so a structured
handler can index them. WARNING when an outcome becomes unknown or
quarantined; INFO when it becomes confirmed or rejected, and for every
replayed result; DEBUG for every other transition and fresh result. The
library installs no handler: what is shown, and where, is the application's choice.
"""

from __future__ import annotations

import logging

from effectguard.executor.observe import Observer, Transition
from effectguard.model import EffectStatus

__all__ = ["level", "listening", "log_transition", "logger"]

logger = logging.getLogger("effectguard.executor")

_DOUBT = frozenset({EffectStatus.OUTCOME_UNKNOWN, EffectStatus.QUARANTINED})
_SETTLED = frozenset({EffectStatus.CONFIRMED, EffectStatus.REJECTED})


def level(
    from_status: EffectStatus | None, to_status: EffectStatus, *, final: bool, replayed: bool
) -> int:
    """The level :func:`log_transition` logs such a transition at (the module's docstring)."""
    if final:
        return logging.INFO if replayed else logging.DEBUG
    if from_status is to_status:
        return logging.DEBUG  # evidence only (a late result): nothing became anything
    if to_status in _DOUBT:
        return logging.WARNING
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
