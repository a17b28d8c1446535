"""The study's destination: a deterministic provider that counts what it really committed.

One :class:`Destination` per episode. It is simpler than the fakes in
:mod:`effectguard.testkit.fakes` on purpose: every strategy meets it in the
same process, on the same hand-moved clock, so the same seed plays the same
faults against each strategy. What it models:

- **keys** (``keyed``): a request whose idempotency key was seen within
  ``retention`` seconds returns the first answer and commits nothing new; an
  older key is forgotten, as Stripe forgets keys after 24 hours. A key-less
  destination commits every request that arrives.
- **lookups** (``lookup``): ``strong`` (read-your-writes), ``eventual`` (a
  commit is visible only after ``lag`` reads), or ``none``.
- **faults**, by request number (see :class:`StudyFault`).

Its ground truth is :attr:`committed`, counted per reference: what the
destination holds, whatever any caller believes.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Crash", "Destination", "Lookup", "StudyFault", "Timeout", "Unreachable"]


class StudyFault(enum.StrEnum):
    """What goes wrong with an episode's first request (later requests go through)."""

    LOST_ACK = "lost-ack"
    """The request commits; the answer is lost (the caller sees a timeout)."""
    LATE_COMMIT = "late-commit"
    """The caller times out first; the request lands just behind the caller's next move."""
    EVENTUAL_READ = "eventual-read"
    """The answer is lost and the lookup lags: a read right after says "not found"."""
    CRASH_AFTER_COMMIT = "crash-after-commit"
    """The request commits, then the calling process dies; it restarts and calls again."""
    PENDING = "pending"
    """The request is accepted but processing: lookups say pending; it commits later."""
    UNREACHABLE = "unreachable"
    """The connection is refused for the first requests: nothing is sent."""


class Lookup(enum.StrEnum):
    """How far the destination's lookup can be trusted."""

    STRONG = "strong"
    EVENTUAL = "eventual"
    NONE = "none"


class Timeout(Exception):
    """No answer in time: the request may or may not have committed."""


class Unreachable(ConnectionRefusedError):
    """The connection was refused: nothing was sent."""


class Crash(BaseException):
    """The calling process died here (the study restarts it; nothing below survives)."""


@dataclass
class Destination:
    """A provider for one episode: keys, lookups and one planned fault."""

    keyed: bool
    lookup: Lookup
    fault: StudyFault
    clock: Callable[[], float]
    retention: float = 24 * 3600.0
    lag: int = 2
    refusals: int = 1
    requests: int = 0
    """Requests that reached the destination."""
    lookups: int = 0
    committed: int = 0
    """Effects the destination holds: the ground truth."""
    _keys: dict[str, float] = field(default_factory=dict)
    _late: bool = False
    _late_key: str | None = None
    _pending_reads: int = 0
    _reads_since_commit: int = 0

    def send(self, key: str | None) -> dict[str, object]:
        """One request; returns the answer or raises what the client would see."""
        if self.fault is StudyFault.UNREACHABLE and self.refusals > 0:
            self.refusals -= 1
            msg = "connection refused (nothing sent)"
            raise Unreachable(111, msg)
        self.requests += 1
        first = self.requests == 1
        if self._late:
            self._late = False
            self._commit(self._late_key)  # the held request lands just behind the resend
        if key is not None and self.keyed and self._remembers(key):
            return {"id": key, "replayed": True}
        if first and self.fault is StudyFault.LATE_COMMIT:
            self._late, self._late_key = True, key
            msg = "timed out (the request is still being processed)"
            raise Timeout(msg)
        self._commit(key)
        if first and self.fault is StudyFault.PENDING:
            self._pending_reads = self.lag
        if first and self.fault in (
            StudyFault.LOST_ACK,
            StudyFault.EVENTUAL_READ,
            StudyFault.PENDING,
        ):
            msg = "timed out waiting for the answer"
            raise Timeout(msg)
        if first and self.fault is StudyFault.CRASH_AFTER_COMMIT:
            raise Crash
        return {"id": key or f"effect-{self.committed}", "replayed": False}

    def find(self) -> str:
        """Look the effect up: ``"found"``, ``"pending"`` or ``"missing"`` (as the lookup sees).

        A late request lands just after the first read that follows the timeout:
        a strong lookup knows it is in flight ("pending"), an eventual one says
        "missing"; later reads can see it.
        """
        self.lookups += 1
        if self.lookup is Lookup.NONE:
            msg = "this destination has no lookup"
            raise LookupError(msg)
        if self._late:
            self._late = False
            self._commit(self._late_key)
            return "pending" if self.lookup is Lookup.STRONG else "missing"
        if self._pending_reads > 0:
            self._pending_reads -= 1
            return "pending"
        if self.committed == 0:
            return "missing"
        self._reads_since_commit += 1
        lags = self.lookup is Lookup.EVENTUAL or self.fault is StudyFault.EVENTUAL_READ
        if lags and self._reads_since_commit <= self.lag:
            return "missing"
        return "found"

    def settle(self) -> None:
        """The end of the episode: a request still held commits now."""
        if self._late:
            self._late = False
            self._commit(self._late_key)

    def _remembers(self, key: str) -> bool:
        seen = self._keys.get(key)
        return seen is not None and self.clock() - seen <= self.retention

    def _commit(self, key: str | None) -> None:
        self.committed += 1
        self._reads_since_commit = 0
        if key is not None and self.keyed:
            self._keys[key] = self.clock()
