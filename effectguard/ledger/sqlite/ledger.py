"""The SQLite ledger: durable on one host, safe for many threads and processes.

Every write is ``BEGIN IMMEDIATE … COMMIT`` on a connection opened with
``isolation_level=None``: Python 3.11's ``sqlite3`` would otherwise open an
implicit DEFERRED transaction and read outside the write lock, so two claims
could both see "no record". WAL with ``synchronous=FULL`` makes each commit
durable against power loss, which is what "recorded before dispatch" needs.
WAL does not work across hosts or on network file systems: use PostgreSQL there.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from effectguard.errors import (
    ConfigurationError,
    FencedWriteError,
    LedgerNotFoundError,
)
from effectguard.fingerprint import check_operation_id
from effectguard.ledger import anchor as anchors
from effectguard.ledger import bulk, chain
from effectguard.ledger.anchor import AnchorHead
from effectguard.ledger.protocol import (
    Changes,
    EventDraft,
    Expect,
    NewOperation,
    check_limit,
)
from effectguard.ledger.resolution import OperatorResolution
from effectguard.ledger.schema import SQLITE
from effectguard.ledger.sqlite import anchoring, pruning, writes
from effectguard.ledger.sqlite.files import FileIdentity
from effectguard.ledger.sqlite.group import GroupCommit
from effectguard.ledger.sqlite.handle import Connection, LedgerFile
from effectguard.ledger.sqlite.migrations import (
    ATTENTION_STATUSES,
    NEEDING_ATTENTION,
    SCHEMA_VERSION,
)
from effectguard.ledger.sqlite.recent import INSERT_EVENT, Recent
from effectguard.model import EffectEvent, EffectStatus, OperationRecord, VerifyReport

__all__ = ["MAX_BUSY_TIMEOUT", "SCHEMA_VERSION", "SQLiteEffectLedger"]

T = TypeVar("T")

rows = SQLITE

_SYNCHRONOUS = frozenset({"FULL", "EXTRA", "NORMAL"})
# Page cache while bulk-loading: 256 MiB (a negative cache_size is KiB).
_BULK_CACHE_KIB = -262_144

_COLUMNS = ", ".join(rows.operation_columns)
_EVENT_COLUMNS = ", ".join(rows.event_columns)
_COMMITMENTS = (
    "SELECT commits FROM events WHERE operation_id = ? AND commits IS NOT NULL ORDER BY seq"
)
_PLACES = ",".join("?" * len(rows.operation_columns))
# A bulk load must fail on an id that is taken, not skip it.
_INSERT_LOADED = f"INSERT INTO operations ({_COLUMNS}) VALUES ({_PLACES})"
_VERIFY_HEADS = (
    f"SELECT operation_id, event_count, event_head, status, {', '.join(chain.HEAD_COLUMNS)}"
    " FROM operations ORDER BY operation_id"
)


#: The longest ``busy_timeout``, in seconds: SQLite takes it in milliseconds as a
#: 32-bit int, and a longer one would wrap around rather than wait longer.
MAX_BUSY_TIMEOUT = (2**31 - 1) / 1000


def _seconds(value: object) -> bool:
    """True when ``value`` is a number of seconds SQLite can wait (not NaN, not a bool)."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and 0 <= value <= MAX_BUSY_TIMEOUT
    )


class SQLiteEffectLedger(LedgerFile, OperatorResolution, pruning.SQLitePruning):
    """An :class:`~effectguard.ledger.protocol.EffectLedger` in one SQLite file.

    The file is created with mode 0600 on the first write, never by a read;
    with ``create=False`` a missing file, or an empty one that is not yet a
    ledger, is a :class:`LedgerNotFoundError` at once and is left as it is.
    A file of an older schema is migrated forward; a newer one, or a file
    that is not a ledger, is refused with :class:`LedgerSchemaError` and left as it was.
    ``synchronous="NORMAL"`` is faster but survives only a process crash, not a
    power loss: a claim lost after a real dispatch is a silent duplicate.
    ``read_only=True`` opens the file with SQLite's ``mode=ro`` (implies
    ``create=False``): reads work on a file or directory this process may not
    write, and every write is refused with :class:`LedgerUnavailableError`.
    Every write checks that the path still names the file this ledger first
    opened, and is refused, before anything is dispatched, once it does not.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "FULL",
        busy_timeout: float = 10.0,
        create: bool = True,
        clock: Callable[[], float] | None = None,
        read_only: bool = False,
    ) -> None:
        mode = synchronous.upper() if isinstance(synchronous, str) else synchronous
        if mode not in _SYNCHRONOUS:
            msg = (
                f"synchronous must be one of {', '.join(sorted(_SYNCHRONOUS))}, not {synchronous!r}"
            )
            raise ConfigurationError(msg)
        if not _seconds(busy_timeout):
            msg = (
                f"busy_timeout must be >= 0 seconds and at most {MAX_BUSY_TIMEOUT:g} "
                f"(SQLite's limit, about 24 days), not {busy_timeout!r}"
            )
            raise ConfigurationError(msg)
        if "\x00" in os.fspath(path):
            msg = f"the ledger path {os.fspath(path)!r} contains a NUL character; no file has one"
            raise ConfigurationError(msg)
        self.path = Path(path)
        self.synchronous = mode
        self.busy_timeout = busy_timeout
        self._clock = clock or time.time
        self._local = threading.local()
        self._connections: weakref.WeakSet[Connection] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._closed = False
        self._ready = False
        self.read_only = read_only
        self._create = create and not read_only
        # The file this ledger opened first; every later connection and write must find it.
        self._identity: FileIdentity | None = None
        # Rows this ledger wrote last, so a transition is one fenced UPDATE (see recent.py).
        self._recent = Recent()
        self._lean = True
        self._group = GroupCommit(self._check_file, self._translated)
        if self.path.exists():
            self._open(write=False)
        elif not self._create:
            msg = f"no ledger at {self.path} (reads never create one)"
            raise LedgerNotFoundError(msg)

    def __repr__(self) -> str:
        return f"SQLiteEffectLedger({str(self.path)!r})"

    def _now_us(self, now: float | None) -> int:
        return round((self._clock() if now is None else now) * 1_000_000)

    _select = staticmethod(writes.select_one)

    # -- primitives ------------------------------------------------------------------

    def claim(
        self, operation: NewOperation, events: Sequence[EventDraft], *, now: float | None = None
    ) -> tuple[OperationRecord, bool]:
        """See :meth:`EffectLedger.claim`."""
        work = writes.claim(self._recent, operation, events, self._now_us(now))
        return self._write(work, operation.operation_id)

    async def claim_async(
        self, operation: NewOperation, events: Sequence[EventDraft], *, now: float | None = None
    ) -> tuple[OperationRecord, bool]:
        """:meth:`claim` from an event loop (see :mod:`effectguard.ledger.asyncledger`)."""
        work = writes.claim(self._recent, operation, events, self._now_us(now))
        return await self._write_async(work, operation.operation_id)

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
        now_us = self._now_us(now)
        work = writes.transition(
            self._recent, operation_id, expect, changes, events, now_us, lean=self._lean
        )
        return self._write(work, operation_id)

    async def transition_async(
        self,
        operation_id: str,
        expect: Expect,
        changes: Changes,
        events: Sequence[EventDraft],
        *,
        now: float | None = None,
    ) -> OperationRecord:
        """:meth:`transition` from an event loop (see :mod:`effectguard.ledger.asyncledger`)."""
        now_us = self._now_us(now)
        work = writes.transition(
            self._recent, operation_id, expect, changes, events, now_us, lean=self._lean
        )
        return await self._write_async(work, operation_id)

    def renew(
        self, operation_id: str, lease_token: str, seconds: float, *, now: float | None = None
    ) -> None:
        """See :meth:`EffectLedger.renew`."""
        expires = self._now_us(now) + round(seconds * 1_000_000)

        def work(conn: Connection) -> None:
            cursor = conn.execute(
                "UPDATE operations SET lease_expires_us = ?"
                " WHERE operation_id = ? AND lease_token = ?",
                (expires, operation_id, lease_token),
            )
            if cursor.rowcount == 0:
                msg = f"lease on operation {operation_id!r} is no longer held by this writer"
                raise FencedWriteError(msg)

        self._write(work, operation_id)

    def get(self, operation_id: str, *, now: float | None = None) -> OperationRecord | None:
        """See :meth:`EffectLedger.get`."""
        return self._read(self._getting(operation_id, now), None)

    async def get_async(
        self, operation_id: str, *, now: float | None = None
    ) -> OperationRecord | None:
        """:meth:`get` from an event loop (see :mod:`effectguard.ledger.asyncledger`)."""
        return await self._read_async(self._getting(operation_id, now), None)

    def _getting(
        self, operation_id: str, now: float | None
    ) -> Callable[[Connection], OperationRecord | None]:
        check_operation_id(operation_id)
        now_us = self._now_us(now)

        def work(conn: Connection) -> OperationRecord | None:
            row = self._select(conn, operation_id)
            return None if row is None else rows.record(row, now_us)

        return work

    def list_operations(
        self,
        *,
        status: EffectStatus | None = None,
        contract: str | None = None,
        limit: int = 100,
    ) -> list[OperationRecord]:
        """See :meth:`EffectLedger.list_operations`."""
        check_limit(limit)
        clauses, params = [], []
        if status is not None:
            clauses.append("status = ?")
            params.append(EffectStatus(status).value)
            if params[-1] in ATTENTION_STATUSES:
                clauses.append(NEEDING_ATTENTION)  # read from migration 4's index alone
        if contract is not None:
            clauses.append("contract = ?")
            params.append(contract)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        now_us = self._now_us(None)

        def work(conn: Connection) -> list[OperationRecord]:
            found = conn.execute(
                f"SELECT {_COLUMNS} FROM operations {where} ORDER BY updated_us DESC LIMIT ?",
                (*params, limit),
            ).fetchall()
            return [rows.record(row, now_us) for row in found]

        return self._read(work, [])

    def events(self, operation_id: str) -> list[EffectEvent]:
        """See :meth:`EffectLedger.events`."""
        check_operation_id(operation_id)

        def work(conn: Connection) -> list[EffectEvent]:
            found = conn.execute(
                f"SELECT {_EVENT_COLUMNS} FROM events WHERE operation_id = ? ORDER BY seq",
                (operation_id,),
            ).fetchall()
            return [rows.event(row) for row in found]

        return self._read(work, [])

    def commitments(self, operation_id: str) -> list[Mapping[str, Any]]:
        """See :func:`~effectguard.ledger.protocol.read_commitments`: no event decoded whole."""
        check_operation_id(operation_id)

        def work(conn: Connection) -> list[Mapping[str, Any]]:
            found = conn.execute(_COMMITMENTS, (operation_id,)).fetchall()
            return [json.loads(text) for (text,) in found]

        return self._read(work, [])

    def verify(self, *, anchor: AnchorHead | None = None) -> VerifyReport:
        """See :meth:`EffectLedger.verify`."""

        def work(conn: Connection) -> VerifyReport:
            # One read transaction, so the chains are checked against one snapshot.
            conn.execute("BEGIN")
            try:
                return self._verify(conn, anchor)
            finally:
                conn.execute("COMMIT")

        empty = VerifyReport(0, 0, ())
        if anchor is not None and anchor.count:
            empty = anchors.merged(empty, *anchors.check((), (), anchor))
        return self._read(work, empty)

    def _verify(self, conn: Connection, anchor: AnchorHead | None) -> VerifyReport:
        heads = conn.execute(_VERIFY_HEADS)
        events = conn.execute(f"SELECT {_EVENT_COLUMNS} FROM events ORDER BY operation_id, seq")
        report = chain.verify(heads, map(rows.read_event, events))
        unanchored = [row[0] for row in conn.execute(anchoring.UNANCHORED)]
        problems, head = anchors.check(conn.execute(anchoring.VERIFY_CLAIMS), unanchored, anchor)
        return anchors.merged(report, [*problems, *pruning.tombstone_problems(conn)], head)

    def anchor_head(self) -> AnchorHead:
        """See :meth:`EffectLedger.anchor_head`."""

        def work(conn: Connection) -> AnchorHead:
            last = conn.execute(anchoring.LAST_CLAIM).fetchone()
            return AnchorHead(0, anchors.START) if last is None else AnchorHead(*last)

        return self._read(work, AnchorHead(0, anchors.START))

    def bulk_load(self, operations: bulk.Loadable) -> int:
        """Write ``operations`` and their events as given, in one transaction; return how many.

        For building benchmark ledgers and restoring exported ones: it bypasses
        the state machine and writes each record and its events exactly as
        given (``lease_live`` is judged on read, as always). It never writes a
        chain ``verify()`` would reject: a broken chain, or an operation id
        already stored or given twice, raises :class:`InvalidRequestError` and
        nothing is written. Then refreshes the query planner's statistics.
        """

        def work(conn: Connection) -> int:
            loaded = 0
            # A large load touches far more pages than the default cache holds.
            previous = conn.execute("PRAGMA cache_size").fetchone()[0]
            conn.execute(f"PRAGMA cache_size = {_BULK_CACHE_KIB}")
            try:
                for operation_rows, event_rows in bulk.chunks(rows, operations):
                    conn.executemany(_INSERT_LOADED, operation_rows)
                    conn.executemany(INSERT_EVENT, event_rows)
                    loaded += len(operation_rows)
                pruning.refuse_loaded_tombstoned(conn)
                anchoring.anchor_unanchored(conn)
            except sqlite3.IntegrityError as exc:
                raise bulk.duplicate_error(f"ledger {self.path}", exc) from exc
            finally:
                conn.execute(f"PRAGMA cache_size = {int(previous)}")
            return loaded

        loaded = self._write(work)
        self._read(lambda conn: conn.execute("ANALYZE"), None)
        return loaded
