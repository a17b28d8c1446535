"""Waiting between attempts: exponential backoff with full jitter, bounded by a call's deadline.

One :class:`Pace` per call. Every automatic retry and every re-probe of a
PENDING outcome waits ``jitter(min(retry_wait_max, retry_wait_initial * 2**n))``
for the call's n-th wait, and only when that wait still ends within the
call's ``deadline``; otherwise the call stops waiting and returns what the
ledger holds.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from effectguard.contract import EffectContract

__all__ = [
    "DEFAULT_DEADLINE",
    "DEFAULT_RETRY_WAIT_INITIAL",
    "DEFAULT_RETRY_WAIT_MAX",
    "Jitter",
    "Pace",
    "Pacing",
    "full_jitter",
    "seeded_jitter",
]

#: Seconds before the first automatic retry or re-probe, at most (full jitter).
DEFAULT_RETRY_WAIT_INITIAL = 0.1
#: The longest single wait, in seconds.
DEFAULT_RETRY_WAIT_MAX = 5.0
#: How long one call keeps waiting for a retry or a re-probe, in seconds: an agent's
#: tool call stays bounded even when a provider answers "still processing" forever.
DEFAULT_DEADLINE = 5.0

#: ``jitter(ceiling)`` returns the wait, in ``[0, ceiling]``.
Jitter = Callable[[float], float]

_random = random.Random()  # spreading retries needs no cryptographic randomness


def full_jitter(ceiling: float) -> float:
    """A uniformly random wait in ``[0, ceiling]`` (AWS's "full jitter")."""
    return _random.uniform(0.0, ceiling)


def seeded_jitter(seed: int | str) -> Jitter:
    """Full jitter drawn from its own generator seeded with ``seed``: the same waits every run."""
    rng = random.Random(seed)

    def jitter(ceiling: float) -> float:
        return rng.uniform(0.0, ceiling)

    return jitter


@dataclass(frozen=True, slots=True)
class Pacing:
    """The executor's defaults for the contracts that leave a value unset."""

    retry_wait_initial: float = DEFAULT_RETRY_WAIT_INITIAL
    retry_wait_max: float = DEFAULT_RETRY_WAIT_MAX
    deadline: float = DEFAULT_DEADLINE
    jitter: Jitter = full_jitter

    def start(self, contract: EffectContract, clock: Callable[[], float] | None) -> Pace:
        """Begin the waits of one call under ``contract``; its values override these."""
        initial = _pick(contract.retry_wait_initial, self.retry_wait_initial)
        return Pace(
            initial=initial,
            maximum=max(initial, _pick(contract.retry_wait_max, self.retry_wait_max)),
            deadline=_pick(contract.deadline, self.deadline),
            jitter=self.jitter,
            clock=clock,
        )


def _pick(value: float | None, default: float) -> float:
    return default if value is None else value


class Pace:
    """The waits of one call: how long the next one is, and whether it fits the deadline.

    Elapsed time is the larger of the injected clock's progress (which a
    :class:`~effectguard.testkit.ManualClock` makes when the executor advances
    it instead of sleeping) and real time, so a clock that never moves cannot
    keep a call waiting past its deadline.
    """

    def __init__(
        self,
        *,
        initial: float,
        maximum: float,
        deadline: float,
        jitter: Jitter,
        clock: Callable[[], float] | None,
    ) -> None:
        self.initial, self.maximum, self.deadline = initial, maximum, deadline
        self._jitter = jitter
        self._clock = clock
        self._started = time.monotonic()
        self._clock_started = None if clock is None else clock()
        self.waits = 0

    def elapsed(self) -> float:
        """Seconds since the call began."""
        real = time.monotonic() - self._started
        if self._clock is None or self._clock_started is None:
            return real
        return max(real, self._clock() - self._clock_started)

    def next_wait(self) -> float | None:
        """The next wait in seconds, or None when it would end past the deadline.

        A wait that fits counts as taken: the following one is twice as long, at most.
        """
        ceiling = min(self.maximum, self.initial * 2.0 ** min(self.waits, 64))
        wait = min(max(self._jitter(ceiling), 0.0), ceiling)
        if self.elapsed() + wait > self.deadline:
            return None
        self.waits += 1
        return wait
