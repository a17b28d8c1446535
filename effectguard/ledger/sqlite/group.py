"""Group commit: the writes of several threads of one ledger share one ``BEGIN IMMEDIATE … COMMIT``.

SQLite has one writer per file. Without this, concurrent callers each wait
for the write lock in SQLite's busy handler and each pay their own fsync.
With it, one thread at a time is the ledger's writer (the *leader*): it takes
every write queued so far, runs each in a savepoint of one transaction, commits
once, and only then tells each caller its result. Meanwhile (the fsync
releases the GIL) newcomers queue up for the next batch, which the leader
hands to the first of them. A lone caller leads its own batch of one at once:
no thread switch, no savepoint.

What does not change:

- **Durability before dispatch.** A caller learns its write succeeded only
  after the commit holding it returned, so a claim is durable before its
  handler runs, exactly as with one transaction per write.
- **Fencing, per operation.** Each write checks its own fence inside its own
  savepoint; one that is refused (``FencedWriteError``) is rolled back alone,
  and the others of its batch commit.
- **Failure is never silent.** When the batch's transaction cannot begin or
  commit, or the leader dies in the middle of it (any ``BaseException``),
  nothing of the batch is committed and every caller in it gets a
  :class:`~effectguard.errors.LedgerUnavailableError` (or a subclass) before
  it can run a handler; the next batch is led by another caller.

Separate processes still meet in SQLite's lock, as before.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from effectguard.errors import LedgerUnavailableError

__all__ = ["GroupCommit", "writer_died"]

T = TypeVar("T")


class _Pending(Generic[T]):
    """One caller's write, waiting for the commit that holds it."""

    __slots__ = ("done", "error", "lead", "operation_id", "result", "work")

    def __init__(self, work: Callable[[Any], T], operation_id: str | None) -> None:
        self.work = work
        self.operation_id = operation_id
        # Only a caller that waits for another writer needs one (most calls lead their own).
        self.done: threading.Event | None = None
        self.lead = False
        self.result: T | None = None
        self.error: BaseException | None = None


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
        self._queue: list[_Pending[Any]] = []
        self._leading = False
        self._pid = os.getpid()
        #: Transactions committed, and the writes they held (read by tests and the bench).
        self.batches = 0
        self.writes = 0

    def run(
        self, connect: Callable[[], Any], work: Callable[[Any], T], operation_id: str | None
    ) -> T:
        """Run ``work(conn)`` in a committed transaction and return its result.

        ``connect()`` gives this thread's connection, used only if this thread
        leads a batch. Raises what ``work`` raised, or the ledger error of a
        batch that did not commit.
        """
        pending: _Pending[T] = _Pending(work, operation_id)
        if self._pid != os.getpid():
            self._forked()
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

    def _withdraw(self, pending: _Pending[Any]) -> None:
        """A waiting caller was interrupted: take its write back, or pass on the writer's role.

        A write a leader has already taken into its batch is committed or not
        with that batch (as when a process dies after its write was sent).
        """
        with self._lock:
            if not any(queued is pending for queued in self._queue):
                return
            self._queue = [queued for queued in self._queue if queued is not pending]
            if pending.lead:
                if self._queue:
                    self._queue[0].lead = True
                    _wake(self._queue[0])
                else:
                    self._leading = False

    def _forked(self) -> None:
        """In a child after ``fork()``: the parent's writer and its queue are not this process's."""
        self._lock = threading.Lock()
        self._queue = []
        self._leading = False
        self._pid = os.getpid()

    def _lead(self, connect: Callable[[], Any], mine: _Pending[Any]) -> None:
        """Commit everything queued, then hand the writer's role to the next caller waiting."""
        batch: list[_Pending[Any]] = []
        try:
            with self._lock:
                batch, self._queue = self._queue, []
            conn = connect()
            with conn.in_use:
                self._commit(conn, batch)
        except BaseException as exc:
            # Nothing of the batch committed: every other caller in it learns so now.
            for pending in batch:
                if pending is not mine:
                    pending.error = writer_died(exc)
                    pending.error.__cause__ = exc
            raise
        finally:
            with self._lock:
                if self._queue:
                    self._queue[0].lead = True
                    _wake(self._queue[0])
                else:
                    self._leading = False
            for pending in batch:
                _wake(pending)

    def _commit(self, conn: Any, batch: list[_Pending[Any]]) -> None:
        """One transaction: each write in a savepoint of its own when there are several."""
        try:
            conn.execute("BEGIN IMMEDIATE")
            if self._refused(batch):
                _rollback(conn)
                return
            if len(batch) == 1:
                if not _run_alone(conn, batch[0]):
                    return
            else:
                for pending in batch:
                    _run_in_savepoint(conn, pending, self._translate)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            _rollback(conn)
            for pending in batch:
                pending.error = self._translate(exc)
                pending.error.__cause__ = exc
            return
        except BaseException:
            _rollback(conn)
            raise
        self.batches += 1
        self.writes += sum(1 for pending in batch if pending.error is None)

    def _refused(self, batch: list[_Pending[Any]]) -> bool:
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


def _wake(pending: _Pending[Any]) -> None:
    if pending.done is not None:
        pending.done.set()


def _run_alone(conn: Any, pending: _Pending[Any]) -> bool:
    """The only write of its transaction; False when it raised (rolled back, nothing to commit)."""
    try:
        pending.result = pending.work(conn)
    except sqlite3.Error:
        raise
    except Exception as exc:  # noqa: BLE001 - the caller's own error, raised in its thread
        _rollback(conn)
        pending.error = exc
        return False
    return True


def _run_in_savepoint(
    conn: Any, pending: _Pending[Any], translate: Callable[[sqlite3.Error], BaseException]
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


def _rollback(conn: Any) -> None:
    with contextlib.suppress(sqlite3.Error):
        if conn.in_transaction:
            conn.execute("ROLLBACK")


def writer_died(cause: BaseException) -> LedgerUnavailableError:
    """The error of a caller whose batch's writer failed before committing it."""
    return LedgerUnavailableError(
        f"the ledger's writer failed before committing this write ({type(cause).__name__}: "
        f"{cause}); nothing of it was recorded and nothing was dispatched: call again"
    )
