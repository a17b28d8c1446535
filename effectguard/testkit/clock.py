"""Clocks that move only when told, for lease and deadline tests that never sleep.

:class:`ManualClock` is one process's time; :class:`SharedClock` is one time
for several processes (the fault matrix's workers); :class:`OffsetClock` is a
caller whose clock has jumped away from the others'.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
import time
from pathlib import Path

__all__ = ["ManualClock", "OffsetClock", "SharedClock"]

_FORMAT = "=d"
_WIDTH = struct.calcsize(_FORMAT)


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


class SharedClock:
    """A manual clock whose reading lives in a file, so several processes share one time.

    Every process that opens the same ``path`` reads the same epoch seconds, and
    an :meth:`advance` in any of them (an executor's backoff, a test moving time
    past a lease) is seen by all. Advances are serialised by a lock on the file,
    so none is lost. :meth:`create` writes the starting time; other processes
    open it with the constructor.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_RDWR)
        try:
            self._map = mmap.mmap(self._fd, _WIDTH)
        except BaseException:
            os.close(self._fd)
            raise

    @classmethod
    def create(cls, path: str | os.PathLike[str], start: float) -> SharedClock:
        """Write ``start`` to a new file at ``path`` (owner-only) and open it."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, struct.pack(_FORMAT, float(start)))
        finally:
            os.close(fd)
        return cls(path)

    def __call__(self) -> float:
        """Return the current reading."""
        now: float = struct.unpack_from(_FORMAT, self._map, 0)[0]
        return now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` for every process sharing it (never backward)."""
        if not seconds >= 0:
            msg = f"a clock only moves forward, not by {seconds!r} seconds"
            raise ValueError(msg)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            struct.pack_into(_FORMAT, self._map, 0, self() + seconds)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Unmap the file; the reading stays in it for the other processes."""
        self._map.close()
        os.close(self._fd)

    def __repr__(self) -> str:
        return f"SharedClock({str(self.path)!r})"


class OffsetClock:
    """Another clock's reading plus a fixed offset: a caller whose clock has jumped.

    :meth:`advance` moves the underlying clock, so an executor's backoff on
    this caller still moves everyone's time, as real waiting would.
    """

    def __init__(self, base: ManualClock | SharedClock, offset: float) -> None:
        self.base = base
        self.offset = float(offset)

    def __call__(self) -> float:
        """Return the underlying clock's reading plus the offset."""
        return self.base() + self.offset

    def advance(self, seconds: float) -> None:
        """Move the underlying clock forward by ``seconds``."""
        self.base.advance(seconds)

    def __repr__(self) -> str:
        return f"OffsetClock({self.base!r}, {self.offset!r})"
