"""Waiting for a peer: another worker dispatching the same operation under a live lease."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["PeerWait"]

#: Longest pause between two reads while waiting for a peer: the backoff stops growing here.
_MAX_PEER_POLL = 0.5


class PeerWait:
    """The pauses of one call waiting for a peer: doubling from ``first``, within ``seconds``.

    The wait ends when ``seconds`` have passed on the monotonic clock, or on the
    injected clock when there is one: a test moves its clock instead of sleeping,
    and a clock that never moves still cannot make a call wait forever.
    """

    def __init__(self, seconds: float, clock: Callable[[], float] | None, first: float) -> None:
        self.seconds = seconds
        self._clock = clock
        self._started = None if clock is None else clock()
        self._deadline = time.monotonic() + seconds
        self._pause = max(first, 0.001)

    def next_pause(self) -> float | None:
        """The next pause, or None when the wait is over."""
        remaining = self._deadline - time.monotonic()
        if self._clock is not None and self._started is not None:
            remaining = min(remaining, self.seconds - (self._clock() - self._started))
        if remaining <= 0:
            return None
        pause = min(self._pause, remaining)
        self._pause = min(self._pause * 2, max(_MAX_PEER_POLL, self._pause))
        return pause
