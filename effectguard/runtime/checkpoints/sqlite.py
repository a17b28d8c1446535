"""Run checkpoints in one SQLite file, so a WAITING run survives a process restart.

The file follows the ledger's rules: created 0600 before SQLite opens it (its
``-wal`` and ``-shm`` files copy that mode), WAL with ``synchronous=FULL`` so a
checkpoint written before a dispatch survives a power loss, and every write in
``BEGIN IMMEDIATE … COMMIT`` on a connection opened with
``isolation_level=None``. It is a separate file from the ledger: the ledger,
not the checkpoint, is the authority on every effect.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Self, TypeVar

from effectguard.errors import CheckpointConflictError, CheckpointError, RunExistsError
from effectguard.ledger.sqlite import (
    FileFormat,
    connect,
    create_private_file,
    current,
    enable_wal,
    inspect,
    migrate,
    refusal,
    write_transaction,
)
from effectguard.runtime.checkpoints.store import conflict_message, encode_record
from effectguard.runtime.state import RunRecord, RunState

__all__ = ["SQLiteCheckpointStore"]

T = TypeVar("T")

#: ``PRAGMA application_id`` of a checkpoint file ("EGCP").
APPLICATION_ID = 0x45474350
_MIGRATIONS = (
    # 1: runs and their latest checkpoint.
    """
    CREATE TABLE IF NOT EXISTS runs (
        run_id TEXT PRIMARY KEY,
        revision INTEGER NOT NULL,
        state TEXT NOT NULL,
        document TEXT NOT NULL,
        created_us INTEGER NOT NULL,
        updated_us INTEGER NOT NULL
    );
    CREATE INDEX IF NOT EXISTS runs_by_state ON runs (state, created_us);
    """,
)
#: The checkpoint file's format (the ledger's shared opening and migration code reads it).
FORMAT = FileFormat("checkpoint store", APPLICATION_ID, _MIGRATIONS)
SCHEMA_VERSION = FORMAT.version


def _now_us() -> int:
    return time.time_ns() // 1000


class SQLiteCheckpointStore:
    """A :class:`~effectguard.runtime.checkpoints.CheckpointStore` in one SQLite file.

    Safe for several threads and processes on one host. The file is created
    with mode 0600; a file that is some other SQLite database, or a checkpoint
    file of a newer schema, is refused with :class:`CheckpointError` and left
    as it is.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 10.0) -> None:
        self.path = Path(path)
        self.busy_timeout = busy_timeout
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        self._closed = False
        self._connection()

    def __repr__(self) -> str:
        return f"SQLiteCheckpointStore({str(self.path)!r})"

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- connection ------------------------------------------------------------------

    @contextlib.contextmanager
    def _translate(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            msg = f"checkpoint store {self.path} failed: {exc}"
            raise CheckpointError(msg) from exc

    def _create_file(self) -> None:
        try:
            create_private_file(self.path)
        except OSError as exc:
            msg = f"cannot create checkpoint store {self.path}: {exc.strerror}"
            raise CheckpointError(msg) from exc

    def _connection(self) -> sqlite3.Connection:
        if self._closed:
            msg = f"checkpoint store {self.path} is closed"
            raise CheckpointError(msg)
        # A connection inherited across fork() must never be used by the child.
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        self._create_file()
        with self._translate():
            conn = connect(self.path, self.busy_timeout, sqlite3.Connection)
            try:
                self._prepare(conn)
            except BaseException:
                conn.close()
                raise
        self._conn, self._pid = conn, os.getpid()
        return conn

    def _prepare(self, conn: sqlite3.Connection) -> None:
        found = inspect(conn)
        problem = refusal(self.path, FORMAT, found)
        if problem is not None:
            raise CheckpointError(problem)
        enable_wal(conn, self.busy_timeout)
        conn.execute("PRAGMA synchronous = FULL")
        if not current(FORMAT, found):
            migrate(conn, FORMAT)

    def _write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            conn = self._connection()
            with self._translate():
                return write_transaction(conn, work)

    def _read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            conn = self._connection()
            with self._translate():
                return work(conn)

    # -- the store -------------------------------------------------------------------

    def create(self, record: RunRecord) -> int:
        """Store a new run; return its revision (1)."""
        text = encode_record(record)

        def work(conn: sqlite3.Connection) -> int:
            now = _now_us()
            cursor = conn.execute(
                "INSERT INTO runs (run_id, revision, state, document, created_us, updated_us)"
                " VALUES (?, 1, ?, ?, ?, ?) ON CONFLICT (run_id) DO NOTHING",
                (record.run_id, record.state.value, text, now, now),
            )
            if cursor.rowcount == 0:
                msg = f"run {record.run_id!r} already exists; resume it or use a new run id"
                raise RunExistsError(msg)
            return 1

        return self._write(work)

    def load(self, run_id: str) -> RunRecord | None:
        """Return the run's latest record, or None."""
        row = self._read(
            lambda conn: conn.execute(
                "SELECT revision, document FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
        )
        if row is None:
            return None
        try:
            return RunRecord.from_json(json.loads(row[1]), int(row[0]))
        except (ValueError, KeyError, TypeError) as exc:
            msg = f"checkpoint of run {run_id!r} in {self.path} is unreadable: {exc}"
            raise CheckpointError(msg) from exc

    def save(self, record: RunRecord) -> int:
        """Store ``record`` over the revision it was loaded at; return the new revision."""
        text = encode_record(record)

        def work(conn: sqlite3.Connection) -> int:
            cursor = conn.execute(
                "UPDATE runs SET revision = revision + 1, state = ?, document = ?,"
                " updated_us = ? WHERE run_id = ? AND revision = ?",
                (record.state.value, text, _now_us(), record.run_id, record.revision),
            )
            if cursor.rowcount == 0:
                row = conn.execute(
                    "SELECT revision FROM runs WHERE run_id = ?", (record.run_id,)
                ).fetchone()
                raise CheckpointConflictError(
                    conflict_message(record, None if row is None else int(row[0]))
                )
            return record.revision + 1

        return self._write(work)

    def list_runs(self, state: RunState | None = None) -> list[str]:
        """Return run ids (in the given state), oldest first."""

        def work(conn: sqlite3.Connection) -> list[str]:
            if state is None:
                rows = conn.execute("SELECT run_id FROM runs ORDER BY created_us, run_id")
            else:
                rows = conn.execute(
                    "SELECT run_id FROM runs WHERE state = ? ORDER BY created_us, run_id",
                    (state.value,),
                )
            return [str(row[0]) for row in rows]

        return self._read(work)

    def close(self) -> None:
        """Close the connection; the store is unusable afterwards. Closing twice does nothing."""
        with self._lock:
            self._closed = True
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None
