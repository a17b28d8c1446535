"""Overlap risk survives every way a caller can stop waiting for a handler that still runs.

Each test reproduces a path on which the provider used to commit twice; each
asserts the provider's own committed count.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable

import pytest
from support import ARGS, OPERATION, capture_contract, wait_until

from effectguard import EffectExecutor, EffectRejected, EffectStatus, EventType, OutcomeProbeResult
from effectguard._executor._leases import TOKENS
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, ProviderUnavailable


def _late_provider() -> FakePaymentProvider:
    return FakePaymentProvider(
        idempotency_guaranteed=False, faults=FaultPlan([Fault.LATE_COMMIT]), late_commit_after=30
    )


def test_a_fenced_handler_past_its_deadline_keeps_its_overlap_risk(ledger, clock):
    """Lease taken over, then the deadline passes: the handler still runs, so no resend."""
    provider = _late_provider()
    executor = EffectExecutor(ledger, clock=clock)
    contract = capture_contract(provider, handler_timeout=0.3, lease_seconds=30)
    results = []
    first = threading.Thread(
        target=lambda: results.append(executor.execute(contract, ARGS, provider.handler))
    )
    first.start()
    try:
        assert provider.wait_until_held(1)
        clock.advance(60)  # the first worker stalls past its lease
        assert executor.execute(contract, ARGS, provider.handler).status is (
            EffectStatus.OUTCOME_UNKNOWN
        )
        first.join(10)  # its deadline passes; its write is fenced
        assert ledger.get(OPERATION).overlap_risk
        again = executor.execute(contract, ARGS, provider.handler)
        assert again.status is EffectStatus.OUTCOME_UNKNOWN
        assert provider.requests == 1
    finally:
        provider.release_late()
    wait_until(lambda: ledger.get(OPERATION).status is EffectStatus.CONFIRMED)
    assert provider.committed() == 1


def test_one_attempts_late_end_keeps_another_attempts_overlap(ledger, clock):
    """Attempts share a lease token; attempt 1 ending late must not clear attempt 2's risk."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    first_ends, second_ends = threading.Event(), threading.Event()
    calls = []

    def handler(arguments, *, idempotency_key):
        calls.append(idempotency_key)
        if len(calls) == 1:
            first_ends.wait(30)
            msg = "attempt 1 failed before commit"
            raise ProviderUnavailable(msg)
        if len(calls) == 2:
            clock.advance(200)  # the retry outlives the provider's key retention
            second_ends.wait(30)
        return provider.handler(arguments, idempotency_key=idempotency_key)

    contract = capture_contract(
        provider,
        guaranteed=True,
        handler_timeout=0.3,
        provider_key_retention_seconds=100,
    )
    executor = EffectExecutor(ledger, clock=clock)
    try:
        executor.execute(contract, ARGS, handler)
        assert [h.attempt for h in ledger.get(OPERATION).overlap] == [1, 2]
        first_ends.set()
        wait_until(lambda: [h.attempt for h in ledger.get(OPERATION).overlap] == [2])
        later = executor.execute(contract, ARGS, handler)
        assert later.status is EffectStatus.OUTCOME_UNKNOWN
        assert len(calls) == 2
    finally:
        first_ends.set()
        second_ends.set()
    wait_until(lambda: ledger.get(OPERATION).status is EffectStatus.CONFIRMED)
    assert provider.committed() == 1


def test_cancelling_execute_async_keeps_a_sync_handlers_overlap(ledger):
    """A cancelled caller cannot stop the handler's thread: the next call must not resend."""
    provider = _late_provider()
    contract = capture_contract(provider)

    async def scenario() -> EffectStatus:
        executor = EffectExecutor(ledger)
        task = asyncio.create_task(executor.execute_async(contract, ARGS, provider.handler))
        assert await asyncio.to_thread(provider.wait_until_held, 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        second = await executor.execute_async(contract, ARGS, provider.handler)
        return second.status

    try:
        assert asyncio.run(scenario()) is EffectStatus.OUTCOME_UNKNOWN
        assert provider.requests == 1
    finally:
        provider.release_late()
    wait_until(lambda: ledger.get(OPERATION).status is EffectStatus.CONFIRMED)
    assert provider.committed() == 1


def test_cancelling_execute_async_keeps_an_unfinished_async_handlers_overlap(ledger):
    """An async handler still finishing its write after cancellation carries overlap risk."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    calls = []
    started = asyncio.Event()

    async def handler(arguments, *, idempotency_key):
        calls.append(idempotency_key)
        started.set()
        try:
            await asyncio.sleep(30 if len(calls) == 1 else 0)
        except asyncio.CancelledError:
            await asyncio.sleep(0.2)  # the client completes the write it had begun
        return await asyncio.to_thread(provider.handler, arguments, idempotency_key=idempotency_key)

    contract = capture_contract(provider)

    async def scenario() -> EffectStatus:
        executor = EffectExecutor(ledger)
        task = asyncio.create_task(executor.execute_async(contract, ARGS, handler))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        second = await executor.execute_async(contract, ARGS, handler)
        await asyncio.sleep(0.5)
        return second.status

    assert asyncio.run(scenario()) is EffectStatus.OUTCOME_UNKNOWN
    wait_until(lambda: ledger.get(OPERATION).status is EffectStatus.CONFIRMED)
    assert len(calls) == 1
    assert provider.committed() == 1


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt in the main thread, as in a terminal.

    A shell starts background jobs with SIGINT ignored, and Python then installs
    no handler for it; restore Python's own for this test, then put things back.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_while_waiting_records_unknown_then_the_late_result(ledger, ctrl_c_raises):
    """KeyboardInterrupt during the wait: OUTCOME_UNKNOWN now, the handler's return later."""
    provider = _late_provider()
    contract = capture_contract(provider, handler_timeout=20)
    threading.Thread(
        target=lambda: provider.wait_until_held(1) and os.kill(os.getpid(), signal.SIGINT),
        daemon=True,
    ).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            EffectExecutor(ledger).execute(contract, ARGS, provider.handler)
        record = ledger.get(OPERATION)
        assert record.status is EffectStatus.OUTCOME_UNKNOWN
        assert record.overlap_risk
    finally:
        provider.release_late()
    wait_until(lambda: ledger.get(OPERATION).status is EffectStatus.CONFIRMED)
    assert provider.committed() == 1


def _ctrl_c_in_handler_thread_start(
    monkeypatch, ledger, *, before_raising: Callable[[], object] = lambda: None
) -> dict:
    """The handler thread's ``Thread.start`` raises KeyboardInterrupt once the thread is launched.

    As when SIGINT lands while ``start`` waits for the new thread to signal it
    has started. Returns what it saw: the thread, and the lease token at that moment.
    """
    real_start = threading.Thread.start
    seen: dict = {}

    def start(thread: threading.Thread) -> None:
        real_start(thread)
        if "thread" in seen or not thread.name.startswith("effectguard-handler-"):
            return
        seen["thread"] = thread
        seen["token"] = ledger.get(OPERATION).lease_token
        before_raising()
        raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", start)
    return seen


def _dispatch(driver: str, executor: EffectExecutor, contract, handler) -> object:
    if driver == "execute":
        return executor.execute(contract, ARGS, handler)
    return asyncio.run(executor.execute_async(contract, ARGS, handler))


@pytest.mark.parametrize("driver", ["execute", "execute_async"])
def test_ctrl_c_while_the_handler_thread_starts_records_the_late_result(
    ledger, monkeypatch, driver
):
    """Interrupted inside Thread.start once the handler runs: unknown now, its return later."""
    provider = _late_provider()
    contract = capture_contract(provider, handler_timeout=20)
    seen = _ctrl_c_in_handler_thread_start(
        monkeypatch, ledger, before_raising=lambda: provider.wait_until_held(1)
    )
    try:
        with pytest.raises(KeyboardInterrupt):
            _dispatch(driver, EffectExecutor(ledger), contract, provider.handler)
        record = ledger.get(OPERATION)
        assert record.status is EffectStatus.OUTCOME_UNKNOWN
        assert record.overlap_risk
        assert TOKENS.active(seen["token"])  # the handler still runs under it
    finally:
        provider.release_late()
    wait_until(lambda: ledger.get(OPERATION).status is EffectStatus.CONFIRMED)
    assert ledger.events(OPERATION)[-1].type is EventType.LATE_RESULT
    wait_until(lambda: not TOKENS.active(seen["token"]))
    assert provider.requests == 1
    assert provider.committed() == 1


@pytest.mark.parametrize("driver", ["execute", "execute_async"])
def test_ctrl_c_before_the_handler_thread_runs_the_handler_means_it_never_does(
    ledger, monkeypatch, driver
):
    """Thread launched but not yet at the handler when interrupted: it never sends; no leak."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    contract = capture_contract(provider, handler_timeout=20)
    gate = threading.Event()
    real_start = threading.Thread.start

    def hold_back_then_start(thread: threading.Thread) -> None:
        if thread.name.startswith("effectguard-handler-"):
            run = thread.run

            def run_once_let_through() -> None:
                gate.wait(10)
                run()

            thread.run = run_once_let_through  # type: ignore[method-assign]
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", hold_back_then_start)
    seen = _ctrl_c_in_handler_thread_start(monkeypatch, ledger)
    try:
        with pytest.raises(KeyboardInterrupt):
            _dispatch(driver, EffectExecutor(ledger), contract, provider.handler)
    finally:
        gate.set()
    seen["thread"].join(10)
    record = ledger.get(OPERATION)
    assert record.status is EffectStatus.OUTCOME_UNKNOWN
    assert not record.overlap_risk
    assert not TOKENS.active(seen["token"])
    assert provider.requests == 0
    assert provider.committed() == 0


def test_context_variables_reach_a_handler_running_under_a_deadline(ledger):
    """A handler in its deadline thread sees the caller's context (a lent executor, say)."""
    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="missing")
    marker.set("caller's")
    seen = []
    provider = FakePaymentProvider()

    def handler(arguments, *, idempotency_key):
        seen.append(marker.get())
        return provider.handler(arguments, idempotency_key=idempotency_key)

    EffectExecutor(ledger).execute(capture_contract(provider, handler_timeout=5), ARGS, handler)
    assert seen == ["caller's"]
    assert provider.committed() == 1


def test_evidence_without_a_json_form_is_recorded_not_fatal(ledger):
    """A datetime in probe or rejection evidence is stored as text; the outcome is recorded."""
    import datetime as dt  # noqa: PLC0415 - used by this test only

    provider = FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]))

    def probe(arguments, *, idempotency_key) -> OutcomeProbeResult:
        found = provider.probe(arguments, idempotency_key=idempotency_key)
        checked = {"checked_at": dt.datetime.now(dt.UTC)}
        return OutcomeProbeResult.committed(found.output, evidence=checked)

    result = EffectExecutor(ledger).execute(
        capture_contract(provider, probe=probe), ARGS, provider.handler
    )
    assert result.status is EffectStatus.CONFIRMED
    assert "datetime" in result.evidence["probe_evidence"]["checked_at"]
    assert provider.committed() == 1

    def decline(arguments, *, idempotency_key):
        raise EffectRejected("card declined", evidence={"at": dt.datetime.now(dt.UTC)})

    rejected = EffectExecutor(ledger).execute(
        capture_contract(None, probe=False), {**ARGS, "invoice_id": "INV-9"}, decline
    )
    assert rejected.status is EffectStatus.REJECTED
    assert "datetime" in rejected.evidence["at"]


def test_an_unreadable_proc_entry_does_not_make_a_live_owner_gone(tmp_path):
    """Out of file descriptors, /proc cannot be read; a live owner is still presumed alive."""
    script = textwrap.dedent(
        """
        import resource, subprocess, sys
        from effectguard._process import _start_time, current_owner, process_gone
        from effectguard._model import LeaseOwner
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        me = current_owner()
        owner = LeaseOwner(me.host, me.boot_id, me.pid_namespace, child.pid,
                           _start_time(child.pid))
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        hoard = []
        try:
            while True:
                hoard.append(open(sys.executable, "rb"))
        except OSError:
            pass
        answer = process_gone(owner)
        for handle in hoard:
            handle.close()
        child.kill()
        print(answer)
        """
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert completed.stdout.strip() == "False"


def test_an_async_handler_that_fails_before_its_coroutine_exists_is_recorded(ledger):
    """A coroutine function called with the wrong signature is an outcome, not a stranded row."""
    provider = FakePaymentProvider()

    async def no_key_parameter(arguments):  # the executor passes idempotency_key=
        return provider.handler(arguments, idempotency_key="never")

    contract = capture_contract(provider, probe=False)
    result = asyncio.run(EffectExecutor(ledger).execute_async(contract, ARGS, no_key_parameter))
    record = ledger.get(OPERATION)
    assert record.status is EffectStatus.QUARANTINED
    unknown = [e for e in ledger.events(OPERATION) if e.type is EventType.OUTCOME_UNKNOWN]
    assert "TypeError" in unknown[0].evidence["handler"]
    assert result.status is EffectStatus.QUARANTINED
    assert not TOKENS.active(record.lease_token or "")
    assert provider.committed() == 0


def test_a_lone_surrogate_in_a_handlers_error_is_recorded_not_fatal(ledger):
    """An exception message UTF-8 cannot encode is stored escaped, never left DISPATCHED."""
    provider = FakePaymentProvider()

    def handler(arguments, *, idempotency_key):
        provider.handler(arguments, idempotency_key=idempotency_key)
        raise ValueError("gateway said b\udcff")  # text decoded with surrogateescape

    result = EffectExecutor(ledger).execute(capture_contract(provider, probe=False), ARGS, handler)
    record = ledger.get(OPERATION)
    assert result.status is EffectStatus.QUARANTINED
    assert record.status is EffectStatus.QUARANTINED
    unknown = [e for e in ledger.events(OPERATION) if e.type is EventType.OUTCOME_UNKNOWN]
    assert "gateway said b\\udcff" in unknown[0].evidence["handler"]
    assert provider.committed() == 1
