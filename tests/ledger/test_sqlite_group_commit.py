"""Group commit on SQLite (issue 15): threads' writes share a transaction, never a failure.

One thread at a time is the ledger's writer; writes queued meanwhile commit
together, each fenced on its own. These tests hold the writer's role with a
slow write so that others queue behind it, then look at what committed, what
each caller was told, and what the fake provider actually committed.
"""

from __future__ import annotations

import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from group_support import WAIT, WriterCrash, hold_writer, in_thread, queued

from effectguard import (
    EffectContract,
    EffectExecutor,
    EffectResult,
    EffectStatus,
    EventType,
    LedgerUnavailableError,
    SQLiteEffectLedger,
)
from effectguard._process import current_owner
from effectguard.errors import FencedWriteError, LedgerLockedError
from effectguard.ledger import Changes, EventDraft, Expect, Lease
from effectguard.testkit import FakePaymentProvider

CONTRACT = EffectContract(name="group.capture", operation_id=lambda a: f"cap:{a['invoice_id']}")


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[SQLiteEffectLedger]:
    opened = SQLiteEffectLedger(tmp_path / "ledger.db", busy_timeout=0.5)
    yield opened
    opened.close()


@pytest.fixture
def provider(tmp_path: Path) -> FakePaymentProvider:
    # Not closed: Store.close() refuses connections other threads opened (a testkit limit).
    return FakePaymentProvider(path=tmp_path / "provider.db")


def test_queued_claims_share_one_commit_and_each_is_durable_before_its_handler(
    ledger: SQLiteEffectLedger, provider: FakePaymentProvider, tmp_path: Path
) -> None:
    """Four callers' claims commit together; every handler then finds its claim committed."""
    executor = EffectExecutor(ledger)
    seen: dict[str, str] = {}

    def handler(arguments: dict[str, Any], *, idempotency_key: str | None) -> Any:
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

    holder, release = hold_writer(ledger)
    before = ledger._group.batches
    callers = [
        in_thread(
            lambda n=n: executor.execute(
                CONTRACT, {"invoice_id": f"INV-{n}", "amount_cents": 100}, handler
            )
        )
        for n in range(4)
    ]
    queued(ledger, 4)
    release.set()
    holder.join(WAIT)
    for thread, _ in callers:
        thread.join(WAIT)
    results: list[EffectResult[Any]] = [outcome["result"] for _, outcome in callers]
    assert [result.status for result in results] == [EffectStatus.CONFIRMED] * 4
    assert seen == {f"INV-{n}": "DISPATCHED" for n in range(4)}
    assert provider.committed() == 4
    # The slow write, the four claims together, then the four confirmations (in 1 to 4 commits).
    assert 2 + 1 <= ledger._group.batches - before <= 2 + 4
    assert ledger.verify().problems == ()


def test_a_writer_that_dies_fails_every_waiting_caller_before_any_handler_runs(
    ledger: SQLiteEffectLedger, provider: FakePaymentProvider
) -> None:
    """The batch's writer dies mid-batch: nothing commits, nobody dispatches, all are told."""
    executor = EffectExecutor(ledger)
    holder, release = hold_writer(ledger)
    callers = [
        in_thread(
            lambda n=n: executor.execute(
                CONTRACT, {"invoice_id": f"INV-{n}", "amount_cents": 100}, provider.handler
            )
        )
        for n in range(3)
    ]
    queued(ledger, 3)

    def crash(_conn: object) -> None:
        raise WriterCrash

    poison = in_thread(lambda: ledger._write(crash))
    queued(ledger, 4)
    release.set()
    holder.join(WAIT)
    for thread, _ in [*callers, poison]:
        thread.join(WAIT)
    errors = [outcome.get("error") for _, outcome in callers]
    # The caller whose thread was the writer dies with it; the others get a ledger error.
    assert sum(isinstance(error, WriterCrash) for error in errors) == 1
    told = [error for error in errors if not isinstance(error, WriterCrash)]
    assert len(told) == 2
    assert all(isinstance(error, LedgerUnavailableError) for error in told)
    assert all("nothing was dispatched" in str(error) for error in told)
    assert isinstance(poison[1].get("error"), LedgerUnavailableError)
    assert provider.committed() == 0
    assert provider.requests == 0
    assert [ledger.get(f"cap:INV-{n}") for n in range(3)] == [None] * 3
    # The writer's role passed on: the ledger still works.
    again = {"invoice_id": "INV-9", "amount_cents": 1}
    result = executor.execute(CONTRACT, again, provider.handler)
    assert result.status is EffectStatus.CONFIRMED
    assert provider.committed() == 1


def test_a_batch_that_cannot_take_the_lock_fails_every_caller_and_dispatches_nothing(
    ledger: SQLiteEffectLedger, provider: FakePaymentProvider, tmp_path: Path
) -> None:
    """Another process holds the write lock past the busy timeout: each caller gets a lock error."""
    executor = EffectExecutor(ledger)
    ledger.get("cap:warm")  # create the file's tables before another connection locks it
    executor.execute(CONTRACT, {"invoice_id": "warm", "amount_cents": 1}, provider.handler)
    other = sqlite3.connect(tmp_path / "ledger.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        callers = [
            in_thread(
                lambda n=n: executor.execute(
                    CONTRACT, {"invoice_id": f"INV-{n}", "amount_cents": 100}, provider.handler
                )
            )
            for n in range(4)
        ]
        for thread, _ in callers:
            thread.join(WAIT)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert all(isinstance(outcome.get("error"), LedgerLockedError) for _, outcome in callers)
    assert provider.committed() == 1
    assert [ledger.get(f"cap:INV-{n}") for n in range(4)] == [None] * 4


def test_a_fenced_write_in_a_batch_is_refused_alone(
    ledger: SQLiteEffectLedger, provider: FakePaymentProvider
) -> None:
    """One write of a batch is fenced out: it changes nothing, and the others commit."""
    executor = EffectExecutor(ledger)
    executor.execute(CONTRACT, {"invoice_id": "done", "amount_cents": 1}, provider.handler)
    holder, release = hold_writer(ledger)
    callers = [
        in_thread(
            lambda n=n: executor.execute(
                CONTRACT, {"invoice_id": f"INV-{n}", "amount_cents": 100}, provider.handler
            )
        )
        for n in range(2)
    ]
    queued(ledger, 2)
    stale = "not-the-token"
    fenced = in_thread(
        lambda: ledger.transition(
            "cap:done",
            Expect(lease_token=stale),
            Changes(EffectStatus.RECONCILING, lease=Lease(stale, current_owner(), 30.0)),
            (
                EventDraft(
                    EventType.RECONCILING, EffectStatus.CONFIRMED, EffectStatus.RECONCILING, 1
                ),
            ),
        )
    )
    queued(ledger, 3)
    release.set()
    for thread, _ in [(holder, None), *callers, fenced]:
        thread.join(WAIT)
    assert isinstance(fenced[1].get("error"), FencedWriteError)
    assert [outcome["result"].status for _, outcome in callers] == [EffectStatus.CONFIRMED] * 2
    assert ledger.get("cap:done").status is EffectStatus.CONFIRMED
    assert provider.committed() == 3
    assert ledger.verify().problems == ()


class Interrupted(Exception):
    """Raised by a signal handler in a caller waiting for the writer."""


def test_a_caller_interrupted_while_waiting_withdraws_its_write_and_never_blocks_others(
    ledger: SQLiteEffectLedger, provider: FakePaymentProvider
) -> None:
    """Ctrl-C (here: a timer signal) while waiting: its write is withdrawn; the next ones run."""
    executor = EffectExecutor(ledger)
    holder, release = hold_writer(ledger)
    ran: list[str] = []

    def interrupt(_signum: int, _frame: object) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:
        with pytest.raises(Interrupted):
            ledger._write(lambda _conn: ran.append("withdrawn write"))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert ledger._group._queue == []
    release.set()
    holder.join(WAIT)
    assert ran == []
    after, outcome = in_thread(
        lambda: executor.execute(
            CONTRACT, {"invoice_id": "after", "amount_cents": 1}, provider.handler
        )
    )
    after.join(WAIT)
    assert outcome["result"].status is EffectStatus.CONFIRMED
    assert provider.committed() == 1
