"""One write waiting in the group commit, run in its batch, and how its caller is told.

A thread's write waits on an event; a loop's write waits on a future of its
loop, settled on that loop once per batch (:func:`deliver`). A batch's writes
run alone (:func:`run_alone`) or each in a savepoint of its own
(:func:`run_in_savepoint`); a batch whose writer failed gives each of its
callers :func:`writer_died`'s error.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from effectguard.errors import LedgerUnavailableError

__all__ = [
    "Pending",
    "deliver",
    "rollback",
    "run_alone",
    "run_in_savepoint",
    "wake",
    "writer_died",
]

T = TypeVar("T")


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
