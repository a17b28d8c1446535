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

Callers on an event loop (:meth:`GroupCommit.submit`) queue their writes the
same way but never lead: the ledger's writer thread leads whenever the first
write queued is theirs, and it wakes each loop once per batch. Their writes
are committed with the threads' writes, under the same rules. Their reads
(:meth:`GroupCommit.submit_read`) run in that thread too, between batches,
outside any transaction.

Separate processes still meet in SQLite's lock, as before.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from effectguard.ledger.sqlite.pending import (
    Pending,
    deliver,
    rollback,
    run_alone,
    run_in_savepoint,
    wake,
    writer_died,
)

__all__ = ["GroupCommit"]

T = TypeVar("T")
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
        self, connect: Callable[[], Any], work: Callable[[Any], T], operation_id: str | None
    ) -> T:
        """Run ``work(conn)`` in a committed transaction and return its result.

        ``connect()`` gives this thread's connection, used only if this thread
        leads a batch. Raises what ``work`` raised, or the ledger error of a
        batch that did not commit.
        """
        pending: Pending[T] = Pending(work, operation_id)
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
