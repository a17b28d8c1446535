"""The executor: an operation recorded before dispatch, and its outcome settled.

The state machine (:mod:`._machine`), handler calls under deadlines
(:mod:`._calls`), leases (:mod:`._leases`), stored outputs and replays (:mod:`._outputs`),
observers (:mod:`._observe`) and keeping redacted values out of what is written
(:mod:`._redaction`).
"""

from __future__ import annotations

from effectguard._executor._machine import EffectExecutor
from effectguard._executor._observe import (
    CallStart,
    CallWatcher,
    Observer,
    Transition,
    observe_everywhere,
    observing,
)

__all__ = [
    "CallStart",
    "CallWatcher",
    "EffectExecutor",
    "Observer",
    "Transition",
    "observe_everywhere",
    "observing",
]
