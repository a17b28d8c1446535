"""Evidence that a matrix run really contended: takeovers, lease expiries, fenced-out writes.

A run with several workers proves something only if they met: a run in
which no process ever took over another's lease, was fenced out, or found a
live lease held by another proves nothing about concurrency. Takeovers and
lease expiries are read from each operation's events (the ledger's own
record); fenced-out writes are counted by :class:`FenceCounter`, through
which every matrix process reaches the ledger, because a fenced write leaves
no event (it changed nothing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from effectguard import EffectLedger, EventType
from effectguard._model import EffectEvent, OperationRecord
from effectguard.errors import FencedWriteError
from effectguard.ledger._protocol import Changes, EventDraft, Expect
from effectguard.testkit._ledgers import DelegatingLedger

__all__ = ["Contention", "FenceCounter", "contention_of"]


@dataclass(frozen=True, slots=True)
class Contention:
    """One operation's takeovers, seen in its events."""

    takeovers: int = 0
    """Writers that took a held operation from another (its owner gone, or its lease expired)."""
    lease_expiries: int = 0
    """Those takeovers whose owner was not provably gone: its lease had expired."""


def contention_of(events: Sequence[EffectEvent]) -> Contention:
    """Count the takeovers and lease expiries in one operation's ``events``."""
    taken = [
        event for event in events if event.type in (EventType.LEASE_EXPIRED, EventType.OWNER_GONE)
    ]
    # A takeover from an owner proven dead is OWNER_GONE (earlier ledgers wrote LEASE_EXPIRED
    # with evidence saying so); only the rest waited out a lease.
    expired = sum(
        1
        for event in taken
        if event.type is EventType.LEASE_EXPIRED and not event.evidence.get("owner_gone")
    )
    return Contention(takeovers=len(taken), lease_expiries=expired)


class FenceCounter(DelegatingLedger):
    """Delegates to ``ledger`` and counts the writes refused because another holds the lease.

    Like every :class:`DelegatingLedger` it shows the ledger's ``claims_first``:
    the matrix's calls take the path production takes on each backend (on
    PostgreSQL the claim is the first read).
    """

    def __init__(self, ledger: EffectLedger) -> None:
        super().__init__(ledger)
        self.fenced = 0

    def transition(
        self,
        operation_id: str,
        expect: Expect,
        changes: Changes,
        events: Sequence[EventDraft],
        *,
        now: float | None = None,
        known: OperationRecord | None = None,
    ) -> OperationRecord:
        """See :meth:`EffectLedger.transition`; a :class:`FencedWriteError` is counted."""
        try:
            return super().transition(operation_id, expect, changes, events, now=now, known=known)
        except FencedWriteError:
            self.fenced += 1
            raise

    def renew(
        self, operation_id: str, lease_token: str, seconds: float, *, now: float | None = None
    ) -> None:
        """See :meth:`EffectLedger.renew`; a :class:`FencedWriteError` is counted."""
        try:
            super().renew(operation_id, lease_token, seconds, now=now)
        except FencedWriteError:
            self.fenced += 1
            raise
