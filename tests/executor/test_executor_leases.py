"""Leases: who may write an operation, for how long, and what happens when they lapse."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from support import ARGS, KEY, OPERATION, capture_contract, dead_owner, foreign_owner, wait_until

from effectguard import (
    EffectExecutor,
    EffectStatus,
    EventType,
    LedgerUnavailableError,
    SQLiteEffectLedger,
)
from effectguard._model import LeaseOwner
from effectguard._process import _start_time, current_owner, is_this_process, process_gone
from effectguard.ledger import Lease, NewOperation
from effectguard.testkit import FakePaymentProvider


def _claim_as(ledger, owner: LeaseOwner, clock, *, lease_seconds: float = 30.0) -> None:
    """Record a claim of the test operation held by ``owner``, as its process would have."""
    call = EffectExecutor(ledger)._prepare(capture_contract(None), ARGS, print, 0.0)
    ledger.claim(
        NewOperation(
            OPERATION,
            "payments.capture",
            1,
            call.fingerprint,
            KEY,
            ARGS,
            3,
            Lease("their-token", owner, lease_seconds),
        ),
        now=clock(),
    )


def test_live_lease_of_another_worker_is_answered_not_dispatched(ledger, clock):
    """A live lease held elsewhere: the caller gets DISPATCHED and nothing is sent."""
    provider = FakePaymentProvider()
    _claim_as(ledger, foreign_owner(), clock)
    result = EffectExecutor(ledger, clock=clock).execute(
        capture_contract(provider), ARGS, provider.handler
    )
    assert result.status is EffectStatus.DISPATCHED
    assert "another worker" in (result.reason or "")
    assert provider.requests == 0


def test_foreign_owner_is_never_presumed_gone_before_expiry(ledger, clock):
    """An owner on another host keeps its lease until expiry; then overlap risk is recorded."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    _claim_as(ledger, foreign_owner(), clock)
    executor = EffectExecutor(ledger, clock=clock)
    contract = capture_contract(provider)

    clock.advance(29)
    assert executor.execute(contract, ARGS, provider.handler).status is EffectStatus.DISPATCHED
    clock.advance(2)
    expired = executor.execute(contract, ARGS, provider.handler)

    # The probe finds nothing, but the other host may still send: no resend without a guarantee.
    assert expired.status is EffectStatus.OUTCOME_UNKNOWN
    record = ledger.get(OPERATION)
    assert record.overlap_risk
    assert record.overlap[0].owner == foreign_owner()
    assert provider.requests == 0


def test_owner_gone_on_this_host_is_taken_over_at_once_and_retried(ledger, clock):
    """A dead owner's live lease counts as expired; NOT_COMMITTED then allows the dispatch."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    _claim_as(ledger, dead_owner(), clock)

    result = EffectExecutor(ledger, clock=clock).execute(
        capture_contract(provider), ARGS, provider.handler
    )

    assert result.status is EffectStatus.CONFIRMED
    assert result.attempts == 2
    expired = next(e for e in ledger.events(OPERATION) if e.type is EventType.OWNER_GONE)
    assert expired.evidence["owner_gone"] is True
    assert provider.committed() == 1


def test_stale_lease_holder_write_is_refused_and_kept_as_evidence(ledger, clock):
    """A holder whose lease was taken over cannot record its outcome; it becomes evidence."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    gate, started = threading.Event(), threading.Event()

    def slow_handler(arguments, *, idempotency_key):
        started.set()
        gate.wait(30)
        return provider.handler(arguments, idempotency_key=idempotency_key)

    contract = capture_contract(provider, lease_seconds=10)
    stale = EffectExecutor(ledger, clock=clock)
    results = []
    worker = threading.Thread(
        target=lambda: results.append(stale.execute(contract, ARGS, slow_handler))
    )
    worker.start()
    try:
        started.wait(10)
        clock.advance(11)
        taker = EffectExecutor(ledger, clock=clock).execute(contract, ARGS, provider.handler)
        # The stale holder's handler is still running here: overlap risk, no resend.
        assert taker.status is EffectStatus.OUTCOME_UNKNOWN
        assert provider.requests == 0
    finally:
        gate.set()
        worker.join(10)

    assert results[0].status is EffectStatus.CONFIRMED
    assert not results[0].replayed
    types = [event.type for event in ledger.events(OPERATION)]
    assert EventType.LEASE_EXPIRED in types
    assert types[-1] is EventType.LATE_RESULT
    assert EventType.CONFIRMED not in types  # the fenced CONFIRMED write never landed
    assert ledger.get(OPERATION).output == results[0].output
    assert provider.committed() == 1


def test_lease_is_renewed_while_the_handler_runs(tmp_path: Path):
    """A handler running longer than the lease keeps it live: nobody else may take over."""
    provider = FakePaymentProvider()
    gate, started = threading.Event(), threading.Event()

    def slow_handler(arguments, *, idempotency_key):
        started.set()
        gate.wait(30)
        return provider.handler(arguments, idempotency_key=idempotency_key)

    with SQLiteEffectLedger(tmp_path / "ledger.db") as ledger:
        contract = capture_contract(provider, lease_seconds=0.3)
        worker = threading.Thread(
            target=lambda: EffectExecutor(ledger).execute(contract, ARGS, slow_handler)
        )
        worker.start()
        try:
            started.wait(10)
            first_expiry = ledger.get(OPERATION).lease_expires_at
            wait_until(lambda: ledger.get(OPERATION).lease_expires_at > first_expiry)
            wait_until(
                lambda: (
                    (ledger.get(OPERATION).lease_expires_at - first_expiry).total_seconds() > 0.5
                )
            )
            assert ledger.get(OPERATION).lease_live
        finally:
            gate.set()
            worker.join(10)
        assert ledger.get(OPERATION).status is EffectStatus.CONFIRMED
    assert provider.committed() == 1


def test_ledger_failure_while_recording_leaves_dispatched_and_is_reconciled_later(tmp_path: Path):
    """The outcome write fails: the caller sees LedgerUnavailableError; a later call reconciles."""
    path = tmp_path / "ledger.db"
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    blocker: list[sqlite3.Connection] = []

    def handler_then_lock_the_ledger(arguments, *, idempotency_key):
        response = provider.handler(arguments, idempotency_key=idempotency_key)
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")  # another writer holds the lock past the busy timeout
        blocker.append(conn)
        return response

    with SQLiteEffectLedger(path, busy_timeout=0.1) as ledger:
        executor = EffectExecutor(ledger)
        contract = capture_contract(provider)
        with pytest.raises(LedgerUnavailableError, match="locked"):
            executor.execute(contract, ARGS, handler_then_lock_the_ledger)
        blocker[0].rollback()
        blocker[0].close()
        assert ledger.get(OPERATION).status is EffectStatus.DISPATCHED

        result = executor.execute(contract, ARGS, provider.handler)

    assert result.status is EffectStatus.CONFIRMED
    assert result.attempts == 1
    assert provider.requests == 1
    assert provider.committed() == 1


def test_wait_for_peer_waits_for_the_other_worker_and_replays_its_result(ledger):
    """A caller asked to wait replays the outcome of the worker that holds the operation."""
    provider = FakePaymentProvider()
    gate, started = threading.Event(), threading.Event()

    def slow_handler(arguments, *, idempotency_key):
        started.set()
        gate.wait(30)
        return provider.handler(arguments, idempotency_key=idempotency_key)

    contract = capture_contract(provider)
    worker = threading.Thread(
        target=lambda: EffectExecutor(ledger).execute(contract, ARGS, slow_handler)
    )
    worker.start()
    started.wait(10)
    threading.Timer(0.2, gate.set).start()
    waited = EffectExecutor(ledger, poll_interval=0.01).execute(
        contract, ARGS, provider.handler, wait_for_peer=20
    )
    worker.join(10)

    assert waited.status is EffectStatus.CONFIRMED
    assert waited.replayed
    assert provider.requests == 1
    assert provider.committed() == 1


def test_process_identity_distinguishes_gone_reused_and_foreign_owners():
    """Only an owner in this process table that is absent or was replaced counts as gone."""
    me = current_owner()
    assert is_this_process(me)
    assert not process_gone(me)
    assert process_gone(dead_owner())
    assert not process_gone(foreign_owner())

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        start = _start_time(sleeper.pid)
        alive = LeaseOwner(me.host, me.boot_id, me.pid_namespace, sleeper.pid, start)
        reused = LeaseOwner(me.host, me.boot_id, me.pid_namespace, sleeper.pid, start + "0")
        assert not process_gone(alive)
        assert process_gone(reused)  # same pid, another process: the owner is gone
    finally:
        sleeper.kill()
    sleeper.wait()
    assert process_gone(alive)
