"""The SQLite ledger's retention: settled operations pruned to tombstones, in short batches.

The rules (what may be pruned, what a tombstone holds and refuses, the
archive) are :mod:`effectguard.ledger.retention`'s and the batch loop is
:mod:`effectguard.ledger.pruning`'s; this module holds the statements and runs
each batch in one write transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Any, TypeVar

from effectguard.errors import InvalidRequestError
from effectguard.ledger import retention
from effectguard.ledger.documents import from_micros, to_micros
from effectguard.ledger.pruning import After, BatchPruning, PrunePass
from effectguard.ledger.retention import Tombstone
from effectguard.ledger.schema import SQLITE
from effectguard.model import EffectStatus, OperationRecord, VerifyProblem

if TYPE_CHECKING:
    from effectguard.ledger.sqlite.handle import Connection

__all__ = [
    "MIGRATION",
    "SQLitePruning",
    "refuse_loaded_tombstoned",
    "refuse_tombstoned",
    "tombstone_problems",
]

T = TypeVar("T")

#: Migration 5: the tombstones pruned operations leave.
MIGRATION = """
CREATE TABLE tombstones (
    operation_id TEXT PRIMARY KEY,
    contract TEXT NOT NULL,
    contract_version INTEGER NOT NULL,
    fingerprint TEXT NOT NULL,
    status TEXT NOT NULL,
    provider_operation_id TEXT,
    event_count INTEGER NOT NULL,
    event_head BLOB NOT NULL,
    first_hash BLOB NOT NULL,
    pruned_us INTEGER NOT NULL,
    digest BLOB NOT NULL
) WITHOUT ROWID;
"""
_STONE_COLUMNS = (
    "operation_id, contract, contract_version, fingerprint, status, provider_operation_id,"
    " event_count, event_head, first_hash, pruned_us, digest"
)
_SELECT_STONE = f"SELECT {_STONE_COLUMNS} FROM tombstones WHERE operation_id = ?"
_ALL_STONES = (
    f"SELECT {', '.join('t.' + c.strip() for c in _STONE_COLUMNS.split(','))},"
    " o.operation_id IS NOT NULL FROM tombstones AS t"
    " LEFT JOIN operations AS o ON o.operation_id = t.operation_id ORDER BY t.operation_id"
)
_INSERT_STONE = f"INSERT INTO tombstones ({_STONE_COLUMNS}) VALUES ({','.join('?' * 11)})"
_COLUMNS = ", ".join(SQLITE.operation_columns)
_EVENT_COLUMNS = ", ".join(SQLITE.event_columns)


def _stone(row: Sequence[Any]) -> Tombstone:
    values = list(row[:11])
    values[4] = EffectStatus(values[4])
    values[7], values[8], values[10] = bytes(values[7]), bytes(values[8]), bytes(values[10])
    values[9] = from_micros(values[9])
    return Tombstone(*values)


def refuse_tombstoned(conn: Connection, operation_id: str, fingerprint: str) -> None:
    """Raise EffectPruned or OperationConflictError if ``operation_id`` was pruned."""
    row = conn.execute(_SELECT_STONE, (operation_id,)).fetchone()
    if row is not None:
        raise retention.refusal(_stone(row), fingerprint)


def refuse_loaded_tombstoned(conn: Connection) -> None:
    """InvalidRequestError if a bulk load wrote an operation under a pruned id (rolled back)."""
    row = conn.execute(
        "SELECT o.operation_id FROM operations AS o JOIN tombstones AS t"
        " ON t.operation_id = o.operation_id LIMIT 1"
    ).fetchone()
    if row is not None:
        msg = f"cannot load operation {row[0]!r}: it was pruned and its tombstone stands"
        raise InvalidRequestError(msg)


def tombstone_problems(conn: Connection) -> list[VerifyProblem]:
    """Every tombstone's problems (edited, or a row back under its id)."""
    problems: list[VerifyProblem] = []
    for row in conn.execute(_ALL_STONES):
        problems.extend(retention.check_tombstone(_stone(row), bool(row[11])))
    return problems


class SQLitePruning(BatchPruning["Connection"]):
    """The retention methods of :class:`~effectguard.ledger.sqlite.SQLiteEffectLedger`.

    :meth:`prune` is :class:`~effectguard.ledger.pruning.BatchPruning`'s; each page
    is one ``BEGIN IMMEDIATE`` write transaction (a plain read for a dry run).
    """

    _clock: Callable[[], float]
    if TYPE_CHECKING:  # provided by the ledger's file handle

        def _write(self, work: Callable[[Connection], T], operation_id: str | None = ...) -> T: ...
        def _read(self, work: Callable[[Connection], T], missing: T) -> T: ...

    def tombstone(self, operation_id: str) -> Tombstone | None:
        """The tombstone a pruned ``operation_id`` left, or None if it was never pruned."""

        def work(conn: Connection) -> Tombstone | None:
            row = conn.execute(_SELECT_STONE, (operation_id,)).fetchone()
            return None if row is None else _stone(row)

        return self._read(work, None)

    def tombstones(self) -> dict[str, Tombstone]:
        """Every tombstone, by operation id."""

        def work(conn: Connection) -> dict[str, Tombstone]:
            return {row[0]: _stone(row) for row in conn.execute(_ALL_STONES)}

        return self._read(work, {})

    def _prune_now(self) -> float:
        return self._clock()

    def _prune_page(self, conn: Connection, plan: PrunePass, after: After) -> list[OperationRecord]:
        marks = ",".join("?" * len(plan.statuses))
        select = (
            f"SELECT {_COLUMNS} FROM operations WHERE status IN ({marks}) AND updated_us < ?"
            " AND (updated_us, operation_id) > (?, ?) ORDER BY updated_us, operation_id LIMIT ?"
        )
        start = (-1, "") if after is None else (to_micros(after[0]), after[1])
        params = (
            *[s.value for s in plan.statuses],
            to_micros(plan.cut.before),
            *start,
            retention.BATCH,
        )
        at_us = to_micros(plan.cut.now)
        return [SQLITE.record(row, at_us) for row in conn.execute(select, params).fetchall()]

    def _prune_records(
        self, conn: Connection, records: Sequence[OperationRecord], plan: PrunePass
    ) -> None:
        for record in records:
            _prune_one(conn, record, plan.cut, plan.archive)

    def _prune_transaction(self, work: Callable[[Connection], T], *, write: bool) -> T | None:
        return self._write(work) if write else self._read(work, None)


def _prune_one(
    conn: Connection, record: OperationRecord, cut: retention.CutOff, target: IO[str] | None
) -> None:
    events = [
        SQLITE.event(row)
        for row in conn.execute(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE operation_id = ? ORDER BY seq",
            (record.operation_id,),
        )
    ]
    first = bytes(events[0].hash) if events else b""
    stone = retention.tombstone_of(record, first, cut.now)
    if target is not None:
        retention.write_archived(target, record, events, stone)
    document = stone.document()
    conn.execute(
        _INSERT_STONE,
        (
            stone.operation_id,
            stone.contract,
            stone.contract_version,
            stone.fingerprint,
            stone.status.value,
            stone.provider_operation_id,
            stone.event_count,
            stone.event_head,
            stone.first_hash,
            document["pruned_us"],
            stone.digest,
        ),
    )
    conn.execute("DELETE FROM events WHERE operation_id = ?", (record.operation_id,))
    conn.execute("DELETE FROM operations WHERE operation_id = ?", (record.operation_id,))
