"""Ledgers that commit an event loop's writes without a worker thread per write.

``EffectExecutor.execute_async`` runs every ledger call in a worker thread, so
the event loop never blocks on I/O. A ledger that can do better for the two
writes of every call (the claim and each transition) defines ``claim_async``
and ``transition_async`` beside ``claim`` and ``transition``: the write is
built on the loop and committed by a thread of the ledger's own, with the
writes queued beside it, and the loop is woken once per commit.

:func:`async_writes` offers those forms only when the class that defines a
write also defines its async form. A subclass that overrides ``claim`` (one
that injects faults, say) and not ``claim_async`` is written to through its
``claim``, in a worker thread, so its override always runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    from effectguard.ledger.protocol import Changes, EventDraft, Expect, NewOperation
    from effectguard.model import OperationRecord

__all__ = ["AsyncWrites", "async_writes"]

_FORMS = (("claim", "claim_async"), ("transition", "transition_async"))


class AsyncWrites(Protocol):
    """The async forms of a ledger's two writes: the same guarantees, awaited on a loop.

    Each returns only once the write is durable, exactly as its sync form,
    and raises what its sync form raises. Cancelling the await does not
    withdraw the write: it is committed or not as if its caller had died.
    """

    async def claim_async(
        self, operation: NewOperation, events: Sequence[EventDraft], *, now: float | None = None
    ) -> tuple[OperationRecord, bool]:
        """See :meth:`~effectguard.ledger.protocol.EffectLedger.claim`."""
        ...

    async def transition_async(
        self,
        operation_id: str,
        expect: Expect,
        changes: Changes,
        events: Sequence[EventDraft],
        *,
        now: float | None = None,
    ) -> OperationRecord:
        """See :meth:`~effectguard.ledger.protocol.EffectLedger.transition`."""
        ...


def async_writes(ledger: object) -> AsyncWrites | None:
    """``ledger`` as :class:`AsyncWrites` when one class defines both forms of each write.

    None otherwise: its writes then run in worker threads, through their sync forms.
    """
    kind = type(ledger)
    for sync, asynchronous in _FORMS:
        defines = _defined_by(kind, sync)
        if defines is None or defines is not _defined_by(kind, asynchronous):
            return None
    return cast("AsyncWrites", ledger)


def _defined_by(kind: type, name: str) -> type | None:
    return next((owner for owner in kind.__mro__ if name in vars(owner)), None)
