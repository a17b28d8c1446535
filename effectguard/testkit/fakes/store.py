"""A fake provider's own durable state: effects and request counts, in SQLite.

In memory by default; in a file when a path is given, so that several
processes (one of which may be killed with SIGKILL) share one provider and the
survivor can count what really committed.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

from effectguard.errors import InternalError

__all__ = ["Store"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS effects (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    reference TEXT NOT NULL,
    idempotency_key TEXT,
    body TEXT NOT NULL,
    state TEXT NOT NULL,
    pending_reads INTEGER NOT NULL DEFAULT 0,
    reads INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS effects_by_reference ON effects (reference);
CREATE TABLE IF NOT EXISTS attempts (reference TEXT PRIMARY KEY, count INTEGER NOT NULL);
"""


class Store:
    """SQLite storage for one fake provider, safe for threads and (with a path) processes."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = None if path is None else Path(path)
        self._lock = threading.RLock()
        self._local = threading.local()
        self._shared: sqlite3.Connection | None = None
        self._opened: list[tuple[int, sqlite3.Connection]] = []
        if self.path is None:
            self._shared = sqlite3.connect(
                ":memory:", isolation_level=None, check_same_thread=False
            )
            self._shared.executescript(_SCHEMA)
        else:
            with self._lock:
                # executescript manages its own transaction; the statements are idempotent.
                self._connection().executescript(_SCHEMA)

    def _connection(self) -> sqlite3.Connection:
        if self._shared is not None:
            return self._shared
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        # A connection never crosses fork(): a child process opens its own.
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            if self.path is None:
                msg = "a fake store with neither a shared connection nor a path"
                raise InternalError(msg)
            # Used by this thread only; closed by close(), possibly from another thread.
            conn = sqlite3.connect(
                self.path, isolation_level=None, timeout=30, check_same_thread=False
            )
            conn.execute("PRAGMA journal_mode = WAL")
            # WAL with NORMAL survives the SIGKILLs fault tests deal in (a commit is in the
            # WAL before COMMIT returns); only a power loss could take it back.
            conn.execute("PRAGMA synchronous = NORMAL")
            self._local.conn, self._local.pid = conn, os.getpid()
            self._opened.append((os.getpid(), conn))
        return conn

    def close(self) -> None:
        """Close every connection this store opened in this process; in memory, state is lost."""
        with self._lock:
            for pid, conn in self._opened:
                if pid == os.getpid():  # a parent's connection is never touched after fork()
                    conn.close()
            self._opened.clear()
            self._local = threading.local()
            if self._shared is not None:
                self._shared.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE … COMMIT`` on this thread's connection, rolled back on error."""
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
