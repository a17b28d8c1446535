"""One SQLite file of ours: connected, checked, migrated and written the same way everywhere.

The ledger (:mod:`effectguard.ledger.sqlite.ledger`) and the runtime's
checkpoint store (:mod:`effectguard.runtime.checkpoints.sqlite`) keep
different data in different files but handle them by one set of rules,
written here once. Each store names its file by a :class:`FileFormat` — its
``PRAGMA application_id``, what it is called, its migrations — as data.

- Connections use ``isolation_level=None``: Python 3.11's ``sqlite3`` would
  otherwise open an implicit DEFERRED transaction and read outside the write
  lock; every write is an explicit ``BEGIN IMMEDIATE … COMMIT``
  (:func:`write_transaction`).
- A file is what its application id says: one of another format that holds
  tables, or of a newer schema, is refused and left as it is (:func:`refusal`);
  an older or empty one is migrated forward under the write lock (:func:`migrate`).

These functions raise ``sqlite3`` errors and return messages; each store
translates them into its own exceptions at its own boundary.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, TypeVar

__all__ = [
    "FileFormat",
    "Found",
    "connect",
    "current",
    "foreign_message",
    "inspect",
    "migrate",
    "refusal",
    "write_transaction",
]

T = TypeVar("T")
C = TypeVar("C", bound=sqlite3.Connection)


@dataclass(frozen=True, slots=True)
class FileFormat:
    """What makes a SQLite file one of ours: its application id, its name, its migrations.

    ``migrations[n - 1]`` brings a file from schema version ``n - 1`` to ``n``
    (statements separated by ``;``), so the current version is their count.
    """

    noun: str
    application_id: int
    migrations: tuple[str, ...]
    #: Data migrations: ``after[n](conn)`` runs right after migration ``n``'s statements,
    #: in the same transaction (for example, filling a table that migration created).
    after: Mapping[int, Callable[[sqlite3.Connection], None]] = field(default_factory=dict)

    @property
    def version(self) -> int:
        """The schema version this library writes."""
        return len(self.migrations)


class Found(NamedTuple):
    """What an opened file is: its application id, schema version, and how many tables it holds."""

    application_id: int
    version: int
    tables: int


def connect(target: str | Path, busy_timeout: float, factory: type[C]) -> C:
    """Open ``target`` (a path, or a ``file:`` URI given as a str) for explicit transactions.

    The busy timeout is set on the connection; a connection whose set-up fails is closed.
    """
    conn = sqlite3.connect(
        target,
        timeout=busy_timeout,
        isolation_level=None,
        check_same_thread=False,
        factory=factory,
        uri=isinstance(target, str),
    )
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
    except BaseException:
        conn.close()
        raise
    return conn


def inspect(conn: sqlite3.Connection) -> Found:
    """Read what the file is, in one statement."""
    # One statement, one snapshot: another process may be creating this file right now.
    found = conn.execute(
        "SELECT (SELECT application_id FROM pragma_application_id()),"
        " (SELECT user_version FROM pragma_user_version()),"
        " (SELECT count(*) FROM sqlite_master)"
    ).fetchone()
    return Found(int(found[0]), int(found[1]), int(found[2]))


def refusal(path: Path, fmt: FileFormat, found: Found) -> str | None:
    """Why the file at ``path`` must not be opened as ``fmt``, or None when it may be.

    Refused: a file of another application that holds tables, and one of a
    newer schema than this library writes. An empty file is ``fmt``'s to create.
    """
    if found.application_id != fmt.application_id:
        return foreign_message(path, fmt, found.application_id) if found.tables else None
    if found.version > fmt.version:
        return (
            f"{fmt.noun} {path} has schema version {found.version}, newer than "
            f"this effectguard supports ({fmt.version}); upgrade effectguard"
        )
    return None


def foreign_message(path: Path, fmt: FileFormat, application_id: int) -> str:
    """The refusal of a file at ``path`` whose application id is not ``fmt``'s."""
    return (
        f"{path} is a SQLite database but not an effectguard {fmt.noun} (its application id is "
        f"{_tag(application_id)}, an effectguard {fmt.noun}'s is {_tag(fmt.application_id)}); "
        f"it was left as it is: name the {fmt.noun}'s own file"
    )


def current(fmt: FileFormat, found: Found) -> bool:
    """True when the file is already ``fmt`` at the version this library writes."""
    return found.application_id == fmt.application_id and found.version == fmt.version


def migrate(conn: sqlite3.Connection, fmt: FileFormat) -> None:
    """Bring the file to ``fmt.version`` under the write lock, in one transaction.

    Call only after :func:`refusal` found nothing to refuse. A file that is not
    yet ``fmt`` (empty) starts from version 0.
    """

    def work(conn: sqlite3.Connection) -> None:
        # Another process may have migrated while this one waited for the lock.
        found = inspect(conn)
        start = found.version if found.application_id == fmt.application_id else 0
        for number in range(start + 1, fmt.version + 1):
            for statement in fmt.migrations[number - 1].split(";"):
                if statement.strip():
                    conn.execute(statement)
            data = fmt.after.get(number)
            if data is not None:
                data(conn)
        conn.execute(f"PRAGMA user_version = {fmt.version}")
        conn.execute(f"PRAGMA application_id = {fmt.application_id}")

    write_transaction(conn, work)


def write_transaction(
    conn: C, work: Callable[[C], T], check: Callable[[], None] | None = None
) -> T:
    """Run ``work`` in ``BEGIN IMMEDIATE … COMMIT`` and return what it returned.

    ``check`` runs first, under the write lock, so what it checks cannot change
    before ``work`` writes. On any exception the transaction is rolled back and
    the exception re-raised: the connection is never left inside a transaction.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        if check is not None:
            check()
        result = work(conn)
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        raise
    return result


def _tag(application_id: int) -> str:
    """``0x45474C44 ('EGLD')``: an application id, with its four letters when it has them."""
    raw = (application_id & 0xFFFFFFFF).to_bytes(4, "big")
    text = raw.decode("ascii", errors="replace")
    letters = f" ({text!r})" if text.isalnum() else ""
    return f"0x{application_id & 0xFFFFFFFF:08X}{letters}"
