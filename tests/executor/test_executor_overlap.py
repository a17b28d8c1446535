"""A local deadline is not cancellation: overlap risk after a handler passes its deadline."""

from __future__ import annotations

import asyncio
import threading

from support import ARGS, KEY, OPERATION, capture_contract, wait_until

from effectguard import EffectExecutor, EffectStatus, EventType, OutcomeProbeResult
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan


def _late_provider(*, guaranteed: bool) -> FakePaymentProvider:
    """A provider whose first request is held until released, then commits."""
    return FakePaymentProvider(
        idempotency_guaranteed=guaranteed,
        faults=FaultPlan([Fault.LATE_COMMIT]),
        late_commit_after=30.0,
    )


def test_late_thread_handler_blocks_retry_then_confirms_when_it_finishes(ledger):
    """Deadline passed, probe says NOT_COMMITTED: no resend; the late return confirms it."""
    provider = _late_provider(guaranteed=False)
    executor = EffectExecutor(ledger)
    contract = capture_contract(provider, handler_timeout=0.05)
    try:
        first = executor.execute(contract, ARGS, provider.handler)
        assert first.status is EffectStatus.OUTCOME_UNKNOWN
        assert "overlap risk" in (first.reason or "")
        assert ledger.get(OPERATION).overlap_risk

        second = executor.execute(contract, ARGS, provider.handler)
        assert second.status is EffectStatus.OUTCOME_UNKNOWN
        assert provider.requests == 1
        assert provider.committed() == 0
    finally:
        provider.release_late()

    wait_until(lambda: ledger.get(OPERATION).status is EffectStatus.CONFIRMED)
    record = ledger.get(OPERATION)
    assert not record.overlap_risk
    assert record.output["id"] == "cap_000001"
    assert ledger.events(OPERATION)[-1].type is EventType.LATE_RESULT

    replay = executor.execute(contract, ARGS, provider.handler)
    assert replay.status is EffectStatus.CONFIRMED
    assert replay.output == record.output
    assert provider.requests == 1
    assert provider.committed() == 1


def test_guaranteed_key_allows_the_retry_and_the_provider_keeps_one_effect(ledger):
    """With a guaranteed key the resend goes out despite overlap; the provider deduplicates."""
    provider = _late_provider(guaranteed=True)

    def probe_then_let_the_late_request_land(arguments, *, idempotency_key):
        answer = provider.probe(arguments, idempotency_key=idempotency_key)
        provider.release_late()
        wait_until(lambda: provider.committed() == 1)
        return answer

    keys = []
    first_ack_delivered = threading.Event()

    def handler(arguments, *, idempotency_key):
        keys.append(idempotency_key)
        response = provider.handler(arguments, idempotency_key=idempotency_key)
        if len(keys) == 1:
            # The first request has committed; its acknowledgement arrives only later.
            first_ack_delivered.wait(30)
        return response

    contract = capture_contract(
        provider, guaranteed=True, probe=probe_then_let_the_late_request_land, handler_timeout=0.05
    )
    try:
        result = EffectExecutor(ledger).execute(contract, ARGS, handler)
    finally:
        first_ack_delivered.set()

    assert result.status is EffectStatus.CONFIRMED
    assert result.attempts == 2
    assert keys == [KEY, KEY]
    assert result.output["id"] == "cap_000001"
    wait_until(lambda: ledger.events(OPERATION)[-1].type is EventType.LATE_RESULT)
    late = ledger.events(OPERATION)[-1]
    assert late.evidence["matches_confirmed_output"] is True
    assert provider.committed() == 1


def test_late_return_confirms_a_quarantined_operation(ledger):
    """Quarantined at the deadline (no probe, no guarantee); the handler's late return confirms."""
    provider = _late_provider(guaranteed=False)
    executor = EffectExecutor(ledger)
    contract = capture_contract(provider, probe=False, handler_timeout=0.05)
    try:
        result = executor.execute(contract, ARGS, provider.handler)
        assert result.status is EffectStatus.QUARANTINED
        assert provider.committed() == 0
    finally:
        provider.release_late()

    wait_until(lambda: ledger.get(OPERATION).status is EffectStatus.CONFIRMED)
    assert executor.execute(contract, ARGS, provider.handler).replayed
    assert provider.requests == 1
    assert provider.committed() == 1


def test_late_failure_clears_overlap_and_the_next_call_retries(ledger):
    """A late handler that fails clears the overlap risk; NOT_COMMITTED then allows one retry."""
    gate = threading.Event()
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    calls = []

    def handler(arguments, *, idempotency_key):
        calls.append(idempotency_key)
        if len(calls) == 1:
            gate.wait(30)
            msg = "connection reset before the request was written"
            raise ConnectionError(msg)
        return provider.handler(arguments, idempotency_key=idempotency_key)

    executor = EffectExecutor(ledger)
    contract = capture_contract(provider, handler_timeout=0.05)
    assert executor.execute(contract, ARGS, handler).status is EffectStatus.OUTCOME_UNKNOWN
    gate.set()
    wait_until(lambda: not ledger.get(OPERATION).overlap_risk)

    result = executor.execute(contract, ARGS, handler)
    assert result.status is EffectStatus.CONFIRMED
    assert result.attempts == 2
    assert len(calls) == 2
    assert provider.committed() == 1


def test_cancelled_async_handler_carries_no_overlap_risk(ledger):
    """An async handler cancelled at its deadline has stopped: NOT_COMMITTED allows the retry."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    calls = []

    async def handler(arguments, *, idempotency_key):
        calls.append(idempotency_key)
        if len(calls) == 1:
            await asyncio.sleep(30)
        return provider.handler(arguments, idempotency_key=idempotency_key)

    contract = capture_contract(provider, handler_timeout=0.05)
    result = asyncio.run(EffectExecutor(ledger).execute_async(contract, ARGS, handler))

    assert result.status is EffectStatus.CONFIRMED
    assert result.attempts == 2
    assert len(calls) == 2
    assert provider.committed() == 1


def test_sync_handler_under_execute_async_keeps_overlap_risk(ledger):
    """A sync handler past its deadline under execute_async is still a thread that may send."""
    provider = _late_provider(guaranteed=False)
    contract = capture_contract(provider, handler_timeout=0.05)
    try:
        result = asyncio.run(EffectExecutor(ledger).execute_async(contract, ARGS, provider.handler))
        assert result.status is EffectStatus.OUTCOME_UNKNOWN
        assert ledger.get(OPERATION).overlap_risk
        assert provider.requests == 1
    finally:
        provider.release_late()
    wait_until(lambda: ledger.get(OPERATION).status is EffectStatus.CONFIRMED)
    assert provider.committed() == 1


def test_async_probe_is_awaited(ledger):
    """An async probe settles an unknown outcome under execute_async."""
    provider = FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]))

    async def probe(arguments, *, idempotency_key) -> OutcomeProbeResult:
        await asyncio.sleep(0)
        return provider.probe(arguments, idempotency_key=idempotency_key)

    result = asyncio.run(
        EffectExecutor(ledger).execute_async(
            capture_contract(provider, probe=probe), ARGS, provider.handler
        )
    )
    assert result.status is EffectStatus.CONFIRMED
    assert provider.requests == 1
    assert provider.committed() == 1
