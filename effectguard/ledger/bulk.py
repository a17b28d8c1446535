"""What both backends' ``bulk_load`` share: checking each chain, then rows in chunks.

``bulk_load`` writes operations and their events exactly as given, outside the
state machine: for building benchmark ledgers and restoring exported ones. It
never writes a chain that ``verify()`` would reject: every chain is checked
first, by :func:`effectguard.ledger.chain.check`, hashes recomputed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from effectguard.errors import InvalidRequestError
from effectguard.ledger import chain
from effectguard.ledger.schema import Rows
from effectguard.model import EffectEvent, OperationRecord

__all__ = ["CHUNK", "Loadable", "chunks", "duplicate_error"]

#: What ``bulk_load`` takes: each operation as it should be stored, with all its events in order.
Loadable = Iterable[tuple[OperationRecord, Sequence[EffectEvent]]]
#: Operations written per batch of statements (one transaction throughout).
CHUNK = 5000


def _checked(record: OperationRecord, events: Sequence[EffectEvent]) -> None:
    problems = [
        problem.problem if problem.seq is None else f"event {problem.seq}: {problem.problem}"
        for problem in chain.check(
            record.operation_id, record.event_count, record.event_head, events, record.status.value
        )
    ]
    if not events:
        # Every operation the ledger writes starts with its claim's events.
        problems.append("it has no events")
    if problems:
        details = "; ".join(problems[:3])
        msg = (
            f"bulk load refused: the event chain of operation {record.operation_id!r} does not "
            f"verify ({details}); nothing was loaded. Load the operation as the ledger wrote it "
            "(every event, unedited), or build its events with effectguard.ledger.chain"
        )
        raise InvalidRequestError(msg)


def chunks(
    rows: Rows, operations: Loadable, size: int = CHUNK
) -> Iterator[tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]]:
    """Yield ``(operation rows, event rows)`` for up to ``size`` operations at a time.

    Each operation's chain is checked before its rows are built: a broken one
    raises :class:`InvalidRequestError` naming it, so the caller's transaction
    is rolled back and nothing is written.
    """
    operation_rows: list[tuple[Any, ...]] = []
    event_rows: list[tuple[Any, ...]] = []
    for record, events in operations:
        _checked(record, events)
        operation_rows.append(rows.row(record))
        event_rows.extend(rows.event_row(event) for event in events)
        if len(operation_rows) >= size:
            yield operation_rows, event_rows
            operation_rows, event_rows = [], []
    if operation_rows:
        yield operation_rows, event_rows


def duplicate_error(where: str, exc: BaseException) -> InvalidRequestError:
    """The error for a load naming an operation id that is stored already (or twice)."""
    msg = (
        f"bulk load into {where} refused: an operation id in it is already in the ledger, or "
        f"given twice ({exc}); nothing was loaded. Load into a new, empty ledger"
    )
    return InvalidRequestError(msg)
