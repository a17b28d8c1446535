"""What this thread last saw of one operation, and the server's clock as of then.

A guarded call reads its operation, claims it and, a moment later, records
its outcome. Each of those writes needs the server's time (its events' times
are hashed) and a transition needs the row it changes; reading them first
costs a round trip per write. Instead a write may start from what this thread
saw of the same operation less than a second ago: the server's time then plus
the time elapsed here, and the row as this thread last read or wrote it.

That is only ever a first guess. Every write is a conditional statement on
the row's event count and its fence, so a stale guess changes nothing and the
write falls back to reading the row and the server's time, as before.

A claim of a new operation needs no row, only the server's time: it starts
from the last time this ledger learned from the server on any thread, plus the
time elapsed here (:meth:`Recent.server_now`). The claim statement checks that
estimate against the server's clock and refuses it when it is off by more than
a bound, so the estimate can make a claim cheaper, never wrongly dated.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from datetime import datetime, timedelta

from effectguard.model import OperationRecord

__all__ = ["RECENT_SECONDS", "Recent", "Seen"]

#: How long what a thread saw stays a usable guess.
RECENT_SECONDS = 1.0


@dataclasses.dataclass(frozen=True, slots=True)
class Seen:
    """One operation as this thread last saw it (None: absent) and the server's time then."""

    operation_id: str
    record: OperationRecord | None
    server_time: datetime
    monotonic: float

    def server_now(self) -> datetime:
        """The server's time now, from its time then and the time elapsed here (whole µs)."""
        return self.server_time + timedelta(seconds=time.monotonic() - self.monotonic)


class Recent:
    """Per thread, the last operation read or written through one ledger."""

    def __init__(self) -> None:
        self._local = threading.local()
        # (server time, monotonic time here then) of the latest statement that reported it.
        self._clock: tuple[datetime, float] | None = None

    def saw(self, operation_id: str, record: OperationRecord | None, server_time: datetime) -> None:
        """Remember a read of ``operation_id`` at the server's ``server_time``."""
        seen = Seen(operation_id, record, server_time, time.monotonic())
        self._local.seen = seen
        self._clock = (server_time, seen.monotonic)

    def clock(self, server_time: datetime) -> None:
        """Remember the server's time as a statement just reported it."""
        self._clock = (server_time, time.monotonic())

    def server_now(self) -> datetime | None:
        """The server's time now, estimated from the last time any thread learned it; None yet."""
        known = self._clock
        if known is None:
            return None
        server_time, then = known
        return server_time + timedelta(seconds=time.monotonic() - then)

    def wrote(self, record: OperationRecord) -> None:
        """Remember the row a write returned, keeping the time of the last read."""
        seen: Seen | None = getattr(self._local, "seen", None)
        if seen is not None and seen.operation_id == record.operation_id:
            self._local.seen = dataclasses.replace(seen, record=record)

    def get(self, operation_id: str) -> Seen | None:
        """What this thread saw of ``operation_id`` less than RECENT_SECONDS ago, if anything."""
        seen: Seen | None = getattr(self._local, "seen", None)
        if seen is None or seen.operation_id != operation_id:
            return None
        if time.monotonic() - seen.monotonic > RECENT_SECONDS:
            return None
        return seen
