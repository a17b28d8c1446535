"""A ledger that counts the executor's reads and writes, to say how many commits a call takes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from effectguard.ledger.anchor import AnchorHead
from effectguard.ledger.protocol import (
    Changes,
    EffectLedger,
    EventDraft,
    Expect,
    NewOperation,
    claims_first,
)
from effectguard.model import EffectEvent, EffectStatus, OperationRecord, VerifyReport

__all__ = ["CountingLedger"]

#: The primitives that write; each is one commit (EffectLedger's contract). A claim
#: that found its operation already there is counted as ``claim_found``, a read.
WRITES = ("claim", "transition", "renew")


class CountingLedger:
    """Delegates to ``ledger`` and counts each primitive called, in ``calls``."""

    def __init__(self, ledger: EffectLedger) -> None:
        self.ledger = ledger
        self.calls: Counter[str] = Counter()

    @property
    def claims_first(self) -> bool:
        """Whether the ledger counted claims before it reads (see :func:`claims_first`)."""
        return claims_first(self.ledger)

    @property
    def writes(self) -> int:
        """Commits so far: every claim, transition and renewal."""
        return sum(self.calls[name] for name in WRITES)

    @property
    def reads(self) -> int:
        """Plain reads of one operation so far, counting claims that found it instead."""
        return self.calls["get"] + self.calls["claim_found"]

    def claim(
        self, operation: NewOperation, events: Sequence[EventDraft], *, now: float | None = None
    ) -> tuple[OperationRecord, bool]:
        """See :meth:`EffectLedger.claim`."""
        claimed = self.ledger.claim(operation, events, now=now)
        # A claim that found the operation committed nothing: it was a read.
        self.calls["claim" if claimed[1] else "claim_found"] += 1
        return claimed

    def transition(
        self,
        operation_id: str,
        expect: Expect,
        changes: Changes,
        events: Sequence[EventDraft],
        *,
        now: float | None = None,
    ) -> OperationRecord:
        """See :meth:`EffectLedger.transition`."""
        self.calls["transition"] += 1
        return self.ledger.transition(operation_id, expect, changes, events, now=now)

    def renew(
        self, operation_id: str, lease_token: str, seconds: float, *, now: float | None = None
    ) -> None:
        """See :meth:`EffectLedger.renew`."""
        self.calls["renew"] += 1
        self.ledger.renew(operation_id, lease_token, seconds, now=now)

    def get(self, operation_id: str, *, now: float | None = None) -> OperationRecord | None:
        """See :meth:`EffectLedger.get`."""
        self.calls["get"] += 1
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
