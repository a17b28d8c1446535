"""The SQLite ledger: durable on one host, safe for many threads and processes.

One module, read top to bottom: the files (created 0600, in WAL mode, pinned
by device and inode), the file format and its migrations, the group commit
that lets a process's threads share a transaction, and the ledger itself.

Durability: every commit is made with ``synchronous=FULL`` in WAL mode, so a
claim is on disk, against power loss, before its handler runs. Connections
use ``isolation_level=None``: Python 3.11's ``sqlite3`` would otherwise open an
implicit DEFERRED transaction and read outside the write lock.

The two writes of every guarded call are one statement each. A claim inserts
into the view ``claim_writes``, whose trigger inserts the operation, its claim
in the ledger-wide anchor and its one chained event, and refuses a pruned id;
an outcome inserts into ``row_writes``, whose trigger updates the row only if
it is still the version the writer last saw (its event count and lease token)
and appends the event. A statement is atomic, so neither needs a
``BEGIN IMMEDIATE … COMMIT`` of its own when it is the only write in flight;
every other write is an explicit ``BEGIN IMMEDIATE … COMMIT``.

WAL does not work across hosts or on network file systems: use PostgreSQL there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Generic, NamedTuple, Self, TypeVar

from effectguard._fingerprint import canonical_json, check_operation_id, checked_json, read_json
from effectguard._model import (
    EffectEvent,
    EffectStatus,
    EventType,
    LeaseOwner,
    OperationRecord,
    VerifyProblem,
    VerifyReport,
)
from effectguard.errors import (
    ConfigurationError,
    FencedWriteError,
    InternalError,
    InvalidRequestError,
    LedgerError,
    LedgerLockedError,
    LedgerNotFoundError,
    LedgerSchemaError,
    LedgerUnavailableError,
    OperationNotFoundError,
)
from effectguard.ledger import _chain as chain
from effectguard.ledger import _retention as retention
from effectguard.ledger import _rows as bulk
from effectguard.ledger._chain import AnchorHead, from_micros, to_micros
from effectguard.ledger._protocol import (
    UNSET,
    Changes,
    EventDraft,
    Expect,
    NewOperation,
    ReplayView,
    check_limit,
    describe_mismatch,
)
from effectguard.ledger._resolution import OperatorResolution
from effectguard.ledger._retention import After, BatchPruning, PrunePass, Tombstone
from effectguard.ledger._rows import (
    SQLITE,
    STATUSES,
    build_record,
    overlap_text,
    owner_text,
)
from effectguard.ledger._rows import status as rows_status

__all__ = [
    "APPLICATION_ID",
    "FORMAT",
    "MAX_BUSY_TIMEOUT",
    "SCHEMA_VERSION",
    "FileFormat",
    "SQLiteEffectLedger",
    "connect",
    "create_private_file",
    "current",
    "enable_wal",
    "file_identity",
    "inspect",
    "migrate",
    "refusal",
    "replaced_error",
    "write_transaction",
]

T = TypeVar("T")
C = TypeVar("C", bound=sqlite3.Connection)
rows = SQLITE
_log = logging.getLogger("effectguard")


# -- files ----------------------------------------------------------------------

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


# ---- One SQLite file: connections, format check, migrations, transactions ----


# -- the file format, connections and transactions ---------------------------------


@dataclass(frozen=True, slots=True)
class FileFormat:
    """What makes a SQLite file one of ours: its application id, its name, its migrations.

    ``migrations[n - 1]`` brings a file from schema version ``n - 1`` to ``n``
    (SQL statements, each ending in ``;``), so the current version is their count.
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


def _bind_as_is() -> None:
    """Bind None and bytes without the driver's failed adapter search.

    Python's ``sqlite3`` binds int, float and str directly, but looks for an
    adapter for any other value: for None and bytes (a hash, the many NULL
    columns of a write) that search ends in an AttributeError whose message is
    formatted and dropped, several per write. An adapter that returns the
    value itself binds exactly what it bound before (NULL, the BLOB), found in
    one dictionary look-up. Registered only for a type nobody adapts yet: an
    application's own adapter applies to every connection, as it always did.
    """
    protocol = sqlite3.PrepareProtocol
    as_is: dict[type, Callable[[Any], Any]] = {
        type(None): {}.get,  # {}.get(None) is None: a C call that returns the value
        bytes: bytes.__bytes__,  # the very bytes object
    }
    for kind, adapter in as_is.items():
        if (kind, protocol) not in sqlite3.adapters:
            sqlite3.register_adapter(kind, adapter)


_bind_as_is()


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
            for statement in statements(fmt.migrations[number - 1]):
                conn.execute(statement)
            data = fmt.after.get(number)
            if data is not None:
                data(conn)
        conn.execute(f"PRAGMA user_version = {fmt.version}")
        conn.execute(f"PRAGMA application_id = {fmt.application_id}")

    write_transaction(conn, work)


def statements(script: str) -> Iterator[str]:
    """The statements of ``script``, each complete (a trigger's body keeps its semicolons)."""
    pending = ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n;"):
                yield pending
            pending = ""
    if pending.strip(" \n;"):
        yield pending


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


# ---- One write waiting in the group commit ----


# -- the group commit ----------------------------------------------------------------


class Pending(Generic[T]):
    """One caller's write, waiting for the commit that holds it."""

    __slots__ = ("connect", "done", "error", "future", "lead", "operation_id", "result", "work")

    def __init__(self, work: Callable[[Any], T], operation_id: str | None) -> None:
        self.work = work
        self.operation_id = operation_id
        # Only a caller that waits for another writer needs one (most calls lead their own).
        self.done: threading.Event | None = None
        # A caller on an event loop waits on this instead, and never leads.
        self.future: asyncio.Future[T] | None = None
        self.connect: Callable[[], Any] | None = None
        self.lead = False
        self.result: T | None = None
        self.error: BaseException | None = None


def wake(pending: Pending[Any]) -> None:
    """Wake the thread that waits for ``pending`` (a loop's write has no thread to wake)."""
    if pending.done is not None:
        pending.done.set()


def deliver(batch: list[Pending[Any]]) -> None:
    """Tell each caller of a finished batch: threads one by one, each loop once."""
    loops: dict[asyncio.AbstractEventLoop, list[Pending[Any]]] | None = None
    for pending in batch:
        future = pending.future
        if future is None:
            if pending.done is not None:
                pending.done.set()
        elif loops is None:
            loops = {future.get_loop(): [pending]}
        else:
            loops.setdefault(future.get_loop(), []).append(pending)
    if loops is None:
        return
    for loop, settled in loops.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is left to tell
            loop.call_soon_threadsafe(settle, settled)


def settle(settled: list[Pending[Any]]) -> None:
    """On the loop: each future gets its write's result or error (unless it was cancelled)."""
    for pending in settled:
        future = pending.future
        if future is None or future.done():
            continue
        error = pending.error
        if isinstance(error, StopIteration):  # a future refuses it, as a generator would
            error = RuntimeError(f"a ledger call raised StopIteration: {error!r}")
            error.__cause__ = pending.error
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(pending.result)


def run_alone(conn: Any, pending: Pending[Any]) -> bool:
    """The only write of its transaction; False when it raised (rolled back, nothing to commit)."""
    try:
        pending.result = pending.work(conn)
    except sqlite3.Error:
        raise
    except Exception as exc:  # noqa: BLE001 - the caller's own error, raised in its thread
        rollback(conn)
        pending.error = exc
        return False
    return True


def run_in_savepoint(
    conn: Any, pending: Pending[Any], translate: Callable[[sqlite3.Error], BaseException]
) -> None:
    """One write of several: refused or failed, it is rolled back alone."""
    conn.execute("SAVEPOINT effectguard_write")
    try:
        pending.result = pending.work(conn)
    except Exception as exc:  # noqa: BLE001 - the caller's own error, raised in its thread
        # Fails (and fails the batch) if SQLite already rolled the whole transaction back.
        conn.execute("ROLLBACK TO effectguard_write")
        if isinstance(exc, sqlite3.Error):
            error = translate(exc)
            error.__cause__ = exc
            pending.error = error
        else:
            pending.error = exc
    conn.execute("RELEASE effectguard_write")


def rollback(conn: Any) -> None:
    """Roll back the transaction ``conn`` is in, if any, whatever state it is in."""
    with contextlib.suppress(sqlite3.Error):
        if conn.in_transaction:
            conn.execute("ROLLBACK")


def writer_died(cause: BaseException) -> LedgerUnavailableError:
    """The error of a caller whose batch's writer failed before committing it."""
    return LedgerUnavailableError(
        f"the ledger's writer failed before committing this write ({type(cause).__name__}: "
        f"{cause}); nothing of it was recorded and nothing was dispatched: call again"
    )


# ---- Group commit: one writer commits what its threads and loops queued ----


_log = logging.getLogger("effectguard")


#: The most writes one transaction holds. The writer's Python between two commits holds
#: the interpreter lock: a short batch keeps the event loops it serves from waiting long.
_BATCH = 32


# How long the writer thread waits for a loop's write before it ends.
_IDLE_SECONDS = 30.0


class GroupCommit:
    """One writer at a time for one ledger, committing the queued writes of all its threads.

    ``check(operation_id)`` runs under the write lock before the writes (it
    raises to refuse them all); ``translate(exc)`` turns a driver error into
    the ledger error each caller raises.
    """

    def __init__(
        self,
        check: Callable[[str | None], None],
        translate: Callable[[sqlite3.Error], BaseException],
    ) -> None:
        self._check = check
        self._translate = translate
        self._lock = threading.Lock()
        self._queue: list[Pending[Any]] = []
        self._leading = False
        self._pid = os.getpid()
        # The writer thread, which leads the batches that start with a loop's write.
        self._writer: threading.Thread | None = None
        self._writer_turn = threading.Condition(self._lock)
        self._writer_leads = False
        self._reads: list[Pending[Any]] = []
        self._closed = False
        # The exception the writer thread's end was logged for, so it is logged once.
        self._announced: BaseException | None = None
        #: Transactions committed, and the writes they held (read by tests and the bench).
        self.batches = 0
        self.writes = 0

    def run(
        self,
        connect: Callable[[], Any],
        work: Callable[[Any], T],
        operation_id: str | None,
        *,
        standalone: bool = False,
    ) -> T:
        """Run ``work(conn)`` in a committed transaction and return its result.

        ``connect()`` gives this thread's connection, used only if this thread
        leads a batch. Raises what ``work`` raised, or the ledger error of a
        batch that did not commit. A ``standalone`` work is atomic on its own
        (one statement, or a transaction it opens when it finds none): when no
        other write is queued or being committed, it runs at once, outside any
        batch, and its statement is its own commit.
        """
        if self._pid != _PID[0]:  # os.getpid(), kept by an after-fork hook
            self._forked()
        if standalone:
            alone = False
            try:
                with self._lock:
                    if not self._leading:  # nobody leads: nothing is queued either
                        alone = self._leading = True  # one line: an interrupt hits before or after
                if alone:
                    return self._alone(connect, work, operation_id)
            finally:
                # Also after an interrupt anywhere past taking the role: no write waits forever.
                if alone:
                    with self._lock:
                        self._hand_over()
        return self._queued(connect, work, operation_id)

    def _queued(
        self, connect: Callable[[], Any], work: Callable[[Any], T], operation_id: str | None
    ) -> T:
        """Queue ``work`` for the next batch, leading it when nobody else does (see :meth:`run`)."""
        pending: Pending[T] = Pending(work, operation_id)
        with self._lock:
            self._queue.append(pending)
            if self._leading:
                pending.done = threading.Event()
            else:
                pending.lead = self._leading = True
        # An interrupt may land anywhere up to _lead taking the batch, also after the
        # writer's role was taken or handed over: _withdraw passes it on, so no write waits forever.
        try:
            if pending.done is not None:
                pending.done.wait()
            if pending.lead:
                self._lead(connect, pending)
        except BaseException:
            self._withdraw(pending)
            raise
        if pending.error is not None:
            raise pending.error
        return pending.result  # type: ignore[return-value]  # set before done, error None

    def _alone(
        self, connect: Callable[[], Any], work: Callable[[Any], T], operation_id: str | None
    ) -> T:
        """Run a standalone write that found nobody else writing (:meth:`run` hands the role on).

        Writes queued meanwhile are led by the first of them as soon as this
        one is done, exactly as after a batch.
        """
        # Connect first: the first connection pins the file the check compares against
        # (checked before it, a file another handle just created would look replaced).
        conn = connect()
        self._check(operation_id)
        with conn.in_use:
            result = work(conn)
        self.batches += 1
        self.writes += 1
        return result

    def submit(
        self, connect: Callable[[], Any], work: Callable[[Any], T], operation_id: str | None
    ) -> asyncio.Future[T]:
        """Queue ``work(conn)`` from an event loop; the future is done once its batch committed.

        The future holds what ``work`` returned, or raises what it raised, or
        the ledger error of a batch that did not commit. Its batch is led by
        a thread, never by the loop: the ledger's writer thread (``connect()``
        is called there), or a thread that was already waiting to lead.
        Cancelling the future does not withdraw the write (as when a process
        dies after sending it): it is committed or not with its batch.
        """
        pending: Pending[T] = Pending(work, operation_id)
        pending.future = asyncio.get_running_loop().create_future()
        pending.connect = connect
        if self._pid != os.getpid():
            self._forked()
        with self._lock:
            self._queue.append(pending)
            if not self._leading:
                self._leading = True
                self._hand_to_writer()
        return pending.future

    def submit_read(self, read: Callable[[], T]) -> asyncio.Future[T]:
        """Run ``read()`` in the writer thread, outside any transaction; the future holds its value.

        The writer thread runs the reads queued before it leads its next batch:
        a loop's read waits at most for the batch in progress, and never sees
        a write that is not committed.
        """
        pending: Pending[T] = Pending(lambda _conn: read(), None)
        pending.future = asyncio.get_running_loop().create_future()
        if self._pid != os.getpid():
            self._forked()
        with self._lock:
            self._reads.append(pending)
            self._start_writer()
        return pending.future

    def _hand_to_writer(self) -> None:
        """Under the lock: the writer thread leads the next batch (started if it is not running)."""
        self._writer_leads = True
        self._start_writer()

    def _start_writer(self) -> None:
        """Under the lock: wake the writer thread, started if it is not running.

        When it cannot be started (no thread left to the process), the loops'
        queued calls fail with a ledger error and the threads' writes go on.
        """
        if self._writer is None or not self._writer.is_alive():
            writer = threading.Thread(
                target=self._write_for_loops, name="effectguard-ledger-writer", daemon=True
            )
            try:
                writer.start()
            except BaseException as exc:  # noqa: BLE001 - each loop's caller gets it, below
                self._writer = None
                self._fail_loops(exc, handing_over=self._writer_leads)
                return
            self._writer = writer
        self._writer_turn.notify()

    def _fail_loops(self, exc: BaseException, *, handing_over: bool) -> None:
        """Under the lock: fail every loop's queued call; pass the writer's turn on if it had it."""
        stranded = [pending for pending in self._queue if pending.future is not None]
        stranded += self._reads
        self._queue = [pending for pending in self._queue if pending.future is None]
        self._reads = []
        if handing_over:
            self._writer_leads = False
            self._hand_over()
        for pending in stranded:
            pending.error = writer_died(exc)
            pending.error.__cause__ = exc
        deliver(stranded)

    def close(self) -> None:
        """Let the writer thread end once it has no batch to lead (the ledger is closing)."""
        if self._pid != os.getpid():
            self._forked()
        with self._lock:
            self._closed = True
            self._writer_turn.notify_all()

    def _hand_over(self) -> None:
        """Under the lock: the first write queued leads the next batch, or nobody leads."""
        if not self._queue:
            self._leading = False
        elif self._queue[0].future is not None:
            self._hand_to_writer()
        else:
            self._queue[0].lead = True
            wake(self._queue[0])

    def _write_for_loops(self) -> None:
        """The writer thread: lead each batch handed to it, for as long as the process runs.

        Should it end anyway (an error outside any batch), every loop's write
        still queued fails with a ledger error, and the next one starts it again.
        """
        holding = False  # between taking its turn and handing the next one over
        try:
            while True:
                with self._lock:
                    if not self._await_turn():  # the next loop's write starts another
                        self._writer = None
                        return
                    # One pass of the reads queued so far, then one batch if it is the
                    # writer's turn: reads and writes each wait for one pass of the other.
                    reads, self._reads = self._reads, []
                    connect = self._take_turn() if self._writer_leads else None
                    holding = connect is not None
                _read_all(reads)
                if connect is not None:
                    try:
                        self._lead(connect, None)
                    except Exception:  # noqa: BLE001 - each caller of the batch has its error
                        _log.debug("effectguard: a writer's batch failed", exc_info=True)
                    finally:
                        holding = False  # _lead handed the next turn over, whatever happened
        except BaseException as exc:  # noqa: BLE001 - a thread of ours: its end is reported
            self._writer_ended(exc, holding=holding)

    def _take_turn(self) -> Callable[[], Any] | None:
        """Under the lock: take the writer's turn; the connect of a loop's write to lead with.

        The turn is the writer's only while a loop's write is first in line, so
        there always is one; should there be none, the turn is handed over at once.
        """
        self._writer_leads = False
        connect = next((pending.connect for pending in self._queue if pending.connect), None)
        if connect is None:
            self._hand_over()
        return connect

    def _await_turn(self) -> bool:
        """Under the lock: wait for reads or the writer's turn; False once idle, or closed."""
        while not (self._writer_leads or self._reads):
            if self._closed or not self._writer_turn.wait(_IDLE_SECONDS):
                return self._writer_leads or bool(self._reads)
        return True

    def _writer_ended(self, exc: BaseException, *, holding: bool) -> None:
        """The writer thread is ending: fail the loops' queued writes, pass on its turn."""
        if self._announced is not exc:
            self._announce_end(exc)
        self._announced = None
        with self._lock:
            self._writer = None
            self._fail_loops(exc, handing_over=holding or self._writer_leads)

    def _announce_end(self, exc: BaseException) -> None:
        """Log that the writer thread is ending, before any caller of its batch is told."""
        self._announced = exc
        _log.warning(
            "effectguard: the ledger's writer thread ended (%s: %s); the writes it had not "
            "taken failed with a ledger error, and the next write starts it again",
            type(exc).__name__,
            exc,
        )

    def _withdraw(self, pending: Pending[Any]) -> None:
        """A waiting caller was interrupted: take its write back, or pass on the writer's role.

        A write a leader has already taken into its batch is committed or not
        with that batch (as when a process dies after its write was sent).
        """
        with self._lock:
            if not any(queued is pending for queued in self._queue):
                return
            self._queue = [queued for queued in self._queue if queued is not pending]
            if pending.lead:
                self._hand_over()

    def _forked(self) -> None:
        """In a child after ``fork()``: the parent's writer and its queue are not this process's."""
        self._lock = threading.Lock()
        self._queue = []
        self._leading = False
        self._writer = None
        self._writer_turn = threading.Condition(self._lock)
        self._writer_leads = False
        self._reads = []
        self._pid = os.getpid()

    def _lead(self, connect: Callable[[], Any], mine: Pending[Any] | None) -> None:
        """Commit everything queued, then hand the writer's role to the next caller waiting."""
        batch: list[Pending[Any]] = []
        try:
            with self._lock:
                queue = self._queue
                batch, self._queue = (
                    (queue, []) if len(queue) <= _BATCH else (queue[:_BATCH], queue[_BATCH:])
                )
            conn = connect()
            with conn.in_use:
                self._commit(conn, batch)
        except BaseException as exc:
            # Nothing of the batch committed: every other caller in it learns so now.
            for pending in batch:
                if pending is not mine:
                    pending.error = writer_died(exc)
                    pending.error.__cause__ = exc
            if mine is None and not isinstance(exc, Exception):
                # The writer thread ends with this: logged before its callers are told, below.
                self._announce_end(exc)
            raise
        finally:
            with self._lock:
                self._hand_over()
            deliver(batch)

    def _commit(self, conn: Any, batch: list[Pending[Any]]) -> None:
        """One transaction: each write in a savepoint of its own when there are several."""
        try:
            conn.execute("BEGIN IMMEDIATE")
            if self._refused(batch):
                rollback(conn)
                return
            if len(batch) == 1:
                if not run_alone(conn, batch[0]):
                    return
            else:
                for pending in batch:
                    run_in_savepoint(conn, pending, self._translate)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            rollback(conn)
            for pending in batch:
                pending.error = self._translate(exc)
                pending.error.__cause__ = exc
            return
        except BaseException:
            rollback(conn)
            raise
        self.batches += 1
        self.writes += sum(1 for pending in batch if pending.error is None)

    def _refused(self, batch: list[Pending[Any]]) -> bool:
        """Run the check under the lock; when it refuses, give each caller its own refusal."""
        try:
            self._check(batch[0].operation_id)
        except Exception:  # noqa: BLE001 - each caller gets the check's error, below
            for pending in batch:
                try:
                    self._check(pending.operation_id)
                except Exception as exc:  # noqa: BLE001 - raised in its caller's thread
                    pending.error = exc
                else:
                    pending.error = writer_died(RuntimeError("the ledger file check failed"))
            return True
        return False


def _read_all(reads: list[Pending[Any]]) -> None:
    """Run each read, keeping its value or its error, then tell the loops."""
    for pending in reads:
        try:
            pending.result = pending.work(None)
        except Exception as exc:  # noqa: BLE001 - raised in its caller's task
            pending.error = exc
        except BaseException as exc:  # noqa: BLE001 - the writer thread goes on serving
            pending.error = writer_died(exc)
            pending.error.__cause__ = exc
    deliver(reads)


# ---- The claims anchor's statements ----


# -- the claims anchor ---------------------------------------------------------------
# The hashing is the chain module's, shared with PostgreSQL. Each claim appends its number
# and operation id in its own commit (the claim's trigger); the running hash over the
# claims is filled in later, in one pass over those still without one (anchor_pending):
# when a head is exported, before a prune, after a bulk load. verify() computes the same
# hashes in memory for the claims not yet filled in.

_LAST_ANCHORED = (
    "SELECT seq, running FROM claims WHERE running IS NOT NULL ORDER BY seq DESC LIMIT 1"
)
#: The claims after a number, each with its operation's first event hash (or its tombstone's).
_CLAIMS_AFTER = (
    "SELECT c.seq, c.operation_id, coalesce(e.hash, t.first_hash) FROM claims AS c"
    " LEFT JOIN events AS e ON e.operation_id = c.operation_id AND e.seq = 1"
    " LEFT JOIN tombstones AS t ON t.operation_id = c.operation_id"
    " WHERE c.seq > ? ORDER BY c.seq"
)
_FILL = "UPDATE claims SET running = ? WHERE seq = ?"
_INSERT_CLAIM = "INSERT INTO claims (seq, operation_id, running) VALUES (?, ?, ?)"
#: Every claim in order, whether its operation exists, and its first event's hash.
# A pruned operation's tombstone stands for its row and keeps its first event's hash.
_VERIFY_CLAIMS = (
    "SELECT c.seq, c.operation_id, c.running,"
    " o.operation_id IS NOT NULL OR t.operation_id IS NOT NULL, coalesce(e.hash, t.first_hash)"
    " FROM claims AS c LEFT JOIN operations AS o ON o.operation_id = c.operation_id"
    " LEFT JOIN events AS e ON e.operation_id = c.operation_id AND e.seq = 1"
    " LEFT JOIN tombstones AS t ON t.operation_id = c.operation_id ORDER BY c.seq"
)
# No index on claims.operation_id (it would cost every claim): a set difference instead.
_UNANCHORED = (
    "SELECT u.operation_id, e.hash FROM (SELECT operation_id FROM operations"
    " EXCEPT SELECT operation_id FROM claims) AS u"
    " LEFT JOIN events AS e ON e.operation_id = u.operation_id AND e.seq = 1"
    " ORDER BY u.operation_id"
)


def _last_anchored(conn: sqlite3.Connection) -> tuple[int, bytes]:
    """The number and running hash of the last claim whose running hash is filled in."""
    last = conn.execute(_LAST_ANCHORED).fetchone()
    return (0, chain.START) if last is None else (int(last[0]), bytes(last[1]))


def anchor_pending(conn: sqlite3.Connection) -> AnchorHead:
    """Fill in the running hash of every claim that has none yet, under the write lock.

    Returns the anchor's head. The claims without one always follow those with
    one, since they are filled in order.
    """
    last, running = _last_anchored(conn)
    filled = []
    for seq, operation_id, first in conn.execute(_CLAIMS_AFTER, (last,)).fetchall():
        running = chain.advance(running, operation_id, b"" if first is None else bytes(first))
        filled.append((running, seq))
        last = seq
    conn.executemany(_FILL, filled)
    return AnchorHead(last, running)


def pending_head(conn: sqlite3.Connection) -> AnchorHead:
    """The head :func:`anchor_pending` would leave, computed without writing (a read)."""
    last, running = _last_anchored(conn)
    for seq, operation_id, first in conn.execute(_CLAIMS_AFTER, (last,)):
        running = chain.advance(running, operation_id, b"" if first is None else bytes(first))
        last = seq
    return AnchorHead(last, running)


def anchor_unanchored(conn: sqlite3.Connection) -> None:
    """Anchor every operation with no claim in the anchor, in operation id order.

    Run by migration 3 (which created the anchor) and after a bulk load; the
    claims already there are filled in first, so the new ones extend their hash.
    """
    head = anchor_pending(conn) if _has_lazy_anchor(conn) else _eager_head(conn)
    seq, running = head.count, head.running
    anchored = []
    for operation_id, first in conn.execute(_UNANCHORED).fetchall():
        seq += 1
        running = chain.advance(running, operation_id, b"" if first is None else bytes(first))
        anchored.append((seq, operation_id, running))
    conn.executemany(_INSERT_CLAIM, anchored)


def _eager_head(conn: sqlite3.Connection) -> AnchorHead:
    last = conn.execute("SELECT seq, running FROM claims ORDER BY seq DESC LIMIT 1").fetchone()
    return AnchorHead(0, chain.START) if last is None else AnchorHead(int(last[0]), bytes(last[1]))


def _has_lazy_anchor(conn: sqlite3.Connection) -> bool:
    """Whether the file has migration 6's claims table, whose running hash may be NULL."""
    return bool(
        conn.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'view' AND name = 'claim_writes'"
        ).fetchone()[0]
    )


# -- retention: settled operations pruned to tombstones, in short batches ----------


_STONE_COLUMNS = (
    "operation_id, contract, contract_version, fingerprint, status, provider_operation_id,"
    " event_count, event_head, first_hash, pruned_us, digest"
)


_SELECT_STONE = f"SELECT {_STONE_COLUMNS} FROM tombstones WHERE operation_id = ?"


_ALL_STONES = (
    f"SELECT {', '.join('t.' + c.strip() for c in _STONE_COLUMNS.split(','))},"
    " o.operation_id IS NOT NULL FROM tombstones AS t"
    " LEFT JOIN operations AS o ON o.operation_id = t.operation_id ORDER BY t.operation_id"
)


_INSERT_STONE = f"INSERT INTO tombstones ({_STONE_COLUMNS}) VALUES ({','.join('?' * 11)})"


def _stone(row: Sequence[Any]) -> Tombstone:
    values = list(row[:11])
    values[4] = EffectStatus(values[4])
    values[7], values[8], values[10] = bytes(values[7]), bytes(values[8]), bytes(values[10])
    values[9] = from_micros(values[9])
    return Tombstone(*values)


def refuse_tombstoned(conn: Connection, operation_id: str, fingerprint: str) -> None:
    """Raise EffectPruned or OperationConflictError if ``operation_id`` was pruned."""
    row = conn.execute(_SELECT_STONE, (operation_id,)).fetchone()
    if row is not None:
        raise retention.refusal(_stone(row), fingerprint)


def refuse_loaded_tombstoned(conn: Connection) -> None:
    """InvalidRequestError if a bulk load wrote an operation under a pruned id (rolled back)."""
    row = conn.execute(
        "SELECT o.operation_id FROM operations AS o JOIN tombstones AS t"
        " ON t.operation_id = o.operation_id LIMIT 1"
    ).fetchone()
    if row is not None:
        msg = f"cannot load operation {row[0]!r}: it was pruned and its tombstone stands"
        raise InvalidRequestError(msg)


def tombstone_problems(conn: Connection) -> list[VerifyProblem]:
    """Every tombstone's problems (edited, or a row back under its id)."""
    problems: list[VerifyProblem] = []
    for row in conn.execute(_ALL_STONES):
        problems.extend(retention.check_tombstone(_stone(row), bool(row[11])))
    return problems


class SQLitePruning(BatchPruning["Connection"]):
    """The retention methods of :class:`~effectguard.ledger.sqlite.SQLiteEffectLedger`.

    :meth:`prune` is :class:`~effectguard.ledger.pruning.BatchPruning`'s; each page
    is one ``BEGIN IMMEDIATE`` write transaction (a plain read for a dry run).
    """

    _clock: Callable[[], float]
    if TYPE_CHECKING:  # provided by the ledger's file handle

        def _write(self, work: Callable[[Connection], T], operation_id: str | None = ...) -> T: ...
        def _read(self, work: Callable[[Connection], T], missing: T) -> T: ...

    def tombstone(self, operation_id: str) -> Tombstone | None:
        """The tombstone a pruned ``operation_id`` left, or None if it was never pruned."""

        def work(conn: Connection) -> Tombstone | None:
            row = conn.execute(_SELECT_STONE, (operation_id,)).fetchone()
            return None if row is None else _stone(row)

        return self._read(work, None)

    def tombstones(self) -> dict[str, Tombstone]:
        """Every tombstone, by operation id."""

        def work(conn: Connection) -> dict[str, Tombstone]:
            return {row[0]: _stone(row) for row in conn.execute(_ALL_STONES)}

        return self._read(work, {})

    def _prune_now(self) -> float:
        return self._clock()

    def _prune_page(self, conn: Connection, plan: PrunePass, after: After) -> list[OperationRecord]:
        marks = ",".join("?" * len(plan.statuses))
        select = (
            f"SELECT {_COLUMNS} FROM operations WHERE status IN ({marks}) AND updated_us < ?"
            " AND (updated_us, operation_id) > (?, ?) ORDER BY updated_us, operation_id LIMIT ?"
        )
        start = (-1, "") if after is None else (to_micros(after[0]), after[1])
        params = (
            *[s.value for s in plan.statuses],
            to_micros(plan.cut.before),
            *start,
            retention.BATCH,
        )
        at_us = to_micros(plan.cut.now)
        return [SQLITE.record(row, at_us) for row in conn.execute(select, params).fetchall()]

    def _prune_records(
        self, conn: Connection, records: Sequence[OperationRecord], plan: PrunePass
    ) -> None:
        for record in records:
            _prune_one(conn, record, plan.cut, plan.archive)

    def _prune_transaction(self, work: Callable[[Connection], T], *, write: bool) -> T | None:
        return self._write(work) if write else self._read(work, None)


def _prune_one(
    conn: Connection, record: OperationRecord, cut: retention.CutOff, target: IO[str] | None
) -> None:
    events = [
        SQLITE.event(row)
        for row in conn.execute(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE operation_id = ? ORDER BY seq",
            (record.operation_id,),
        )
    ]
    first = bytes(events[0].hash) if events else b""
    stone = retention.tombstone_of(record, first, cut.now)
    if target is not None:
        retention.write_archived(target, record, events, stone)
    document = stone.document()
    conn.execute(
        _INSERT_STONE,
        (
            stone.operation_id,
            stone.contract,
            stone.contract_version,
            stone.fingerprint,
            stone.status.value,
            stone.provider_operation_id,
            stone.event_count,
            stone.event_head,
            stone.first_hash,
            document["pruned_us"],
            stone.digest,
        ),
    )
    conn.execute("DELETE FROM events WHERE operation_id = ?", (record.operation_id,))
    conn.execute("DELETE FROM operations WHERE operation_id = ?", (record.operation_id,))


# ---- The file's format as data: application id, schema, migrations ----


# -- the ledger file's format: application id, schema, migrations --------------------

#: ``PRAGMA application_id`` of every effectguard ledger file ("EGLD").
APPLICATION_ID = 0x45474C44

MIGRATIONS: tuple[str, ...] = (
    # 1: operations and their hash-chained events.
    """
    CREATE TABLE operations (
        operation_id TEXT PRIMARY KEY,
        contract TEXT NOT NULL,
        contract_version INTEGER NOT NULL,
        fingerprint TEXT NOT NULL,
        provider_key TEXT,
        status TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        attempt_budget INTEGER NOT NULL,
        arguments TEXT NOT NULL,
        output TEXT,
        provider_operation_id TEXT,
        reason TEXT,
        evidence TEXT,
        lease_token TEXT,
        lease_owner TEXT,
        lease_expires_us INTEGER,
        overlap TEXT,
        created_us INTEGER NOT NULL,
        updated_us INTEGER NOT NULL,
        first_dispatched_us INTEGER NOT NULL,
        event_count INTEGER NOT NULL,
        event_head BLOB NOT NULL
    );
    CREATE TABLE events (
        operation_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        type TEXT NOT NULL,
        from_status TEXT,
        to_status TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        at_us INTEGER NOT NULL,
        evidence TEXT,
        hash BLOB NOT NULL,
        PRIMARY KEY (operation_id, seq)
    ) WITHOUT ROWID;
    """,
    # 2: operator listings by status or contract stay fast on large ledgers.
    """
    CREATE INDEX operations_by_status ON operations (status, updated_us);
    CREATE INDEX operations_by_contract ON operations (contract, updated_us);
    CREATE INDEX operations_by_update ON operations (updated_us);
    """,
    # 3: events commit to the row fields they set; every claim is anchored ledger-wide
    # (the operations already there are anchored right after, in the same transaction).
    """
    ALTER TABLE events ADD COLUMN commits TEXT;
    CREATE TABLE claims (
        seq INTEGER PRIMARY KEY,
        operation_id TEXT NOT NULL,
        running BLOB NOT NULL
    );
    """,
    # 4: the operations an operator lists during an incident (neither in flight nor
    # settled) are read from one small index holding every column, never from the
    # table; a call that goes DISPATCHED -> CONFIRMED or REJECTED never touches it.
    """
    CREATE INDEX operations_needing_attention ON operations (status, updated_us,
        operation_id, contract, contract_version, fingerprint, provider_key, attempts,
        attempt_budget, arguments, output, provider_operation_id, reason, evidence,
        lease_token, lease_owner, lease_expires_us, overlap, created_us,
        first_dispatched_us, event_count, event_head)
        WHERE status IN ('PREPARED', 'OUTCOME_UNKNOWN', 'RECONCILING', 'QUARANTINED');
    """,
    # 5: the tombstones of pruned operations.
    """
    CREATE TABLE tombstones (
        operation_id TEXT PRIMARY KEY,
        contract TEXT NOT NULL,
        contract_version INTEGER NOT NULL,
        fingerprint TEXT NOT NULL,
        status TEXT NOT NULL,
        provider_operation_id TEXT,
        event_count INTEGER NOT NULL,
        event_head BLOB NOT NULL,
        first_hash BLOB NOT NULL,
        pruned_us INTEGER NOT NULL,
        digest BLOB NOT NULL
    ) WITHOUT ROWID;
    """,
    # 6 (0.1.0's lean writes): each of a guarded call's two writes is one statement, into
    # a view whose trigger writes the row, its event and (for a claim) its anchor entry.
    # The anchor's running hash is filled in later, in batches (anchor_pending), so a
    # claim appends only its number and id. The listing indexes every call paid for go:
    # only the operations needing attention keep one, and its condition is written as
    # comparisons, which cost SQLite a fraction of an IN list on every write.
    """
    DROP INDEX operations_by_status;
    DROP INDEX operations_by_contract;
    DROP INDEX operations_by_update;
    DROP INDEX operations_needing_attention;
    CREATE INDEX operations_needing_attention ON operations (status, updated_us,
        operation_id, contract, contract_version, fingerprint, provider_key, attempts,
        attempt_budget, arguments, output, provider_operation_id, reason, evidence,
        lease_token, lease_owner, lease_expires_us, overlap, created_us,
        first_dispatched_us, event_count, event_head)
        WHERE status <> 'DISPATCHED' AND status <> 'CONFIRMED' AND status <> 'REJECTED';
    CREATE TABLE claims_v6 (
        seq INTEGER PRIMARY KEY,
        operation_id TEXT NOT NULL,
        running BLOB
    );
    INSERT INTO claims_v6 (seq, operation_id, running)
        SELECT seq, operation_id, running FROM claims ORDER BY seq;
    DROP TABLE claims;
    ALTER TABLE claims_v6 RENAME TO claims;
    CREATE VIEW claim_writes AS SELECT operation_id, contract, contract_version,
        fingerprint, provider_key, attempt_budget, arguments, lease_token, lease_owner,
        lease_expires_us, created_us, event_head, NULL AS commits FROM operations;
    CREATE TRIGGER claim_writes_insert INSTEAD OF INSERT ON claim_writes BEGIN
        SELECT RAISE(ABORT, 'effectguard: pruned')
            WHERE EXISTS (SELECT 1 FROM tombstones WHERE operation_id = NEW.operation_id);
        INSERT INTO operations (operation_id, contract, contract_version, fingerprint,
            provider_key, status, attempts, attempt_budget, arguments, lease_token,
            lease_owner, lease_expires_us, created_us, updated_us, first_dispatched_us,
            event_count, event_head)
        VALUES (NEW.operation_id, NEW.contract, NEW.contract_version, NEW.fingerprint,
            NEW.provider_key, 'DISPATCHED', 1, NEW.attempt_budget, NEW.arguments,
            NEW.lease_token, NEW.lease_owner, NEW.lease_expires_us, NEW.created_us,
            NEW.created_us, NEW.created_us, 1, NEW.event_head);
        INSERT INTO claims (operation_id) VALUES (NEW.operation_id);
        INSERT INTO events (operation_id, seq, type, from_status, to_status, attempt, at_us,
            evidence, hash, commits)
        VALUES (NEW.operation_id, 1, 'claimed', NULL, 'DISPATCHED', 1, NEW.created_us, NULL,
            NEW.event_head, NEW.commits);
    END;
    CREATE VIEW row_writes AS SELECT operation_id, event_count AS expect_count,
        lease_token AS expect_token, status, attempts, attempt_budget, output,
        provider_operation_id, reason, evidence, lease_token, lease_owner, lease_expires_us,
        NULL AS keep_expiry, overlap, updated_us, event_count, event_head, NULL AS type,
        NULL AS from_status, NULL AS to_status, NULL AS attempt, NULL AS event_evidence,
        NULL AS commits FROM operations;
    CREATE TRIGGER row_writes_insert INSTEAD OF INSERT ON row_writes BEGIN
        UPDATE operations SET status = NEW.status, attempts = NEW.attempts,
            attempt_budget = NEW.attempt_budget, output = NEW.output,
            provider_operation_id = NEW.provider_operation_id, reason = NEW.reason,
            evidence = NEW.evidence, lease_token = NEW.lease_token,
            lease_owner = NEW.lease_owner,
            lease_expires_us = CASE WHEN NEW.keep_expiry THEN lease_expires_us
                ELSE NEW.lease_expires_us END,
            overlap = NEW.overlap, updated_us = NEW.updated_us,
            event_count = NEW.event_count, event_head = NEW.event_head
        WHERE operation_id = NEW.operation_id AND event_count = NEW.expect_count
            AND lease_token IS NEW.expect_token
            AND (NOT NEW.keep_expiry OR lease_expires_us IS NEW.lease_expires_us);
        SELECT RAISE(ABORT, 'effectguard: moved') WHERE changes() = 0;
        INSERT INTO events (operation_id, seq, type, from_status, to_status, attempt, at_us,
            evidence, hash, commits)
        VALUES (NEW.operation_id, NEW.event_count, NEW.type, NEW.from_status, NEW.to_status,
            NEW.attempt, NEW.updated_us, NEW.event_evidence, NEW.event_head, NEW.commits);
    END;
    """,
)


#: The condition of the one listing index, written into a listing of those statuses so
#: SQLite uses the index (it must find the index's terms in the query, word for word).
NEEDING_ATTENTION = "status <> 'DISPATCHED' AND status <> 'CONFIRMED' AND status <> 'REJECTED'"
#: The statuses that condition holds for.
ATTENTION_STATUSES = frozenset(
    status.value
    for status in EffectStatus
    if status not in (EffectStatus.DISPATCHED, EffectStatus.CONFIRMED, EffectStatus.REJECTED)
)
if NEEDING_ATTENTION not in MIGRATIONS[5]:
    _msg = "the listing's condition is out of step with migration 6's index"
    raise TypeError(_msg)

#: The schema version this library writes; older files are migrated forward on open.
SCHEMA_VERSION = len(MIGRATIONS)
#: The migration that created the claims anchor.
ANCHOR_MIGRATION = 3
#: The migration after which a claim's running hash is filled in later (anchor_pending).
_LAZY_ANCHOR_MIGRATION = 6


# -- one ledger file as a handle holds it ----------------------------------------------


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


#: This process's pid, kept current across fork(): a connection is never used in a child.
_PID = [os.getpid()]
os.register_at_fork(after_in_child=lambda: _PID.__setitem__(0, os.getpid()))


class LedgerFile:
    """Connections to one ledger file, and the checks every connection and write makes."""

    path: Path
    _path_text: str
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
        try:
            stat = os.stat(self._path_text)  # noqa: PTH116 - the path as SQLite opened it, a str
        except FileNotFoundError:
            found = None
        else:
            found = (stat.st_dev, stat.st_ino)
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
        local = self._local
        conn: Connection | None = getattr(local, "conn", None)
        if conn is not None and local.pid == _PID[0] and not self._closed:
            return conn
        if self._closed:
            msg = f"ledger {self.path} is closed"
            raise LedgerUnavailableError(msg)
        # A connection inherited across fork() must never be used by the child.
        if not self.path.exists():
            if not write:
                msg = f"no ledger at {self.path} (reads never create one)"
                raise LedgerNotFoundError(msg)
            self._create_file()
        conn = self._connect()
        local.conn = conn
        local.pid = os.getpid()
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

    def _write(
        self,
        work: Callable[[Connection], T],
        operation_id: str | None = None,
        *,
        standalone: bool = False,
    ) -> T:
        if self.read_only or self._closed:
            self._writable(operation_id)
        # Threads' writes share transactions (the group commit); the file is checked before
        # each, so a file replaced while a write waited is seen too.
        try:
            return self._group.run(self._open_for_write, work, operation_id, standalone=standalone)
        except sqlite3.Error as exc:
            raise self._translated(exc) from exc

    def _open_for_write(self) -> Connection:
        # _open's first lines: this thread's connection, opened in this process, on every write.
        local = self._local
        conn: Connection | None = getattr(local, "conn", None)
        if conn is not None and local.pid == _PID[0] and not self._closed:
            return conn
        return self._open(write=True)

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


# ---- The rows this ledger wrote last, and the ledger itself ----


#: The ledger's file format (the shared opening and migration code reads it).
FORMAT = FileFormat(
    "ledger", APPLICATION_ID, MIGRATIONS, after={ANCHOR_MIGRATION: anchor_unanchored}
)


# -- the ledger -------------------------------------------------------------------------

_SYNCHRONOUS = frozenset({"FULL", "EXTRA", "NORMAL"})
# Page cache while bulk-loading: 256 MiB (a negative cache_size is KiB).
_BULK_CACHE_KIB = -262_144

_COLUMNS = ", ".join(rows.operation_columns)
_EVENT_COLUMNS = ", ".join(rows.event_columns)
_SELECT_ONE = f"SELECT {_COLUMNS} FROM operations WHERE operation_id = ?"
# The row and the commitments of its last event, in one read: what a replay checks.
_SELECT_CHECKED = (
    f"SELECT {', '.join('o.' + name for name in rows.operation_columns)}, e.commits"
    " FROM operations AS o LEFT JOIN events AS e"
    " ON e.operation_id = o.operation_id AND e.seq = o.event_count WHERE o.operation_id = ?"
)
# What a replay returns, and the commitments its output is checked against: no record built.
_SELECT_REPLAY = (
    "SELECT o.status, o.fingerprint, o.attempts, o.output, o.provider_operation_id, o.reason,"
    " o.evidence, e.commits FROM operations AS o LEFT JOIN events AS e"
    " ON e.operation_id = o.operation_id AND e.seq = o.event_count WHERE o.operation_id = ?"
)
_COMMITMENTS = (
    "SELECT commits FROM events WHERE operation_id = ? AND commits IS NOT NULL ORDER BY seq"
)
_INSERT_EVENT = f"INSERT INTO events ({_EVENT_COLUMNS}) VALUES ({','.join('?' * 10)})"
# Every column but the key, in column order, then the key.
_UPDATE_OPERATION = (
    f"UPDATE operations SET {', '.join(f'{name} = ?' for name in rows.operation_columns[1:])}"
    " WHERE operation_id = ?"
)
_PLACES = ",".join("?" * len(rows.operation_columns))
# A bulk load must fail on an id that is taken, not skip it.
_INSERT_LOADED = f"INSERT INTO operations ({_COLUMNS}) VALUES ({_PLACES})"
_VERIFY_HEADS = (
    f"SELECT operation_id, event_count, event_head, status, {', '.join(chain.HEAD_COLUMNS)}"
    " FROM operations ORDER BY operation_id"
)
_CLAIM = f"INSERT INTO claim_writes VALUES ({','.join('?' * 13)})"
_TOMBSTONED = "SELECT 1 FROM tombstones WHERE operation_id = ?"
# A claim's entry in the anchor; its running hash is filled in later (anchor_pending).
_ANCHOR_CLAIM = "INSERT INTO claims (operation_id) VALUES (?)"
_ROW_WRITE = f"INSERT INTO row_writes VALUES ({','.join('?' * 24)})"
_TOKEN = rows.operation_columns.index("lease_token")
_EXPIRES = rows.operation_columns.index("lease_expires_us")
_MICROS = 1_000_000
#: What :func:`~effectguard.ledger._chain.from_micros` adds microseconds to.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DISPATCHED = EffectStatus.DISPATCHED
_CLAIMED_TEXT = EventType.CLAIMED.value
_DIGEST = 16  # hex digits of a fingerprint a claim commits to (chain.commits_of's rule)
_quoted: Callable[[str], str] = (
    getattr(json.encoder, "c_encode_basestring", None) or json.encoder.py_encode_basestring
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


def _select(conn: Connection, operation_id: str) -> Sequence[Any] | None:
    """The operation's stored row, or None."""
    row: Sequence[Any] | None = conn.execute(_SELECT_ONE, (operation_id,)).fetchone()
    return row


class SQLiteEffectLedger(LedgerFile, OperatorResolution, SQLitePruning):
    """An :class:`~effectguard.ledger.EffectLedger` in one SQLite file.

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
        self._path_text = os.fspath(self.path)
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
        self._group = GroupCommit(self._check_file, self._translated)
        if self.path.exists():
            self._open(write=False)
        elif not self._create:
            msg = f"no ledger at {self.path} (reads never create one)"
            raise LedgerNotFoundError(msg)

    def __repr__(self) -> str:
        return f"SQLiteEffectLedger({str(self.path)!r})"

    def _now_us(self, now: float | None) -> int:
        return round((self._clock() if now is None else now) * _MICROS)

    # -- the writes of every guarded call ------------------------------------------------

    def claim(
        self, operation: NewOperation, *, now: float | None = None
    ) -> tuple[OperationRecord, bool]:
        """See :meth:`EffectLedger.claim`."""
        now_us = round((self._clock() if now is None else now) * _MICROS)  # _now_us, inline
        if operation.awaiting_approval:
            return self._write(self._requesting(operation, now_us), operation.operation_id)
        work = self._claiming(operation, now_us)
        return self._write(work, operation.operation_id, standalone=True)

    async def claim_async(
        self, operation: NewOperation, *, now: float | None = None
    ) -> tuple[OperationRecord, bool]:
        """:meth:`claim` from an event loop: the ledger's writer thread commits it."""
        if operation.awaiting_approval:
            work = self._requesting(operation, self._now_us(now))
        else:
            work = self._claiming(operation, self._now_us(now))
        return await self._write_async(work, operation.operation_id)

    def _requesting(
        self, operation: NewOperation, now_us: int
    ) -> Callable[[Connection], tuple[OperationRecord, bool]]:
        """The work of a claim that records a request unsent, to wait for a person's approval.

        The same commitments, anchor entry and tombstone refusal as any claim;
        a request found in its way is returned as a claim returns it.
        """
        values, event_rows = rows.created(operation, now_us)
        operation_id = operation.operation_id

        def work(conn: Connection) -> tuple[OperationRecord, bool]:
            if conn.execute(_TOMBSTONED, (operation_id,)).fetchone() is not None:
                refuse_tombstoned(conn, operation_id, operation.fingerprint)
            try:
                conn.execute(_INSERT_LOADED, values)
            except sqlite3.IntegrityError as exc:
                return self._found(conn, operation, now_us, exc), False
            conn.executemany(_INSERT_EVENT, event_rows)
            conn.execute(_ANCHOR_CLAIM, (operation_id,))
            return rows.record(values, now_us), True

        return work

    def _claiming(
        self, operation: NewOperation, now_us: int
    ) -> Callable[[Connection], tuple[OperationRecord, bool]]:
        """The claim's work, built on the caller's thread: nothing in it depends on what is stored.

        The claim's event and its commitments are written here, as text, in
        the form :func:`~effectguard.ledger._chain.commits_of` and
        :func:`~effectguard.ledger._chain.document_text` define (a test holds
        the two to the same bytes).
        """
        lease = operation.lease
        token = lease.token
        last = _LAST_OWNER  # the owner of this process's claims, its text: no call
        owner = last[1] if lease.owner is last[0] else _owner_text(lease.owner)
        arguments = operation.arguments_json
        if arguments is None:
            arguments = canonical_json(dict(operation.arguments))
        key = operation.provider_key
        fingerprint = operation.fingerprint
        covered = chain.BY_FINGERPRINT if operation.fingerprinted else chain.digest(arguments) or ""
        commits = (
            f'{{"arguments":{_quoted(covered)},'
            f'"attempt_budget":{operation.attempt_budget:d},"attempts":1,'
            f'"fingerprint":{_quoted(fingerprint[:_DIGEST])},'
            f'"lease":{_quoted(chain.lease_commitment(token, owner) or "")},'
            f'"provider_key":{"null" if key is None else _quoted(key)},"v":2}}'
        )
        head = chain.chain_hash(
            None,
            chain.document_text(
                operation.operation_id,
                1,
                EventType.CLAIMED,
                None,
                _DISPATCHED,
                1,
                now_us,
                None,
                commits,
            ),
        )
        expires = now_us + round(lease.seconds * _MICROS)
        values = (
            operation.operation_id,
            operation.contract,
            operation.contract_version,
            fingerprint,
            key,
            operation.attempt_budget,
            arguments,
            token,
            owner,
            expires,
            now_us,
            head,
            commits,
        )

        def work(conn: Connection) -> tuple[OperationRecord, bool]:
            try:
                conn.execute(_CLAIM, values)
            except sqlite3.IntegrityError as exc:
                return self._found(conn, operation, now_us, exc), False
            created = _EPOCH + timedelta(0, 0, now_us)  # from_micros, inline
            record = build_record(
                operation.operation_id,
                operation.contract,
                operation.contract_version,
                fingerprint,
                key,
                _DISPATCHED,
                1,
                operation.attempt_budget,
                operation.arguments,
                None,
                None,
                None,
                {},
                token,
                lease.owner,
                _EPOCH + timedelta(0, 0, expires),
                True,  # noqa: FBT003 - OperationRecord's positional fields, in order
                (),
                created,
                created,
                created,
                1,
                head,
            )
            return record, True

        return work

    @staticmethod
    def _found(
        conn: Connection, operation: NewOperation, now_us: int, refused: sqlite3.IntegrityError
    ) -> OperationRecord:
        """The record a claim found in its way (nothing written); a pruned id's refusal."""
        if "effectguard: pruned" in str(refused):
            refuse_tombstoned(conn, operation.operation_id, operation.fingerprint)
        row = _select(conn, operation.operation_id)
        if row is None:
            msg = (
                f"the claim of {operation.operation_id!r} was refused ({refused})"
                " but no row blocks it"
            )
            raise InternalError(msg) from refused
        return rows.record(row, now_us)

    def transition(
        self,
        operation_id: str,
        expect: Expect,
        changes: Changes,
        events: Sequence[EventDraft],
        *,
        now: float | None = None,
        known: OperationRecord | None = None,
    ) -> OperationRecord:
        """See :meth:`EffectLedger.transition`."""
        now_us = round((self._clock() if now is None else now) * _MICROS)  # _now_us, inline
        work = self._transitioning(operation_id, expect, changes, events, now_us, known)
        return self._write(work, operation_id, standalone=True)

    async def transition_async(
        self,
        operation_id: str,
        expect: Expect,
        changes: Changes,
        events: Sequence[EventDraft],
        *,
        now: float | None = None,
        known: OperationRecord | None = None,
    ) -> OperationRecord:
        """:meth:`transition` from an event loop: the ledger's writer thread commits it."""
        work = self._transitioning(operation_id, expect, changes, events, self._now_us(now), known)
        return await self._write_async(work, operation_id)

    def _transitioning(
        self,
        operation_id: str,
        expect: Expect,
        changes: Changes,
        events: Sequence[EventDraft],
        now_us: int,
        known: OperationRecord | None,
    ) -> Callable[[Connection], OperationRecord]:
        """A transition's work: one statement from ``known``, or the general read-and-write.

        From ``known`` when it is this operation's, ``expect`` holds for it and
        needs no judgement of expiry (only the database's row can say that),
        and there is one event: the ``row_writes`` statement then applies only
        if the row is still at ``known``'s event count and lease token. A stale
        ``known`` writes nothing and takes the general path, in the same
        transaction when there is one.
        """
        fast = (
            known is not None
            and len(events) == 1
            and not expect.lease_expired
            and known.operation_id == operation_id
            # describe_mismatch(known, expect, ...) is None, written out (it is every
            # confirmation's check, and lease_expired is False here, so expiry is not asked).
            and (expect.statuses is None or known.status in expect.statuses)
            and (expect.lease_token is UNSET or known.lease_token == expect.lease_token)
            and (expect.event_count is None or known.event_count == expect.event_count)
        )
        lone = _LoneWrite(known, changes, events[0], now_us) if fast and known else None

        def general(conn: Connection) -> OperationRecord:
            if conn.in_transaction:
                return _general_transition(conn, operation_id, expect, changes, events, now_us)
            return write_transaction(
                conn,
                lambda conn: _general_transition(
                    conn, operation_id, expect, changes, events, now_us
                ),
            )

        if lone is None:
            return general

        def work(conn: Connection) -> OperationRecord:
            try:
                conn.execute(_ROW_WRITE, lone.values)
            except sqlite3.IntegrityError as exc:
                if "effectguard: moved" not in str(exc):
                    raise
                return general(conn)
            return lone.record()

        return work

    def renew(
        self, operation_id: str, lease_token: str, seconds: float, *, now: float | None = None
    ) -> None:
        """See :meth:`EffectLedger.renew`."""
        expires = self._now_us(now) + round(seconds * _MICROS)

        def work(conn: Connection) -> None:
            cursor = conn.execute(
                "UPDATE operations SET lease_expires_us = ?"
                " WHERE operation_id = ? AND lease_token = ?",
                (expires, operation_id, lease_token),
            )
            if cursor.rowcount == 0:
                msg = f"lease on operation {operation_id!r} is no longer held by this writer"
                raise FencedWriteError(msg)

        self._write(work, operation_id, standalone=True)

    # -- reads ---------------------------------------------------------------------------

    def get(self, operation_id: str, *, now: float | None = None) -> OperationRecord | None:
        """See :meth:`EffectLedger.get`."""
        return self._read(self._getting(operation_id, now), None)

    async def get_async(
        self, operation_id: str, *, now: float | None = None
    ) -> OperationRecord | None:
        """:meth:`get` from an event loop: run in the ledger's writer thread."""
        return await self._read_async(self._getting(operation_id, now), None)

    def _getting(
        self, operation_id: str, now: float | None
    ) -> Callable[[Connection], OperationRecord | None]:
        check_operation_id(operation_id)
        now_us = self._now_us(now)

        def work(conn: Connection) -> OperationRecord | None:
            row = _select(conn, operation_id)
            return None if row is None else rows.record(row, now_us)

        return work

    def get_checked(
        self, operation_id: str, *, now: float | None = None
    ) -> tuple[OperationRecord | None, str | None]:
        """The operation (or None) and the commitments of its last event, as JSON text, in one read.

        What a replay needs: the confirmation a CONFIRMED record's output is
        checked against is almost always its last event.
        """
        check_operation_id(operation_id)
        now_us = round((self._clock() if now is None else now) * _MICROS)  # _now_us, inline

        def work(conn: Connection) -> tuple[OperationRecord | None, str | None]:
            row = conn.execute(_SELECT_CHECKED, (operation_id,)).fetchone()
            if row is None:
                return None, None
            return rows.record(row[:-1], now_us), row[-1]

        nothing: tuple[OperationRecord | None, str | None] = (None, None)
        return self._read(work, nothing)

    def replay_view(self, operation_id: str) -> ReplayView | None:
        """What a replay of ``operation_id`` returns, in one read; None for no such operation.

        The status, fingerprint and stored output of the operation with the
        commitments of its last event, as :meth:`get_checked` reads them,
        without the rest of the row: a new process replaying a settled
        operation needs no more. Whether it is a replay at all is the
        caller's to judge (its status and fingerprint are in the view).
        """
        return self._read(self._viewing(operation_id), None)

    async def replay_view_async(self, operation_id: str) -> ReplayView | None:
        """:meth:`replay_view` from an event loop: run in the ledger's writer thread."""
        return await self._read_async(self._viewing(operation_id), None)

    def _viewing(self, operation_id: str) -> Callable[[Connection], ReplayView | None]:
        check_operation_id(operation_id)

        def work(conn: Connection) -> ReplayView | None:
            row = conn.execute(_SELECT_REPLAY, (operation_id,)).fetchone()
            if row is None:
                return None
            stored, fingerprint, attempts, output, provider_id, reason, evidence, commits = row
            return ReplayView(
                operation_id,
                STATUSES.get(stored) or rows_status(stored),
                fingerprint,
                attempts,
                output,
                provider_id,
                reason,
                (None if evidence is None else read_json(evidence)) or {},
                commits,
            )

        return work

    def list_operations(
        self,
        *,
        status: EffectStatus | None = None,
        contract: str | None = None,
        limit: int = 100,
    ) -> list[OperationRecord]:
        """See :meth:`EffectLedger.list_operations`.

        A listing of a status that needs an operator's attention (PREPARED,
        OUTCOME_UNKNOWN, RECONCILING, QUARANTINED) reads one small index; any
        other listing reads the table (operations in flight and settled ones
        carry no listing index, which every guarded call would pay for).
        """
        check_limit(limit)
        clauses, params = [], []
        if status is not None:
            clauses.append("status = ?")
            params.append(EffectStatus(status).value)
            if params[-1] in ATTENTION_STATUSES:
                clauses.append(NEEDING_ATTENTION)
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
            record = rows.record
            return [record(row, now_us) for row in found]

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
        """The commitments of ``operation_id``'s events, oldest first, no event decoded whole."""
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
            empty = chain.merged(empty, *chain.check_anchor((), (), anchor))
        return self._read(work, empty)

    def _verify(self, conn: Connection, anchor: AnchorHead | None) -> VerifyReport:
        heads = conn.execute(_VERIFY_HEADS)
        events = conn.execute(f"SELECT {_EVENT_COLUMNS} FROM events ORDER BY operation_id, seq")
        report = chain.verify(heads, map(rows.read_event, events))
        unanchored = [row[0] for row in conn.execute(_UNANCHORED)]
        problems, head = chain.check_anchor(conn.execute(_VERIFY_CLAIMS), unanchored, anchor)
        return chain.merged(report, [*problems, *tombstone_problems(conn)], head)

    def anchor_head(self) -> AnchorHead:
        """The claims anchor's head now: how many claims, and the running hash over them.

        A writable ledger fills in the running hash of the claims that have
        none yet first, so a head exported now is also what the file holds.
        """
        if self.read_only:
            return self._read(pending_head, AnchorHead(0, chain.START))
        if not self._ready and not self.path.exists():
            return AnchorHead(0, chain.START)
        return self._write(lambda conn: _in_transaction(conn, anchor_pending))

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
                    conn.executemany(_INSERT_EVENT, event_rows)
                    loaded += len(operation_rows)
                refuse_loaded_tombstoned(conn)
                anchor_unanchored(conn)
            except sqlite3.IntegrityError as exc:
                raise bulk.duplicate_error(f"ledger {self.path}", exc) from exc
            finally:
                conn.execute(f"PRAGMA cache_size = {int(previous)}")
            return loaded

        loaded = self._write(work)
        self._read(lambda conn: conn.execute("ANALYZE"), None)
        return loaded


def _in_transaction(conn: Connection, work: Callable[[Connection], T]) -> T:
    """``work(conn)`` in the transaction ``conn`` is in, or in one of its own."""
    return work(conn) if conn.in_transaction else write_transaction(conn, work)


def _general_transition(
    conn: Connection,
    operation_id: str,
    expect: Expect,
    changes: Changes,
    events: Sequence[EventDraft],
    now_us: int,
) -> OperationRecord:
    """A transition read and written under the write lock: the row checked, every column set."""
    row = _select(conn, operation_id)
    if row is None:
        raise OperationNotFoundError(operation_id)
    current = rows.version(row, now_us)
    problem = describe_mismatch(current, expect, lease_expired=not current.lease_live)
    if problem is not None:
        msg = f"write to operation {operation_id!r} refused: {problem}"
        raise FencedWriteError(msg)
    updated, events_rows = rows.transitioned(row, changes, events, now_us)
    conn.executemany(_INSERT_EVENT, events_rows)
    conn.execute(_UPDATE_OPERATION, (*updated[1:], operation_id))
    return rows.record(updated, now_us)


#: The stored text of each lease owner this process has written (a process has one or two).
_OWNER_TEXTS: dict[LeaseOwner, str] = {}


def _owner_text(owner: LeaseOwner | None) -> str | None:
    """``owner_text(owner)``, remembered: the same owner is written on every claim."""
    global _LAST_OWNER  # noqa: PLW0603 - one tuple, replaced whole: a reader sees a matched pair
    if owner is None:
        return None
    text = _OWNER_TEXTS.get(owner)
    if text is None:
        made = owner_text(owner)
        if made is None or len(_OWNER_TEXTS) >= _OWNER_TEXTS_KEPT:
            return made
        text = _OWNER_TEXTS[owner] = made
    _LAST_OWNER = (owner, text)
    return text


#: The owner :func:`_owner_text` gave last (LeaseOwner is frozen) and its text.
_LAST_OWNER: tuple[LeaseOwner | None, str | None] = (None, None)


_OWNER_TEXTS_KEPT = 64


class _LoneWrite:
    """A one-event transition written from the record the writer holds: the statement's values.

    Built on the caller's thread, before the write lock: the new row is
    ``known`` with ``changes`` applied, its event hashed onto ``known``'s head
    with the commitments the general path would write (a test compares the two).
    """

    __slots__ = ("_changes", "_evidence", "_expires", "_known", "_now_us", "_overlap", "values")

    def __init__(
        self, known: OperationRecord, changes: Changes, event: EventDraft, now_us: int
    ) -> None:
        self._known, self._changes, self._now_us = known, changes, now_us
        lease = changes.lease
        keep_expiry = lease is UNSET
        if lease is UNSET:
            # The expiry the writer knows: a renewal since moved it, so the row is read instead.
            token, owner = known.lease_token, _owner_text(known.lease_owner)
            kept = known.lease_expires_at
            expires = None if kept is None else to_micros(kept)
        elif lease is None:
            token = owner = expires = None
        else:
            token, owner = lease.token, _owner_text(lease.owner)
            expires = now_us + round(lease.seconds * _MICROS)
        self._expires = expires
        attempts = known.attempts if changes.attempts is UNSET else changes.attempts
        budget = known.attempt_budget if changes.attempt_budget is UNSET else changes.attempt_budget
        output = known.output_json if changes.output_json is UNSET else changes.output_json
        provider_id = (
            known.provider_operation_id
            if changes.provider_operation_id is UNSET
            else changes.provider_operation_id
        )
        reason = known.reason if changes.reason is UNSET else changes.reason
        evidence = known.evidence if changes.evidence is UNSET else changes.evidence
        self._evidence = evidence
        evidence_text = canonical_json(dict(evidence)) if evidence else None
        overlap = known.overlap if changes.overlap is UNSET else changes.overlap
        self._overlap = overlap
        # What chain.commits_of takes of the columns ``changes`` sets, built from the values
        # above rather than from a second dump of every column (a test holds them equal).
        commits: dict[str, Any] = {}
        if changes.attempts is not UNSET:
            commits["attempts"] = attempts
        if changes.attempt_budget is not UNSET:
            commits["attempt_budget"] = budget
        if changes.provider_operation_id is not UNSET:
            commits["provider_operation_id"] = provider_id
        if changes.output_json is not UNSET:
            commits["output"] = chain.digest(output)
        if not keep_expiry:
            commits["lease"] = chain.lease_commitment(token, owner)
        if commits:
            commits["v"] = chain.COMMITS_V2
        commits_text = checked_json(commits) if commits else None
        if event.evidence is evidence:
            event_evidence = evidence_text
        else:
            event_evidence = canonical_json(dict(event.evidence)) if event.evidence else None
        count = known.event_count + 1
        head = chain.chain_hash(
            known.event_head or None,
            chain.document_text(
                known.operation_id,
                count,
                event.type,
                event.from_status,
                event.to_status,
                event.attempt,
                now_us,
                event_evidence,
                commits_text,
            ),
        )
        self.values = (
            known.operation_id,
            known.event_count,
            known.lease_token,
            # ``_value_``: what ``.value`` returns, without its two-call property.
            changes.status._value_,
            attempts,
            budget,
            output,
            provider_id,
            reason,
            evidence_text,
            token,
            owner,
            expires,
            keep_expiry,
            overlap_text(overlap) if overlap else None,
            now_us,
            count,
            head,
            event.type._value_,
            None if event.from_status is None else event.from_status._value_,
            event.to_status._value_,
            event.attempt,
            event_evidence,
            commits_text,
        )

    def record(self) -> OperationRecord:
        """The record as the statement left it (written: call only after it applied)."""
        known, changes, values = self._known, self._changes, self.values
        token = values[10]
        lease = changes.lease
        if lease is UNSET:
            owner, expires_at = known.lease_owner, known.lease_expires_at
        elif lease is None:
            owner, expires_at = None, None
        else:
            owner, expires_at = lease.owner, from_micros(self._expires or 0)
        # Judged at the write's time, as a read of the row would judge it.
        live = token is not None and self._expires is not None and self._expires > self._now_us
        return build_record(
            known.operation_id,
            known.contract,
            known.contract_version,
            known.fingerprint,
            known.provider_key,
            changes.status,
            values[4],
            values[5],
            known.arguments,
            values[6],
            values[7],
            values[8],
            dict(self._evidence) if self._evidence else {},
            token,
            owner,
            expires_at,
            live,
            tuple(self._overlap),
            known.created_at,
            _EPOCH + timedelta(0, 0, self._now_us),  # from_micros, inline
            known.first_dispatched_at,
            values[16],
            values[17],
        )
