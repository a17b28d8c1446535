"""Ledgers that serve an event loop's calls without a worker thread per call.

``EffectExecutor.execute_async`` never runs ledger I/O on the event loop. By
default each ledger call runs in a worker thread. A ledger that can do better
for the calls every guarded call makes (the read first, the claim and each
transition) defines ``get_async``, ``claim_async`` and ``transition_async``
beside ``get``, ``claim`` and ``transition``: SQLite's build the write on the
loop, and a thread of the ledger's own commits it with the writes queued
beside it, and wakes the loop once per commit.

:func:`async_ledger` offers those forms only when the class that defines a
call also defines its async form. A subclass that overrides ``claim`` (one
that injects faults, say) and not ``claim_async`` is called through its
``claim``, in a worker thread, so its override always runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    from effectguard.ledger.protocol import Changes, EventDraft, Expect, NewOperation
    from effectguard.model import OperationRecord

__all__ = ["AsyncLedger", "async_ledger"]

_FORMS = (("get", "get_async"), ("claim", "claim_async"), ("transition", "transition_async"))


class AsyncLedger(Protocol):
    """The async forms of a ledger's read, claim and transition, awaited on a loop.

    Each returns what its sync form returns, with the same guarantees (a
    write returns only once it is durable), and raises what it raises.
    Cancelling the await does not withdraw a write: it is committed or not
    as if its caller had died.
    """

    async def get_async(
        self, operation_id: str, *, now: float | None = None
    ) -> OperationRecord | None:
        """See :meth:`~effectguard.ledger.protocol.EffectLedger.get`."""
        ...

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


def async_ledger(ledger: object) -> AsyncLedger | None:
    """``ledger`` as :class:`AsyncLedger` when one class defines both forms of each call.

    None otherwise: its calls then run in worker threads, through their sync forms.
    """
    kind = type(ledger)
    for sync, asynchronous in _FORMS:
        defines = _defined_by(kind, sync)
        if defines is None or defines is not _defined_by(kind, asynchronous):
            return None
    return cast("AsyncLedger", ledger)


def _defined_by(kind: type, name: str) -> type | None:
    return next((owner for owner in kind.__mro__ if name in vars(owner)), None)
