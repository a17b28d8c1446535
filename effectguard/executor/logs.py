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

from effectguard.executor.observe import Transition
from effectguard.model import EffectStatus

__all__ = ["log_transition", "logger", "replays_logged"]

logger = logging.getLogger("effectguard.executor")

_DOUBT = frozenset({EffectStatus.OUTCOME_UNKNOWN, EffectStatus.QUARANTINED})
_SETTLED = frozenset({EffectStatus.CONFIRMED, EffectStatus.REJECTED})


def replays_logged() -> bool:
    """Whether :func:`log_transition` would write a line for a replayed result now."""
    return logger.isEnabledFor(logging.INFO)


def _level(transition: Transition) -> int:
    if transition.final:
        return logging.INFO if transition.replayed else logging.DEBUG
    if transition.from_status is transition.to_status:
        return logging.DEBUG  # evidence only (a late result): nothing became anything
    if transition.to_status in _DOUBT:
        return logging.WARNING
    if transition.to_status in _SETTLED:
        return logging.INFO
    return logging.DEBUG


def log_transition(transition: Transition) -> None:
    """Log ``transition`` at the level its kind calls for (see the module's docstring)."""
    level = _level(transition)
    if not logger.isEnabledFor(level):
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
            level,
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
        level,
        "%s %s: %s -> %s (attempt %d)%s",
        transition.operation_id,
        transition.event,
        source,
        transition.to_status.value,
        transition.attempt,
        reason if level >= logging.INFO else "",
        extra=extra,
    )
