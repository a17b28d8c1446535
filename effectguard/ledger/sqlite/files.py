"""The SQLite files effectguard creates: private from the first byte, in WAL mode."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

__all__ = ["create_private_file", "enable_wal"]


def create_private_file(path: Path) -> None:
    """Create ``path`` empty with mode 0600, unless it already exists.

    Creating the file before SQLite opens it matters: SQLite would create it
    0644, and its -wal and -shm files copy the database file's mode. Raises
    ``OSError`` when the file cannot be created.
    """
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def enable_wal(conn: sqlite3.Connection, busy_timeout: float) -> None:
    """Switch the file to WAL (a persistent setting); call outside any transaction.

    Changing the journal mode needs an exclusive lock and SQLite answers
    "locked" at once, without its busy handler, while another process creates
    the same file; so retry until ``busy_timeout`` seconds have passed.
    """
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
                return
            conn.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(0.005)
