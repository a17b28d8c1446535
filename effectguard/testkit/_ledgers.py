"""A ledger that forwards every primitive to another: the base of counting wrappers.

A wrapper that watches what the executor does with a ledger (the bench counts
commits and reads, the fault matrix counts fenced-out writes) subclasses
:class:`DelegatingLedger` and overrides only the primitives it watches.

The :class:`~effectguard.ledger.EffectLedger` methods are forwarded,
and so is the ``claims_first`` hook the executor chooses its path by
(:func:`~effectguard.ledger.claims_first`): a call through a wrapper
takes the path it takes without one, so what a wrapper counts is what
production does. A wrapper is never :class:`~effectguard.ledger.Prunable`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from effectguard.ledger._protocol import claims_first, read_commitments

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from effectguard._model import EffectEvent, EffectStatus, OperationRecord, VerifyReport
    from effectguard.ledger._chain import AnchorHead
    from effectguard.ledger._protocol import (
        Changes,
        EffectLedger,
        EventDraft,
        Expect,
        NewOperation,
        Seen,
    )

__all__ = ["DelegatingLedger"]


class DelegatingLedger:
    """Satisfies :class:`~effectguard.ledger.EffectLedger` by calling ``inner``.

    Each method passes its arguments through unchanged and returns or raises
    what ``inner`` did; ``close`` closes ``inner``.
    """

    def __init__(self, inner: EffectLedger) -> None:
        self.inner = inner

    @property
    def claims_first(self) -> bool:
        """Whether ``inner`` claims before it reads (its ``claims_first``)."""
        return claims_first(self.inner)

    def claim(
        self, operation: NewOperation, *, now: float | None = None
    ) -> tuple[OperationRecord, bool]:
        """See :meth:`EffectLedger.claim`."""
        return self.inner.claim(operation, now=now)

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
        """See :meth:`EffectLedger.transition`."""
        return self.inner.transition(operation_id, expect, changes, events, now=now, known=known)

    def renew(
        self, operation_id: str, lease_token: str, seconds: float, *, now: float | None = None
    ) -> None:
        """See :meth:`EffectLedger.renew`."""
        self.inner.renew(operation_id, lease_token, seconds, now=now)

    def get(self, operation_id: str, *, now: float | None = None) -> OperationRecord | None:
        """See :meth:`EffectLedger.get`."""
        return self.inner.get(operation_id, now=now)

    def list_operations(
        self,
        *,
        status: EffectStatus | None = None,
        contract: str | None = None,
        limit: int = 100,
    ) -> list[OperationRecord]:
        """See :meth:`EffectLedger.list_operations`."""
        return self.inner.list_operations(status=status, contract=contract, limit=limit)

    def events(self, operation_id: str) -> list[EffectEvent]:
        """See :meth:`EffectLedger.events`."""
        return self.inner.events(operation_id)

    def commitments(self, operation_id: str) -> list[Mapping[str, Any]]:
        """See :func:`~effectguard.ledger.read_commitments`."""
        return read_commitments(self.inner, operation_id)

    def verify(self, *, anchor: AnchorHead | None = None) -> VerifyReport:
        """See :meth:`EffectLedger.verify`."""
        return self.inner.verify(anchor=anchor)

    def confirm(
        self,
        operation_id: str,
        *,
        output: Any,
        provider_operation_id: str | None,
        actor: str,
        reason: str,
        evidence_reference: str,
        expected: Seen | None = None,
    ) -> OperationRecord:
        """See :meth:`EffectLedger.confirm`."""
        return self.inner.confirm(
            operation_id,
            output=output,
            provider_operation_id=provider_operation_id,
            actor=actor,
            reason=reason,
            evidence_reference=evidence_reference,
            expected=expected,
        )

    def reject(
        self,
        operation_id: str,
        *,
        actor: str,
        reason: str,
        evidence_reference: str,
        expected: Seen | None = None,
    ) -> OperationRecord:
        """See :meth:`EffectLedger.reject`."""
        return self.inner.reject(
            operation_id,
            actor=actor,
            reason=reason,
            evidence_reference=evidence_reference,
            expected=expected,
        )

    def authorize_retry(
        self,
        operation_id: str,
        *,
        actor: str,
        reason: str,
        evidence_reference: str,
        expected: Seen | None = None,
    ) -> OperationRecord:
        """See :meth:`EffectLedger.authorize_retry`."""
        return self.inner.authorize_retry(
            operation_id,
            actor=actor,
            reason=reason,
            evidence_reference=evidence_reference,
            expected=expected,
        )

    def close(self) -> None:
        """See :meth:`EffectLedger.close`."""
        self.inner.close()
