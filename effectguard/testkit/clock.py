"""A clock that moves only when told, for lease and deadline tests that never sleep."""

from __future__ import annotations

import time

__all__ = ["ManualClock"]


class ManualClock:
    """Epoch seconds that change only through :meth:`advance`.

    Pass the same instance as ``clock=`` to an :class:`~effectguard.EffectExecutor`
    and its :class:`~effectguard.SQLiteEffectLedger`, so leases expire exactly
    when a test says so. It starts at ``start``, or at the current time.
    """

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else float(start)

    def __call__(self) -> float:
        """Return the current reading."""
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (never backward)."""
        if not seconds >= 0:
            msg = f"a clock only moves forward, not by {seconds!r} seconds"
            raise ValueError(msg)
        self.now += seconds

    def __repr__(self) -> str:
        return f"ManualClock({self.now!r})"
