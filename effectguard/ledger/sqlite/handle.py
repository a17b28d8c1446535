"""One SQLite ledger file as a handle holds it: its connections, its identity, its writes.

:class:`LedgerFile` is the half of :class:`~effectguard.ledger.sqlite.SQLiteEffectLedger`
that knows files, not operations: a connection per thread (never one inherited
across ``fork()``), the file pinned by device and inode on first open and
checked under the write lock of every write, read-only opening (with a lock-free
fallback in a directory this process cannot write), driver errors translated to
ledger errors, and closing from any thread without cutting a statement short.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Self, TypeVar

from effectguard.errors import (
    LedgerError,
    LedgerLockedError,
    LedgerNotFoundError,
    LedgerSchemaError,
    LedgerUnavailableError,
)
from effectguard.ledger.sqlite.connection import (
    connect,
    current,
    inspect,
    migrate,
    refusal,
)
from effectguard.ledger.sqlite.files import (
    FileIdentity,
    create_private_file,
    enable_wal,
    file_identity,
    file_version,
    orphaned_journal,
    read_only_uri,
    replaced_error,
    unchanged,
)
from effectguard.ledger.sqlite.group import GroupCommit
from effectguard.ledger.sqlite.migrations import APPLICATION_ID, FORMAT, SCHEMA_VERSION

__all__ = ["Connection", "LedgerFile"]

T = TypeVar("T")


class Connection(sqlite3.Connection):
    """A connection that can be weakly referenced, so dead threads' connections are collected.

    ``in_use`` is held while its thread works on it, so that :meth:`SQLiteEffectLedger.close`
    from another thread waits instead of closing it mid-statement (which can crash the process).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.in_use = threading.Lock()
        # Set on a read-only connection that reads without locks (see files.read_only_uri).
        self.unlocked_at: tuple[int, int, bool] | None = None


class LedgerFile:
    """Connections to one ledger file, and the checks every connection and write makes."""

    path: Path
    synchronous: str
    busy_timeout: float
    read_only: bool
    _create: bool
    _ready: bool
    _closed: bool
    _identity: FileIdentity | None
    _local: threading.local
    _connections: weakref.WeakSet[Connection]
    _lock: threading.Lock
    _group: GroupCommit

    @contextlib.contextmanager
    def _translate(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise self._translated(exc) from exc

    def _translated(self, exc: sqlite3.Error) -> LedgerError:
        """The ledger error a driver error surfaces as (the caller raises it ``from exc``)."""
        if isinstance(exc, sqlite3.OperationalError):
            text = str(exc)
            if "locked" in text or "busy" in text:
                return self._locked()
            return LedgerUnavailableError(f"ledger {self.path} is unavailable: {text}")
        if isinstance(exc, sqlite3.DatabaseError) and "not a database" in str(exc):
            return LedgerSchemaError(f"{self.path} is not a SQLite database")
        return LedgerUnavailableError(f"ledger {self.path} failed: {exc}")

    def _locked(self) -> LedgerLockedError:
        return LedgerLockedError(
            f"ledger {self.path} is locked by another writer "
            f"(waited the busy timeout of {self.busy_timeout:g}s)"
        )

    def _create_file(self) -> None:
        if self._identity is not None:
            # This process knew a ledger here: a new empty one would forget its records.
            raise replaced_error(self.path, None, found="it is gone")
        journal = orphaned_journal(self.path)
        if journal is not None:
            msg = (
                f"cannot create ledger {self.path}: {journal.name} exists without it, so the "
                "ledger file was deleted and a new ledger here would dispatch again what it "
                f"recorded; restore {self.path.name}, or delete its -wal and -shm files to "
                "start a new, empty ledger on purpose"
            )
            raise LedgerUnavailableError(msg)
        try:
            create_private_file(self.path)
        except OSError as exc:
            msg = f"cannot create ledger {self.path}: {exc.strerror}"
            raise LedgerUnavailableError(msg) from exc

    def _sqlite_connect(self, target: str | Path) -> Connection:
        with self._translate():
            return connect(target, self.busy_timeout, Connection)

    def _connect_read_only(self) -> Connection:
        conn = self._sqlite_connect(read_only_uri(self.path, immutable=False))
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.Error as exc:
            conn.close()
            # A WAL file in a directory this process cannot write: SQLite cannot create the
            # -shm it shares with writers. With no -wal, the file alone holds every commit.
            version = file_version(self.path)
            if not isinstance(exc, sqlite3.OperationalError) or version[2]:
                raise self._translated(exc) from exc
        else:
            return conn
        conn = self._sqlite_connect(read_only_uri(self.path, immutable=True))
        conn.unlocked_at = version
        return conn

    def _connect(self) -> Connection:
        before = file_identity(self.path)
        conn = self._connect_read_only() if self.read_only else self._sqlite_connect(self.path)
        try:
            with self._translate():
                if not self._ready:
                    self._prepare(conn)
                elif conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
                    raise replaced_error(  # noqa: TRY301 - closed by the handler below
                        self.path, None, found="it is no longer a ledger"
                    )
                conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            self._pin(before)
        except BaseException:
            conn.close()
            raise
        with self._lock:
            self._connections.add(conn)
        return conn

    def _pin(self, before: FileIdentity | None) -> None:
        """Check a new connection opened the file this ledger first opened (the first pins it)."""
        after = file_identity(self.path)
        if before is None or after != before:
            raise replaced_error(self.path, None, found="it changed while being opened")
        with self._lock:
            if self._identity is None:
                self._identity = after
        if after != self._identity:
            raise replaced_error(self.path, None, found="it now names another file")

    def _check_file(self, operation_id: str | None) -> None:
        """Refuse a write when the path no longer names the file this ledger opened."""
        found = file_identity(self.path)
        if found != self._identity:
            state = "it is gone" if found is None else "it now names another file"
            raise replaced_error(self.path, operation_id, found=state)

    def _prepare(self, conn: Connection) -> None:
        """Check the file is a ledger this library can use, then migrate it forward."""
        found = inspect(conn)
        problem = refusal(self.path, FORMAT, found)
        if problem is not None:
            raise LedgerSchemaError(problem)
        if found.application_id != APPLICATION_ID and not self._create:
            # An empty file (``touch``, an interrupted creation) would otherwise become a
            # ledger on the first read.
            msg = f"{self.path} is empty, not a ledger (reads never create one)"
            raise LedgerNotFoundError(msg)
        if self.read_only:
            if found.version != SCHEMA_VERSION:
                msg = (
                    f"ledger {self.path} has schema version {found.version} and needs migrating "
                    f"to {SCHEMA_VERSION}, which a read-only open cannot do; open it writable once"
                )
                raise LedgerSchemaError(msg)
            self._ready = True
            return
        enable_wal(conn, self.busy_timeout)
        if not current(FORMAT, found):
            migrate(conn, FORMAT)
        self._ready = True

    def _open(self, *, write: bool) -> Connection:
        if self._closed:
            msg = f"ledger {self.path} is closed"
            raise LedgerUnavailableError(msg)
        conn: Connection | None = getattr(self._local, "conn", None)
        pid = getattr(self._local, "pid", None)
        if conn is None or pid != os.getpid():
            # A connection inherited across fork() must never be used by the child.
            if not self.path.exists():
                if not write:
                    msg = f"no ledger at {self.path} (reads never create one)"
                    raise LedgerNotFoundError(msg)
                self._create_file()
            conn = self._connect()
            self._local.conn = conn
            self._local.pid = os.getpid()
        return conn

    # _read and _write run on every call: plain try/except, no context-manager generator.
    def _read(self, work: Callable[[Connection], T], missing: T) -> T:
        if not self._ready and not self.path.exists():
            return missing
        conn = self._open(write=False)
        try:
            with conn.in_use:
                result = work(conn)
        except sqlite3.Error as exc:
            raise self._translated(exc) from exc
        if conn.unlocked_at is not None and not unchanged(self.path, conn.unlocked_at):
            msg = (
                f"ledger {self.path} was written while this read-only process read it without "
                "locks (it cannot create the -shm file in that directory); run the read again"
            )
            raise LedgerUnavailableError(msg)
        return result

    def _writable(self, operation_id: str | None) -> None:
        if self.read_only:
            what = "" if operation_id is None else f" operation {operation_id!r} was not written:"
            msg = f"{what} ledger {self.path} was opened read-only; open it writable to change it"
            raise LedgerUnavailableError(msg.strip())
        if self._closed:
            msg = f"ledger {self.path} is closed"
            raise LedgerUnavailableError(msg)

    async def _read_async(self, work: Callable[[Connection], T], missing: T) -> T:
        """:meth:`_read` from an event loop: run in the ledger's writer thread."""
        if self._closed:
            msg = f"ledger {self.path} is closed"
            raise LedgerUnavailableError(msg)
        return await self._group.submit_read(lambda: self._read(work, missing))

    async def _write_async(self, work: Callable[[Connection], T], operation_id: str) -> T:
        """:meth:`_write` from an event loop: the ledger's writer thread runs ``work``."""
        self._writable(operation_id)
        return await self._group.submit(lambda: self._open(write=True), work, operation_id)

    def _write(self, work: Callable[[Connection], T], operation_id: str | None = None) -> T:
        if self.read_only or self._closed:
            self._writable(operation_id)
        # Threads' writes share transactions (group.py); the file is checked under the
        # write lock, so a file replaced while a write waited is seen too.
        try:
            return self._group.run(lambda: self._open(write=True), work, operation_id)
        except sqlite3.Error as exc:
            raise self._translated(exc) from exc

    def close(self) -> None:
        """Close every connection this ledger opened, in any thread, and end its writer thread."""
        self._closed = True
        self._group.close()
        with self._lock:
            connections = list(self._connections)
            self._connections = weakref.WeakSet()
        for conn in connections:
            # Wait for the thread using it to finish its statement: closing under it can crash.
            with conn.in_use, contextlib.suppress(sqlite3.Error):
                conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
