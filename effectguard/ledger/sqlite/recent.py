"""What this ledger last wrote of an operation, so a transition is one fenced UPDATE.

A guarded call claims its operation and, a moment later, records its outcome.
The general transition reads the row under the write lock, checks the fence,
and rewrites every column. Instead, a transition may start from the row as
this ledger last wrote or read it (:class:`Recent`): it checks the writer's
:class:`~effectguard.ledger.protocol.Expect` against that row, extends the
event chain from the head kept there, and writes only the changed columns in
one ``UPDATE … WHERE operation_id = ? AND event_count = ? AND event_head = ?
AND lease_token IS ?`` (:func:`lean_transition`).

That is only ever a first guess. Every effectguard write that changes a row
other than its lease expiry appends an event, so a row whose event count and
chain head are the remembered ones *is* the remembered row, except for an
expiry that :meth:`renew` moved on. A write that sets the lease overwrites the
expiry anyway; one that keeps the lease also names the remembered expiry in
its ``WHERE``. A stale guess matches no row, writes nothing, and the caller
falls back to the general path in the same transaction. A write that needs the
lease judged expired (a take-over) always takes the general path: only the
database's row can say that.

No ``RETURNING``: measured on SQLite 3.40, ``UPDATE … RETURNING`` on the
operations table cost about four times the same ``UPDATE`` without it (about
200 µs against 50 µs per write on a RAM disk), because of the partial index
that serves the operator's listings; with that index dropped the two cost the
same.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from typing import Any, NamedTuple

from effectguard.ledger import committed
from effectguard.ledger.protocol import Changes, EventDraft, Expect, describe_mismatch
from effectguard.ledger.schema import SQLITE, Version
from effectguard.ledger.values import status
from effectguard.model import OperationRecord

__all__ = ["INSERT_EVENT", "Known", "Recent", "lean_transition"]

rows = SQLITE

#: Operations remembered per ledger; the oldest are forgotten first.
RECENT_SIZE = 4096

INSERT_EVENT = (
    f"INSERT INTO events ({', '.join(rows.event_columns)})"
    f" VALUES ({','.join('?' * len(rows.event_columns))})"
)

_COLUMNS = rows.operation_columns
_STATUS, _TOKEN, _EXPIRES, _COUNT, _HEAD, _UPDATED = (
    _COLUMNS.index(rows.name(field))
    for field in (
        "status",
        "lease_token",
        "lease_expires_at",
        "event_count",
        "event_head",
        "updated_at",
    )
)
_AT = {name: index for index, name in enumerate(_COLUMNS)}
_TERMINAL = frozenset({"CONFIRMED", "REJECTED"})


class Known(NamedTuple):
    """An operation's row as stored, and its record's values (column order)."""

    row: tuple[Any, ...]
    values: list[Any]


class Recent:
    """The rows of the operations this ledger wrote last, until they are terminal.

    Shared by every thread of the ledger; what it holds is a guess that the
    database checks on every write, never trusted alone.
    """

    def __init__(self, size: int = RECENT_SIZE) -> None:
        self._size = size
        self._known: dict[str, Known] = {}
        self._lock = threading.Lock()

    def get(self, operation_id: str) -> Known | None:
        """The row last written or read of ``operation_id``, or None."""
        return self._known.get(operation_id)

    def keep(self, row: tuple[Any, ...], values: list[Any]) -> None:
        """Remember ``row``; a terminal one is forgotten instead (nothing writes it again)."""
        operation_id = row[0]
        with self._lock:
            if row[_STATUS] in _TERMINAL:
                self._known.pop(operation_id, None)
                return
            self._known[operation_id] = Known(row, values)
            if len(self._known) > self._size:
                del self._known[next(iter(self._known))]

    def forget(self, operation_id: str) -> None:
        """Drop ``operation_id`` (unknown ids: no-op)."""
        with self._lock:
            self._known.pop(operation_id, None)


_STATEMENTS: dict[tuple[tuple[str, ...], bool], str] = {}


def _statement(names: tuple[str, ...], keeps_lease: bool) -> str:
    """The fenced UPDATE of ``names``; one that keeps the lease also fences on its expiry."""
    found = _STATEMENTS.get((names, keeps_lease))
    if found is None:
        found = (
            f"UPDATE operations SET {', '.join(f'{name} = ?' for name in names)}"
            " WHERE operation_id = ? AND event_count = ? AND event_head = ? AND lease_token IS ?"
        )
        if keeps_lease:
            found += " AND lease_expires_us IS ?"
        _STATEMENTS[names, keeps_lease] = found
    return found


def lean_transition(
    conn: sqlite3.Connection,
    known: Known,
    expect: Expect,
    changes: Changes,
    drafts: Sequence[EventDraft],
    now_us: int,
) -> tuple[OperationRecord, Known] | None:
    """Apply ``changes`` and ``drafts`` to the ``known`` row in one fenced UPDATE, under the lock.

    Returns the new record and what to remember of it; None when the guess
    cannot decide (the fence needs the stored row, or the row moved on), in
    which case nothing was written.
    """
    row = known.row
    version = Version(status(row[_STATUS]), row[_TOKEN], False, row[_COUNT])  # noqa: FBT003 - the tuple's field
    if expect.lease_expired or describe_mismatch(version, expect, lease_expired=False):
        return None
    operation_id = row[0]
    changed = rows.changed_columns(changes, now_us)
    events, count, head = rows.appended(
        operation_id,
        drafts,
        row[_COUNT],
        bytes(row[_HEAD]) or None,
        now_us,
        committed.commitments(changed),
    )
    changed[_COLUMNS[_COUNT]] = count
    changed[_COLUMNS[_HEAD]] = head or b""
    changed[_COLUMNS[_UPDATED]] = now_us
    names = tuple(changed)
    fence: tuple[Any, ...] = (operation_id, row[_COUNT], row[_HEAD], row[_TOKEN])
    keeps_lease = _COLUMNS[_EXPIRES] not in changed
    if keeps_lease:
        fence = (*fence, row[_EXPIRES])
    if conn.execute(_statement(names, keeps_lease), (*changed.values(), *fence)).rowcount != 1:
        return None
    conn.executemany(INSERT_EVENT, events)
    stored = list(row)
    values = list(known.values)
    for name, value in changed.items():
        at = _AT[name]
        stored[at] = value
        values[at] = rows.decode(name, value)
    updated = tuple(stored)
    record = rows.assembled(values, updated[_TOKEN], updated[_EXPIRES], now_us)
    return record, Known(updated, values)
