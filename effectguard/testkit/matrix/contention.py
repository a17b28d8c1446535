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
from typing import Any

from effectguard.errors import FencedWriteError
from effectguard.ledger import AnchorHead, EffectLedger
from effectguard.ledger.protocol import Changes, EventDraft, Expect, NewOperation
from effectguard.model import EffectEvent, EffectStatus, EventType, OperationRecord, VerifyReport

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


class FenceCounter:
    """Delegates to ``ledger`` and counts the writes refused because another holds the lease."""

    def __init__(self, ledger: EffectLedger) -> None:
        self.ledger = ledger
        self.fenced = 0

    def claim(
        self, operation: NewOperation, events: Sequence[EventDraft], *, now: float | None = None
    ) -> tuple[OperationRecord, bool]:
        """See :meth:`EffectLedger.claim`."""
        return self.ledger.claim(operation, events, now=now)

    def transition(
        self,
        operation_id: str,
        expect: Expect,
        changes: Changes,
        events: Sequence[EventDraft],
        *,
        now: float | None = None,
    ) -> OperationRecord:
        """See :meth:`EffectLedger.transition`; a :class:`FencedWriteError` is counted."""
        try:
            return self.ledger.transition(operation_id, expect, changes, events, now=now)
        except FencedWriteError:
            self.fenced += 1
            raise

    def renew(
        self, operation_id: str, lease_token: str, seconds: float, *, now: float | None = None
    ) -> None:
        """See :meth:`EffectLedger.renew`; a :class:`FencedWriteError` is counted."""
        try:
            self.ledger.renew(operation_id, lease_token, seconds, now=now)
        except FencedWriteError:
            self.fenced += 1
            raise

    def get(self, operation_id: str, *, now: float | None = None) -> OperationRecord | None:
        """See :meth:`EffectLedger.get`."""
        return self.ledger.get(operation_id, now=now)

    def list_operations(
        self,
        *,
        status: EffectStatus | None = None,
        contract: str | None = None,
        limit: int = 100,
    ) -> list[OperationRecord]:
        """See :meth:`EffectLedger.list_operations`."""
        return self.ledger.list_operations(status=status, contract=contract, limit=limit)

    def events(self, operation_id: str) -> list[EffectEvent]:
        """See :meth:`EffectLedger.events`."""
        return self.ledger.events(operation_id)

    def verify(self, *, anchor: AnchorHead | None = None) -> VerifyReport:
        """See :meth:`EffectLedger.verify`."""
        return self.ledger.verify(anchor=anchor)

    def confirm(
        self,
        operation_id: str,
        *,
        output: Any,
        provider_operation_id: str | None,
        actor: str,
        reason: str,
        evidence_reference: str,
    ) -> OperationRecord:
        """See :meth:`EffectLedger.confirm`."""
        return self.ledger.confirm(
            operation_id,
            output=output,
            provider_operation_id=provider_operation_id,
            actor=actor,
            reason=reason,
            evidence_reference=evidence_reference,
        )

    def reject(
        self, operation_id: str, *, actor: str, reason: str, evidence_reference: str
    ) -> OperationRecord:
        """See :meth:`EffectLedger.reject`."""
        return self.ledger.reject(
            operation_id, actor=actor, reason=reason, evidence_reference=evidence_reference
        )

    def authorize_retry(
        self, operation_id: str, *, actor: str, reason: str, evidence_reference: str
    ) -> OperationRecord:
        """See :meth:`EffectLedger.authorize_retry`."""
        return self.ledger.authorize_retry(
            operation_id, actor=actor, reason=reason, evidence_reference=evidence_reference
        )

    def close(self) -> None:
        """See :meth:`EffectLedger.close`."""
        self.ledger.close()
