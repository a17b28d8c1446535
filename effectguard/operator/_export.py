"""Operations with their whole histories, read for an incident report or an archive.

A plain read: each operation as :meth:`EffectLedger.get` returns it, then its
events in order. The command line writes them as JSON lines
(``agent-effect-ops export``); any other console can format them its own way.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from effectguard.ledger._protocol import check_limit

if TYPE_CHECKING:
    from effectguard._model import EffectEvent, EffectStatus, OperationRecord
    from effectguard.ledger._protocol import EffectLedger

__all__ = ["histories"]


def histories(
    ledger: EffectLedger,
    *,
    status: EffectStatus | None = None,
    contract: str | None = None,
    limit: int = 10_000,
) -> Iterator[tuple[OperationRecord, list[EffectEvent]]]:
    """Yield up to ``limit`` operations (most recently changed first), each with its events."""
    check_limit(limit)
    for record in ledger.list_operations(status=status, contract=contract, limit=limit):
        yield record, ledger.events(record.operation_id)
