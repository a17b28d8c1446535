"""The PostgreSQL ledger's retention: settled operations pruned to tombstones, in short batches.

The rules are :mod:`effectguard.ledger.retention`'s and the batch loop is
:mod:`effectguard.ledger.pruning`'s. Each batch is one short
transaction over at most :data:`~effectguard.ledger.retention.BATCH` rows it
locks with ``FOR UPDATE SKIP LOCKED``, so a prune never holds a lock for long
and never waits on a row another writer holds.

A claim of a pruned id is refused by the server itself: migration 5's trigger
runs after the row is inserted, on a fresh snapshot, so even a claim that
waited on the very row a prune was deleting sees the tombstone the prune
committed with it, and fails (:data:`TOMBSTONED`) before anything is dispatched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC
from typing import TYPE_CHECKING, Any, TypeVar

from effectguard.ledger import retention
from effectguard.ledger.postgres.migrations import TOMBSTONED
from effectguard.ledger.postgres.sql import EVENT_SELECT, Statements, select_list
from effectguard.ledger.pruning import After, BatchPruning, PrunePass
from effectguard.ledger.retention import Tombstone
from effectguard.ledger.schema import POSTGRES
from effectguard.model import EffectStatus, OperationRecord, VerifyProblem

if TYPE_CHECKING:
    from psycopg import Connection as _Connection

    Connection = _Connection[tuple[Any, ...]]

__all__ = ["TOMBSTONED", "PostgresPruning", "stone_select", "tombstone_problems"]

T = TypeVar("T")

_STONE_COLUMNS = (
    "operation_id, contract, contract_version, fingerprint, status, provider_operation_id,"
    " event_count, event_head, first_hash, pruned_at, digest"
)


def stone_select(sql: Statements) -> str:
    """The statement reading one tombstone by operation id."""
    return f"SELECT {_STONE_COLUMNS} FROM {sql.qualified}.tombstones WHERE operation_id = %s"


def _all_stones(sql: Statements) -> str:
    s = sql.qualified
    columns = ", ".join("t." + c.strip() for c in _STONE_COLUMNS.split(","))
    return (
        f"SELECT {columns}, o.operation_id IS NOT NULL FROM {s}.tombstones AS t"
        f" LEFT JOIN {s}.operations AS o ON o.operation_id = t.operation_id"
        " ORDER BY t.operation_id"
    )


def stone(row: Sequence[Any]) -> Tombstone:
    """The tombstone in a row of :func:`stone_select`."""
    values = list(row[:11])
    values[4] = EffectStatus(values[4])
    values[7], values[8], values[10] = bytes(values[7]), bytes(values[8]), bytes(values[10])
    values[9] = values[9].astimezone(UTC)
    return Tombstone(*values)


def tombstone_problems(conn: Connection, sql: Statements) -> list[VerifyProblem]:
    """Every tombstone's problems (edited, or a row back under its id)."""
    problems: list[VerifyProblem] = []
    for row in conn.execute(_all_stones(sql)).fetchall():
        problems.extend(retention.check_tombstone(stone(row), bool(row[11])))
    return problems


class PostgresPruning(BatchPruning["Connection"]):
    """The retention methods of :class:`~effectguard.ledger.postgres.PostgresEffectLedger`.

    :meth:`prune` is :class:`~effectguard.ledger.pruning.BatchPruning`'s; each page
    is one short transaction.
    """

    if TYPE_CHECKING:  # provided by the ledger
        _sql: Statements
        _clock: Callable[[], float] | None

        def _run(self, work: Callable[[Connection], T]) -> T: ...
        def _run_read(self, work: Callable[[Connection], T]) -> T: ...
        def _server_now(self) -> float: ...

    def tombstone(self, operation_id: str) -> Tombstone | None:
        """The tombstone a pruned ``operation_id`` left, or None if it was never pruned."""

        def work(conn: Connection) -> Tombstone | None:
            row = conn.execute(stone_select(self._sql), (operation_id,)).fetchone()
            return None if row is None else stone(row)

        return self._run_read(work)

    def tombstones(self) -> dict[str, Tombstone]:
        """Every tombstone, by operation id."""

        def work(conn: Connection) -> dict[str, Tombstone]:
            return {row[0]: stone(row) for row in conn.execute(_all_stones(self._sql)).fetchall()}

        return self._run_read(work)

    def _prune_now(self) -> float:
        return self._server_now()

    def _prune_page(self, conn: Connection, plan: PrunePass, after: After) -> list[OperationRecord]:
        s = self._sql.qualified
        select = (
            f"SELECT {select_list('o')} FROM {s}.operations AS o"
            " WHERE o.status = ANY(%(statuses)s) AND o.updated_at < %(before)s"
            " AND (%(after_at)s::timestamptz IS NULL"
            " OR (o.updated_at, o.operation_id) > (%(after_at)s, %(after_id)s))"
            " ORDER BY o.updated_at, o.operation_id LIMIT %(limit)s"
        ) + ("" if plan.dry_run else " FOR UPDATE SKIP LOCKED")
        params = {
            "statuses": [status.value for status in plan.statuses],
            "before": plan.cut.before,
            "after_at": None if after is None else after[0],
            "after_id": "" if after is None else after[1],
            "limit": retention.BATCH,
        }
        return [
            POSTGRES.record(row, plan.cut.now) for row in conn.execute(select, params).fetchall()
        ]

    def _prune_transaction(self, work: Callable[[Connection], T], *, write: bool) -> T | None:
        def in_transaction(conn: Connection) -> T:
            with conn.transaction():
                return work(conn)

        return self._run(in_transaction) if write else self._run_read(in_transaction)

    def _prune_records(
        self, conn: Connection, records: Sequence[OperationRecord], plan: PrunePass
    ) -> None:
        s = self._sql.qualified
        ids = [record.operation_id for record in records]
        events: dict[str, list[Any]] = {operation_id: [] for operation_id in ids}
        for row in conn.execute(
            f"SELECT {EVENT_SELECT} FROM {s}.events WHERE operation_id = ANY(%s)"
            " ORDER BY operation_id, seq",
            (ids,),
        ).fetchall():
            events[row[0]].append(POSTGRES.event(row))
        stones = []
        for record in records:
            chain = events[record.operation_id]
            first = bytes(chain[0].hash) if chain else b""
            tomb = retention.tombstone_of(record, first, plan.cut.now)
            stones.append(tomb)
            if plan.archive is not None:
                retention.write_archived(plan.archive, record, chain, tomb)
        with conn.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {s}.tombstones ({_STONE_COLUMNS}) VALUES ({', '.join(['%s'] * 11)})",
                [
                    (
                        t.operation_id,
                        t.contract,
                        t.contract_version,
                        t.fingerprint,
                        t.status.value,
                        t.provider_operation_id,
                        t.event_count,
                        t.event_head,
                        t.first_hash,
                        t.pruned_at,
                        t.digest,
                    )
                    for t in stones
                ],
            )
        conn.execute(f"DELETE FROM {s}.events WHERE operation_id = ANY(%s)", (ids,))
        conn.execute(f"DELETE FROM {s}.operations WHERE operation_id = ANY(%s)", (ids,))
