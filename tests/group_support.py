"""Helpers of the SQLite group-commit tests: hold the writer's role, wait for a queue.

Shared by the tests of threads' writes (``test_sqlite_group_commit.py``) and
of event loops' calls (``test_sqlite_async_ledger.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from effectguard import SQLiteEffectLedger

#: How long a test waits for anything, in seconds.
WAIT = 20.0


class WriterCrash(BaseException):
    """What ends a writer in the middle of a batch (as KeyboardInterrupt would)."""


def hold_writer(ledger: SQLiteEffectLedger) -> tuple[threading.Thread, threading.Event]:
    """Make a thread the ledger's writer, stuck inside its transaction until released."""
    entered, release = threading.Event(), threading.Event()

    def slow(_conn: object) -> None:
        entered.set()
        release.wait(WAIT)

    holder = threading.Thread(target=ledger._write, args=(slow,))
    holder.start()
    assert entered.wait(WAIT)
    return holder, release


def queued(ledger: SQLiteEffectLedger, count: int) -> None:
    """Wait until ``count`` writes wait for the writer."""
    deadline = time.monotonic() + WAIT
    while len(ledger._group._queue) < count:
        assert time.monotonic() < deadline, "the writes never queued"
        time.sleep(0.005)


def in_thread(work: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``work`` in a thread; the dict gets its ``result`` or its ``error``."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = work()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome
