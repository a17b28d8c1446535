"""Event loops' calls on SQLite (issue 15): served by the ledger's writer thread.

``execute_async`` on a SQLite ledger sends its read, its claim and its
transitions to the ledger's writer thread instead of a worker thread per
call; the writer commits the writes with whatever else is queued and wakes
each loop once. These tests hold the writer's role with a slow write so that
the loops' writes queue behind it, then look at what committed, what each
task was told, and what the fake provider actually committed.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from group_support import WAIT, WriterCrash, hold_writer, in_thread, queued
from support import capture_contract

from effectguard import (
    EffectContract,
    EffectExecutor,
    EffectResult,
    EffectStatus,
    InvalidRequestError,
    LedgerUnavailableError,
    SQLiteEffectLedger,
)
from effectguard._model import OperationRecord
from effectguard.ledger import Changes, EventDraft, Expect
from effectguard.ledger import sqlite as group
from effectguard.ledger._protocol import async_ledger
from effectguard.testkit import FakePaymentProvider
from effectguard.testkit._ledgers import DelegatingLedger

CONTRACT = EffectContract(name="loop.capture", operation_id=lambda a: f"cap:{a['invoice_id']}")


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[SQLiteEffectLedger]:
    opened = SQLiteEffectLedger(tmp_path / "ledger.db", busy_timeout=0.5)
    yield opened
    opened.close()


@pytest.fixture
def provider(tmp_path: Path) -> FakePaymentProvider:
    # Not closed: Store.close() refuses connections other threads opened (a testkit limit).
    return FakePaymentProvider(path=tmp_path / "provider.db")


def _tasks(calls: Sequence[Callable[[], Awaitable[Any]]]) -> Callable[[], list[Any]]:
    """One event loop running ``calls`` as concurrent tasks; each result or exception."""

    async def everything() -> list[Any]:
        return await asyncio.gather(*(call() for call in calls), return_exceptions=True)

    return lambda: asyncio.run(everything())


def _capture(executor: EffectExecutor, handler: Any, n: int) -> Callable[[], Awaitable[Any]]:
    arguments = {"invoice_id": f"INV-{n}", "amount_cents": 100}
    return lambda: executor.execute_async(CONTRACT, arguments, handler)


def test_tasks_writes_share_one_commit_and_each_claim_is_durable_before_its_handler(
    ledger: SQLiteEffectLedger, provider: FakePaymentProvider, tmp_path: Path
) -> None:
    """Four tasks' claims commit together; every handler then finds its claim committed."""
    executor = EffectExecutor(ledger)
    seen: dict[str, str] = {}

    async def handler(arguments: dict[str, Any], *, idempotency_key: str | None) -> Any:
        # Another connection sees only committed rows: the claim is durable already.
        other = sqlite3.connect(tmp_path / "ledger.db")
        try:
            row = other.execute(
                "SELECT status FROM operations WHERE operation_id = ?",
                (f"cap:{arguments['invoice_id']}",),
            ).fetchone()
        finally:
            other.close()
        seen[arguments["invoice_id"]] = row[0]
        return provider.handler(arguments, idempotency_key=idempotency_key)

    executor.execute(CONTRACT, {"invoice_id": "warm", "amount_cents": 1}, provider.handler)
    holder, release = hold_writer(ledger)
    before = ledger._group.batches
    loop = in_thread(_tasks([_capture(executor, handler, n) for n in range(4)]))
    queued(ledger, 4)
    release.set()
    holder.join(WAIT)
    loop[0].join(WAIT)
    results: list[EffectResult[Any]] = loop[1]["result"]
    assert [result.status for result in results] == [EffectStatus.CONFIRMED] * 4
    assert seen == {f"INV-{n}": "DISPATCHED" for n in range(4)}
    assert provider.committed() == 5
    # The slow write, the four claims together, then the four confirmations (in 1 to 4 commits).
    assert 2 + 1 <= ledger._group.batches - before <= 2 + 4
    assert ledger.verify().problems == ()


def test_a_writer_that_dies_fails_every_task_before_any_handler_runs(
    ledger: SQLiteEffectLedger, provider: FakePaymentProvider, caplog: pytest.LogCaptureFixture
) -> None:
    """The writer thread dies mid-batch: nothing commits, nobody dispatches, every task is told."""
    executor = EffectExecutor(ledger)
    holder, release = hold_writer(ledger)
    loop = in_thread(_tasks([_capture(executor, provider.handler, n) for n in range(3)]))
    queued(ledger, 3)

    def crash(_conn: object) -> None:
        raise WriterCrash

    poison = in_thread(lambda: ledger._write(crash))
    queued(ledger, 4)
    with caplog.at_level(logging.WARNING, logger="effectguard"):
        release.set()
        for thread in (holder, loop[0], poison[0]):
            thread.join(WAIT)
    errors = loop[1]["result"]
    assert all(isinstance(error, LedgerUnavailableError) for error in errors), errors
    assert all("nothing was dispatched" in str(error) for error in errors)
    assert all(isinstance(error.__cause__, WriterCrash) for error in errors)
    assert isinstance(poison[1].get("error"), LedgerUnavailableError)
    assert "the ledger's writer thread ended (WriterCrash" in caplog.text
    assert provider.committed() == 0
    assert provider.requests == 0
    assert [ledger.get(f"cap:INV-{n}") for n in range(3)] == [None] * 3
    # The next write starts a writer thread again: the ledger still works from a loop.
    again = _tasks([_capture(executor, provider.handler, 9)])()
    assert [result.status for result in again] == [EffectStatus.CONFIRMED]
    assert provider.committed() == 1


def test_a_cancelled_task_leaves_its_queued_claim_to_its_batch_and_never_dispatches(
    ledger: SQLiteEffectLedger, provider: FakePaymentProvider
) -> None:
    """Cancelled while its claim waits: the claim commits with its batch; no handler runs."""
    executor = EffectExecutor(ledger)
    holder, release = hold_writer(ledger)
    problems: list[dict[str, Any]] = []
    started = threading.Event()

    async def cancelled() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: problems.append(ctx))
        task = asyncio.create_task(_capture(executor, provider.handler, 1)())
        started.set()
        while len(ledger._group._queue) < 1:  # noqa: ASYNC110 - another thread's queue
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        # The batch's answer reaches this loop after the cancel: it must be dropped quietly.
        deadline = time.monotonic() + WAIT
        committed = lambda: ledger.get("cap:INV-1") is not None  # noqa: E731 - the loop's test
        while not committed() and time.monotonic() < deadline:  # noqa: ASYNC110 - another thread
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)

    loop = in_thread(lambda: asyncio.run(cancelled()))
    assert started.wait(WAIT)
    loop[0].join(WAIT)
    holder.join(WAIT)
    assert "error" not in loop[1], loop[1]
    assert problems == []
    record = ledger.get("cap:INV-1")
    assert record is not None
    assert record.status is EffectStatus.DISPATCHED
    assert provider.requests == 0
    assert provider.committed() == 0


class CountingLedger(SQLiteEffectLedger):
    """Overrides the transition (as a fault-injecting ledger would) and not its async form."""

    transitions = 0

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
        """Count the transition, then write it."""
        CountingLedger.transitions += 1
        return super().transition(operation_id, expect, changes, events, now=now, known=known)


def test_a_ledger_that_overrides_a_write_is_written_through_its_override(
    tmp_path: Path, provider: FakePaymentProvider
) -> None:
    """Async forms are used only where the class defining a call defines its async form too."""
    plain = SQLiteEffectLedger(tmp_path / "plain.db")
    counting = CountingLedger(tmp_path / "counting.db")
    try:
        assert async_ledger(plain) is plain
        assert async_ledger(DelegatingLedger(plain)) is None
        assert async_ledger(counting) is None
        before = CountingLedger.transitions
        results = _tasks(
            [_capture(EffectExecutor(counting), provider.handler, n) for n in range(3)]
        )()
        assert [result.status for result in results] == [EffectStatus.CONFIRMED] * 3
        assert CountingLedger.transitions - before == 3
        assert provider.committed() == 3
    finally:
        plain.close()
        counting.close()


def test_threads_and_loops_share_one_ledger_and_commit_each_effect_once(
    ledger: SQLiteEffectLedger, provider: FakePaymentProvider
) -> None:
    """Two threads and two loops of 20 tasks, some on the same operations: one effect each."""
    executor = EffectExecutor(ledger, wait_for_peer=WAIT)

    def threaded(first: int) -> list[EffectResult[Any]]:
        return [
            executor.execute(
                CONTRACT, {"invoice_id": f"INV-{n}", "amount_cents": 100}, provider.handler
            )
            for n in range(first, first + 20)
        ]

    workers = [
        in_thread(lambda: threaded(0)),
        in_thread(lambda: threaded(30)),
        in_thread(_tasks([_capture(executor, provider.handler, n) for n in range(10, 30)])),
        in_thread(_tasks([_capture(executor, provider.handler, n) for n in range(20, 40)])),
    ]
    for thread, _ in workers:
        thread.join(WAIT * 3)
    results = [result for _, outcome in workers for result in outcome["result"]]
    assert len(results) == 80
    assert {result.status for result in results} == {EffectStatus.CONFIRMED}
    assert provider.committed() == 50
    assert ledger.verify().problems == ()


def _child(path: str, provider_path: str) -> None:
    """In a forked child: a task's call on the parent's ledger, through a writer of its own."""
    ledger = SQLiteEffectLedger(path)
    provider = FakePaymentProvider(path=provider_path)
    executor = EffectExecutor(ledger)
    results = _tasks([_capture(executor, provider.handler, 77)])()
    raise SystemExit(0 if results[0].status is EffectStatus.CONFIRMED else 3)


def test_a_forked_child_writes_from_its_loop_through_a_writer_of_its_own(
    ledger: SQLiteEffectLedger, provider: FakePaymentProvider, tmp_path: Path
) -> None:
    """The parent's writer thread does not survive fork(): the child's loop gets its own."""
    executor = EffectExecutor(ledger)
    first = _tasks([_capture(executor, provider.handler, 1)])()
    assert first[0].status is EffectStatus.CONFIRMED
    assert ledger._group._writer is not None
    child = multiprocessing.get_context("fork").Process(
        target=_child, args=(str(tmp_path / "ledger.db"), str(tmp_path / "provider.db"))
    )
    child.start()
    child.join(WAIT * 3)
    assert child.exitcode == 0
    record = ledger.get("cap:INV-77")
    assert record is not None
    assert record.status is EffectStatus.CONFIRMED
    assert provider.committed() == 2


def test_the_writer_thread_ends_when_its_ledger_closes_and_when_idle(
    tmp_path: Path, provider: FakePaymentProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No thread is left behind: closing the ledger ends it, and so does a quiet spell."""
    closing = SQLiteEffectLedger(tmp_path / "closing.db")
    _tasks([_capture(EffectExecutor(closing), provider.handler, 1)])()
    writer = closing._group._writer
    assert writer is not None
    assert writer.is_alive()
    closing.close()
    writer.join(WAIT)
    assert not writer.is_alive()

    monkeypatch.setattr(group, "_IDLE_SECONDS", 0.05)
    idle = SQLiteEffectLedger(tmp_path / "idle.db")
    try:
        executor = EffectExecutor(idle)
        _tasks([_capture(executor, provider.handler, 2)])()
        first = idle._group._writer
        assert first is not None
        first.join(WAIT)
        assert not first.is_alive()
        assert idle._group._writer is None
        # The next loop's write starts another.
        again = _tasks([_capture(executor, provider.handler, 3)])()
        assert [result.status for result in again] == [EffectStatus.CONFIRMED]
        assert idle._group._writer is not first
    finally:
        idle.close()
    assert provider.committed() == 3


def test_a_long_queue_of_writes_is_committed_in_batches_of_at_most_32(
    ledger: SQLiteEffectLedger, provider: FakePaymentProvider
) -> None:
    """100 tasks' claims queued behind one slow write: they commit in at least four batches."""
    executor = EffectExecutor(ledger)
    holder, release = hold_writer(ledger)
    loop = in_thread(_tasks([_capture(executor, provider.handler, n) for n in range(100)]))
    queued(ledger, 100)
    before = ledger._group.batches
    release.set()
    holder.join(WAIT)
    loop[0].join(WAIT * 3)
    assert [result.status for result in loop[1]["result"]] == [EffectStatus.CONFIRMED] * 100
    # The slow write, then the 100 claims 32 at a time, then the 100 outcomes.
    assert ledger._group.batches - before >= 1 + 4 + 4
    assert provider.committed() == 100


_CHILD = """
import asyncio, sys
sys.path.insert(0, sys.argv[3])
from support import capture_contract
from effectguard import EffectExecutor, SQLiteEffectLedger
from effectguard.testkit import FakePaymentProvider

provider = FakePaymentProvider(path=sys.argv[2])
executor = EffectExecutor(SQLiteEffectLedger(sys.argv[1]))
contract = capture_contract(provider)

async def main():
    numbers = iter(range(100_000))

    async def task():
        for n in numbers:
            args = {"invoice_id": f"INV-{n}", "amount_cents": 100}
            await executor.execute_async(contract, args, provider.handler)

    print("started", flush=True)
    await asyncio.gather(*(task() for _ in range(50)))

asyncio.run(main())
"""


@pytest.mark.slow
def test_a_process_killed_among_its_loops_writes_left_no_effect_without_its_claim(
    tmp_path: Path,
) -> None:
    """SIGKILL a process whose 50 tasks write through the writer thread; recover each call once."""
    ledger_path, provider_path = tmp_path / "ledger.db", tmp_path / "provider.db"
    provider = FakePaymentProvider(path=provider_path)
    tests = Path(__file__).parents[1]
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(ledger_path), str(provider_path), str(tests)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "started"
        deadline = time.monotonic() + WAIT * 3
        while provider.committed() < 300:
            assert time.monotonic() < deadline, "the child committed too little"
            time.sleep(0.01)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(WAIT)
    assert child.returncode == -signal.SIGKILL
    effects = provider.effects()
    with SQLiteEffectLedger(ledger_path) as ledger:
        # Each effect the provider holds was claimed durably before it was sent.
        for effect in effects:
            record = ledger.get(f"invoice:{effect['request']['invoice_id']}:capture")
            assert record is not None
            assert record.status in {EffectStatus.DISPATCHED, EffectStatus.CONFIRMED}
        claimed = {record.operation_id for record in ledger.list_operations(limit=100_000)}
        assert len(claimed) >= len(effects)
        # A fresh process recovers every call the child began, each effect exactly once.
        executor = EffectExecutor(ledger)
        contract = capture_contract(provider)
        for operation_id in sorted(claimed):
            invoice = operation_id.split(":")[1]
            arguments = {"invoice_id": invoice, "amount_cents": 100}
            result = executor.execute(contract, arguments, provider.handler)
            assert result.status is EffectStatus.CONFIRMED, result
        assert provider.duplicates() == 0
        assert provider.committed() == len(claimed)
        assert ledger.verify().ok


def test_a_loops_read_sees_only_what_is_committed_and_needs_no_write_lock(
    ledger: SQLiteEffectLedger, provider: FakePaymentProvider
) -> None:
    """A loop reads while a thread holds the write lock: served at once, committed rows only."""
    executor = EffectExecutor(ledger)
    executor.execute(CONTRACT, {"invoice_id": "INV-1", "amount_cents": 100}, provider.handler)
    entered, release = threading.Event(), threading.Event()

    def uncommitted(conn: sqlite3.Connection) -> None:
        conn.execute(
            "UPDATE operations SET status = 'QUARANTINED' WHERE operation_id = 'cap:INV-1'"
        )
        entered.set()
        release.wait(WAIT)
        raise RuntimeError("rolled back")  # the write never commits

    holder = in_thread(lambda: ledger._write(uncommitted))
    assert entered.wait(WAIT)
    try:
        found = _tasks(
            [
                lambda: ledger.get_async("cap:INV-1"),
                lambda: ledger.get_async("cap:INV-2"),
            ]
        )()
    finally:
        release.set()
        holder[0].join(WAIT)
    assert isinstance(holder[1].get("error"), RuntimeError)
    first, missing = found
    assert first.status is EffectStatus.CONFIRMED
    assert first == ledger.get("cap:INV-1")
    assert missing is None
    [refused] = _tasks([lambda: ledger.get_async("")])()
    assert isinstance(refused, InvalidRequestError)
    assert "operation id" in str(refused)


def test_a_stream_of_reads_never_holds_a_write_back(
    ledger: SQLiteEffectLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two loops read without a pause; a write queued meanwhile runs after one pass of reads."""
    passes: list[int] = []
    read_all = group._read_all

    def counted(reads: list[Any]) -> None:
        if reads:
            passes.append(len(reads))
        read_all(reads)

    monkeypatch.setattr(group, "_read_all", counted)
    ledger.get("cap:none")  # the file exists before anyone reads it from a loop
    written = threading.Event()
    deadline = time.monotonic() + WAIT
    threads = [
        threading.Thread(target=_read_until, args=(ledger, written, deadline)) for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    try:
        while len(passes) < 20:  # the readers keep the writer busy
            assert time.monotonic() < deadline, "the readers never ran"
            time.sleep(0.005)

        async def write() -> int:
            queued_at = len(passes)
            ran_at = await ledger._group.submit(
                lambda: ledger._open(write=True), lambda _conn: len(passes), "x"
            )
            return ran_at - queued_at

        waited = asyncio.run(write())
    finally:
        written.set()
        for thread in threads:
            thread.join(WAIT)
    # The pass running when the write was queued, and at most one more, then the write.
    assert waited <= 2, f"the write waited for {waited} passes of reads"


def _read_until(ledger: SQLiteEffectLedger, stop: threading.Event, deadline: float) -> None:
    """An event loop whose five tasks read through the writer thread until ``stop``."""

    async def reader() -> None:
        while not stop.is_set() and time.monotonic() < deadline:
            await ledger._group.submit_read(lambda: time.sleep(0.001))

    _tasks([reader] * 5)()


class StopHere(BaseException):
    """A BaseException out of a ledger call run by the writer thread."""


def test_calls_that_raise_anything_settle_every_future_and_the_writer_goes_on(
    ledger: SQLiteEffectLedger,
) -> None:
    """StopIteration or a BaseException out of a read or a write: each caller is told."""

    def stop_iteration() -> None:
        raise StopIteration

    def base() -> None:
        raise StopHere

    async def calls() -> list[Any]:
        group_commit = ledger._group
        futures = [
            group_commit.submit_read(stop_iteration),
            group_commit.submit_read(base),
            group_commit.submit_read(lambda: 42),
            group_commit.submit(lambda: ledger._open(write=True), lambda _c: stop_iteration(), "a"),
            group_commit.submit(lambda: ledger._open(write=True), lambda _c: 7, "b"),
        ]
        return await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), WAIT)

    stopped, died, read, refused, written = asyncio.run(calls())
    assert isinstance(stopped, RuntimeError)
    assert isinstance(stopped.__cause__, StopIteration)
    assert isinstance(died, LedgerUnavailableError)
    assert isinstance(died.__cause__, StopHere)
    assert read == 42
    assert isinstance(refused, RuntimeError)
    assert written == 7
    # The writer thread is still the one that served them.
    assert ledger._group._writer is not None
    assert ledger._group._writer.is_alive()


def test_a_writer_thread_that_cannot_start_fails_the_loops_calls_and_spares_the_threads(
    ledger: SQLiteEffectLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No thread left to start: the loop's write fails with a ledger error; threads still write."""
    ledger.get("cap:none")

    def refuse(_thread: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    with monkeypatch.context() as patched:
        patched.setattr(threading.Thread, "start", refuse)
        [refused] = _tasks([lambda: ledger.get_async("cap:none")])()
    assert isinstance(refused, LedgerUnavailableError)
    assert "can't start new thread" in str(refused)
    assert ledger._group._leading is False
    assert ledger._write(lambda _conn: "a thread's write") == "a thread's write"
    again = _tasks([lambda: ledger.get_async("cap:none")])()
    assert again == [None]
