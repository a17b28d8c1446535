"""The SQLite site: ledger files and the baseline's file in one directory of their own."""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._config import BenchError
from effectguard import SQLiteEffectLedger
from effectguard.ledger._rows import Loadable

__all__ = ["RAW_CLAIM", "RAW_OUTCOME", "SQLiteRaw", "SQLiteSite"]

_BUSY_TIMEOUT_MS = 10_000
#: The baseline's two statements, each its own commit: the claim, then the outcome.
RAW_CLAIM = (
    "INSERT INTO calls (operation_id, status, arguments, updated_us) VALUES (?, 'DISPATCHED', ?, ?)"
)
RAW_OUTCOME = (
    "UPDATE calls SET status = 'CONFIRMED', output = ?, updated_us = ? WHERE operation_id = ?"
)


def _connect(
    path: Path, factory: type[sqlite3.Connection] = sqlite3.Connection
) -> sqlite3.Connection:
    """A connection with the ledger's durability: WAL, synchronous=FULL, autocommit statements."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, factory=factory)
    conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    return conn


class SQLiteRaw:
    """The hand-written baseline: a table keyed by operation id, one commit per statement.

    ``factory`` is the class of its connection, :attr:`connection`.
    """

    def __init__(self, path: Path, factory: type[sqlite3.Connection] = sqlite3.Connection) -> None:
        self._conn = self.connection = _connect(path, factory)
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS calls (operation_id TEXT PRIMARY KEY,"
            " status TEXT NOT NULL, arguments TEXT NOT NULL, output TEXT,"
            " updated_us INTEGER NOT NULL)"
        )
        self._conn.execute(
            "CREATE INDEX IF NOT EXISTS calls_by_status ON calls (status, updated_us)"
        )

    def record(self, operation_id: str, arguments: str, output: str) -> None:
        """See :meth:`RawStore.record`."""
        execute = self._conn.execute
        execute(RAW_CLAIM, (operation_id, arguments, time.time_ns() // 1000))
        execute(RAW_OUTCOME, (output, time.time_ns() // 1000, operation_id))

    def read(self, operation_id: str) -> Any:
        """See :meth:`RawStore.read`."""
        row = self._conn.execute(
            "SELECT status, output FROM calls WHERE operation_id = ?", (operation_id,)
        ).fetchone()
        return json.loads(row[1])

    def close(self) -> None:
        """See :meth:`RawStore.close`."""
        self._conn.close()


class SQLiteSite:
    """Ledger files ``<name>.db`` and ``raw.db`` in a fresh directory, removed by :meth:`close`.

    ``parent`` is where that directory is made (the system's temporary
    directory by default): put it on the disk you want to measure.
    """

    backend = "sqlite"

    def __init__(self, parent: Path | None) -> None:
        if parent is not None and not parent.is_dir():
            msg = f"--db {parent} is not a directory (a SQLite bench writes its files into one)"
            raise BenchError(msg)
        self.directory = Path(tempfile.mkdtemp(prefix="effectguard-bench-", dir=parent))
        self._ledgers: list[SQLiteEffectLedger] = []
        self._raws: list[SQLiteRaw] = []

    def _path(self, name: str) -> Path:
        return self.directory / f"{name}.db"

    def ledger(self, name: str) -> SQLiteEffectLedger:
        """See :meth:`Site.ledger`."""
        path = self._path(name)
        if not path.exists():
            # An empty 0600 file becomes a ledger when opened: no operation is needed to create it.
            path.touch(mode=0o600)
        ledger = SQLiteEffectLedger(path)
        self._ledgers.append(ledger)
        return ledger

    def target(self, name: str) -> str:
        """See :meth:`Site.target`."""
        return str(self._path(name))

    def raw(self) -> SQLiteRaw:
        """See :meth:`Site.raw`."""
        store = SQLiteRaw(self.directory / "raw.db")
        self._raws.append(store)
        return store

    def bulk_load(self, name: str, histories: Loadable) -> None:
        """See :meth:`Site.bulk_load`."""
        ledger = self.ledger(name)
        try:
            ledger.bulk_load(histories)
        finally:
            ledger.close()

    def ledger_bytes(self, name: str) -> int:
        """See :meth:`Site.ledger_bytes`: pages in use after a checkpoint, free pages excluded."""
        for ledger in self._ledgers:
            if ledger.path == self._path(name):
                ledger.close()
        conn = _connect(self._path(name))
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            free = conn.execute("PRAGMA freelist_count").fetchone()[0]
            size = conn.execute("PRAGMA page_size").fetchone()[0]
        finally:
            conn.close()
        return int((pages - free) * size)

    def environment(self) -> dict[str, Any]:
        """See :meth:`Site.environment`."""
        return {
            "sqlite": sqlite3.sqlite_version,
            "journal_mode": "wal",
            "synchronous": "FULL",
            "directory": str(self.directory.parent),
        }

    def close(self) -> None:
        """See :meth:`Site.close`."""
        for ledger in self._ledgers:
            ledger.close()
        for store in self._raws:
            with contextlib.suppress(sqlite3.Error):
                store.close()
        shutil.rmtree(self.directory, ignore_errors=True)
