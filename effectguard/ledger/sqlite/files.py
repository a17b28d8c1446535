"""The SQLite files effectguard creates: private from the first byte, in WAL mode.

And the identity of a ledger file: a process that has a ledger open keeps
writing into the file it opened even after that file is deleted or replaced,
where no other process will ever look, while another process creates a fresh
ledger at the same path and dispatches the same operations again. So every
write first checks that the path still names the file this ledger opened.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from effectguard.errors import LedgerUnavailableError

__all__ = [
    "FileIdentity",
    "create_private_file",
    "enable_wal",
    "file_identity",
    "file_version",
    "orphaned_journal",
    "read_only_uri",
    "replaced_error",
    "unchanged",
]

#: (device, inode): which file a path names, independent of its name.
FileIdentity = tuple[int, int]


def file_identity(path: Path) -> FileIdentity | None:
    """Return the (device, inode) of the file ``path`` names now, or None when it names none."""
    try:
        found = path.stat()
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino


def orphaned_journal(path: Path) -> Path | None:
    """Return ``path``'s -wal or -shm file when it exists without ``path`` itself, else None.

    That is what deleting only the database file leaves behind: a ledger created
    beside it would be a new, empty ledger next to another ledger's journal.
    """
    for suffix in ("-wal", "-shm"):
        journal = Path(f"{path}{suffix}")
        # The journal first, then the file: a ledger's file always exists before its
        # journal, so a writer creating both meanwhile is never mistaken for a deletion.
        if journal.exists() and not path.exists():
            return journal
    return None


def read_only_uri(path: Path, *, immutable: bool) -> str:
    """Return the SQLite URI that opens ``path`` for reading only (``immutable``: without locks).

    ``immutable=1`` is for a WAL ledger in a directory this process cannot
    write: SQLite cannot create the -shm file it needs to coordinate with
    writers, so it must read the file as it is, and :func:`unchanged` checks
    afterwards that no writer changed it meanwhile.
    """
    uri = f"{path.absolute().as_uri()}?mode=ro"
    return f"{uri}&immutable=1" if immutable else uri


def file_version(path: Path) -> tuple[int, int, bool]:
    """Return what changes when anyone writes the ledger: mtime, size, and whether a -wal exists."""
    found = path.stat()
    return found.st_mtime_ns, found.st_size, Path(f"{path}-wal").exists()


def unchanged(path: Path, version: tuple[int, int, bool]) -> bool:
    """True when :func:`file_version` of ``path`` is still ``version``."""
    try:
        return file_version(path) == version
    except FileNotFoundError:
        return False


def replaced_error(path: Path, operation_id: str | None, *, found: str) -> LedgerUnavailableError:
    """The error for a write refused because ``path`` no longer names the opened ledger file."""
    operation = "" if operation_id is None else f" (operation {operation_id!r} was not written)"
    msg = (
        f"the ledger file at {path} was removed or replaced ({found}) while this process had it "
        f"open{operation}; nothing is written to it or dispatched from it, because another "
        "process would not see those records and could dispatch the same operations again. "
        "Restore the ledger file (and its -wal file) from where it went, or, if the new file "
        "is the ledger you mean, close this ledger and open the path again"
    )
    return LedgerUnavailableError(msg)


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
