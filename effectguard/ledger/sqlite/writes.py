"""The two writes of every guarded call on SQLite, as work for the group commit.

:func:`claim` and :func:`transition` build, on the caller's thread, everything
a write needs that does not depend on what is stored; the work they return
runs under the write lock, in whichever thread leads the batch that holds it
(:mod:`~effectguard.ledger.sqlite.group`). The ledger runs that work from a
thread (``claim``, ``transition``) or from an event loop (``claim_async``,
``transition_async``): the same statements, the same fences, either way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from effectguard.errors import FencedWriteError, InternalError, OperationNotFoundError
from effectguard.ledger.protocol import Changes, EventDraft, Expect, NewOperation, describe_mismatch
from effectguard.ledger.schema import SQLITE
from effectguard.ledger.sqlite import anchoring, pruning
from effectguard.ledger.sqlite.handle import Connection
from effectguard.ledger.sqlite.recent import INSERT_EVENT, Recent, lean_transition
from effectguard.model import OperationRecord

__all__ = ["claim", "select_one", "transition"]

rows = SQLITE

_COLUMNS = ", ".join(rows.operation_columns)
_TOKEN = rows.operation_columns.index(rows.name("lease_token"))
_EXPIRES = rows.operation_columns.index(rows.name("lease_expires_at"))
# Nothing is inserted under a pruned id either: a new operation costs one statement.
_INSERT_OPERATION = (
    f"INSERT INTO operations ({_COLUMNS}) SELECT {','.join('?' * len(rows.operation_columns))}"
    " WHERE NOT EXISTS (SELECT 1 FROM tombstones WHERE operation_id = ?)"
    " ON CONFLICT (operation_id) DO NOTHING"
)
_SELECT_ONE = f"SELECT {_COLUMNS} FROM operations WHERE operation_id = ?"
# Every column but the key, in column order, then the key.
_UPDATE_OPERATION = (
    f"UPDATE operations SET {', '.join(f'{name} = ?' for name in rows.operation_columns[1:])}"
    " WHERE operation_id = ?"
)


def select_one(conn: Connection, operation_id: str) -> Sequence[Any] | None:
    """The operation's stored row, or None."""
    row: Sequence[Any] | None = conn.execute(_SELECT_ONE, (operation_id,)).fetchone()
    return row


def claim(
    recent: Recent, operation: NewOperation, events: Sequence[EventDraft], now_us: int
) -> Callable[[Connection], tuple[OperationRecord, bool]]:
    """The work of :meth:`~effectguard.ledger.protocol.EffectLedger.claim`."""
    # Nothing in a new row depends on what is stored: build it before taking the lock.
    values, events_rows = rows.created(operation, events, now_us)

    def work(conn: Connection) -> tuple[OperationRecord, bool]:
        # Insert first: a new operation, the common case, then needs no read.
        if conn.execute(_INSERT_OPERATION, (*values, operation.operation_id)).rowcount == 0:
            pruning.refuse_tombstoned(conn, operation.operation_id, operation.fingerprint)
            row = select_one(conn, operation.operation_id)
            if row is None:
                msg = f"{operation.operation_id!r} blocked the insert but cannot be read"
                raise InternalError(msg)
            return rows.record(row, now_us), False
        conn.executemany(INSERT_EVENT, events_rows)
        first = events_rows[0][8] if events_rows else b""
        anchoring.anchor(conn, [(operation.operation_id, first)])
        decoded = rows.decoded(values)
        recent.keep(values, decoded)
        return rows.assembled(decoded, operation.lease.token, values[_EXPIRES], now_us), True

    return work


def transition(
    recent: Recent,
    operation_id: str,
    expect: Expect,
    changes: Changes,
    events: Sequence[EventDraft],
    now_us: int,
    *,
    lean: bool,
) -> Callable[[Connection], OperationRecord]:
    """The work of :meth:`~effectguard.ledger.protocol.EffectLedger.transition`.

    With ``lean``, it starts from the row this ledger last wrote (see
    :mod:`~effectguard.ledger.sqlite.recent`) and falls back to reading it.
    """

    def work(conn: Connection) -> OperationRecord:
        known = recent.get(operation_id) if lean else None
        if known is not None:
            written = lean_transition(conn, known, expect, changes, events, now_us)
            if written is not None:
                record, kept = written
                recent.keep(*kept)
                return record
        row = select_one(conn, operation_id)
        if row is None:
            raise OperationNotFoundError(operation_id)
        current = rows.version(row, now_us)
        problem = describe_mismatch(current, expect, lease_expired=not current.lease_live)
        if problem is not None:
            recent.forget(operation_id)
            msg = f"write to operation {operation_id!r} refused: {problem}"
            raise FencedWriteError(msg)
        updated, events_rows = rows.transitioned(row, changes, events, now_us)
        conn.executemany(INSERT_EVENT, events_rows)
        conn.execute(_UPDATE_OPERATION, (*updated[1:], operation_id))
        decoded = rows.decoded(updated)
        recent.keep(updated, decoded)
        return rows.assembled(decoded, updated[_TOKEN], updated[_EXPIRES], now_us)

    return work
