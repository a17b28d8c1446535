"""A handler that returned did commit: an output that cannot be stored still confirms (rule 3)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from support import ARGS, OPERATION, capture_contract

from effectguard import (
    EffectExecutor,
    EffectStatus,
    EventType,
    OutcomeProbeResult,
    OutputNotStored,
)
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan


class Handle:
    """A value no codec can store."""


def test_unstorable_output_confirms_once_and_every_caller_is_told(ledger):
    """An output with an object in it: CONFIRMED, not stored, OutputNotStored now and on replay."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    live = Handle()

    def handler(arguments, *, idempotency_key):
        response = provider.handler(arguments, idempotency_key=idempotency_key)
        return {**response, "handle": live}

    executor = EffectExecutor(ledger)
    contract = capture_contract(provider, probe=False)
    with pytest.raises(OutputNotStored) as fresh:
        executor.execute(contract, ARGS, handler)
    with pytest.raises(OutputNotStored) as replay:
        executor.execute(contract, ARGS, handler)

    assert fresh.value.path == "$.handle"
    assert fresh.value.type_name == "Handle"
    assert "$.handle is a Handle, which is not JSON-encodable" in str(fresh.value)
    assert fresh.value.output["handle"] is live
    assert fresh.value.result.status is EffectStatus.CONFIRMED
    assert (replay.value.has_output, replay.value.output) == (False, None)
    assert replay.value.path == "$.handle"
    record = ledger.get(OPERATION)
    assert record.status is EffectStatus.CONFIRMED
    assert record.output_json is None
    assert record.provider_operation_id == "cap_000001"
    assert "output not stored" in (record.reason or "")
    assert [e.type for e in ledger.events(OPERATION)][-1] is EventType.CONFIRMED
    assert provider.requests == 1
    assert provider.committed() == 1


def test_unstorable_output_of_an_async_handler_confirms_too(ledger):
    """The async driver follows the same rule: CONFIRMED, OutputNotStored, one commit."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)

    async def handler(arguments, *, idempotency_key):
        provider.handler(arguments, idempotency_key=idempotency_key)
        return {"handle": Handle()}

    executor = EffectExecutor(ledger)
    contract = capture_contract(provider, probe=False)
    for _ in range(2):
        with pytest.raises(OutputNotStored, match=r"\$\.handle"):
            asyncio.run(executor.execute_async(contract, ARGS, handler))
    assert ledger.get(OPERATION).status is EffectStatus.CONFIRMED
    assert provider.committed() == 1


def test_output_over_the_size_limit_confirms_without_being_stored(ledger):
    """An output over max_output_bytes: CONFIRMED, not stored, the limit named; one commit."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)

    def handler(arguments, *, idempotency_key):
        response = provider.handler(arguments, idempotency_key=idempotency_key)
        return {**response, "padding": "x" * 2000}

    executor = EffectExecutor(ledger)
    contract = capture_contract(provider, probe=False, max_output_bytes=1000)
    with pytest.raises(OutputNotStored, match="over the 1000-byte limit") as fresh:
        executor.execute(contract, ARGS, handler)
    assert "max_output_bytes" in str(fresh.value)
    with pytest.raises(OutputNotStored, match="over the 1000-byte limit"):
        executor.execute(contract, ARGS, handler)

    assert ledger.get(OPERATION).status is EffectStatus.CONFIRMED
    assert ledger.get(OPERATION).output_json is None
    assert provider.requests == 1
    assert provider.committed() == 1


def test_a_probe_finding_the_effect_with_an_unstorable_output_confirms_it(ledger):
    """Ack lost; the probe's COMMITTED output cannot be stored: CONFIRMED, not stored, no resend."""
    provider = FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]))

    def probe(arguments, *, idempotency_key):
        found = provider.probe(arguments, idempotency_key=idempotency_key)
        return OutcomeProbeResult.committed(
            {"found": found.output, "at": datetime(2026, 1, 1, tzinfo=UTC), "raw": Handle()},
            provider_operation_id=found.provider_operation_id,
        )

    executor = EffectExecutor(ledger)
    with pytest.raises(OutputNotStored, match=r"\$\.raw is a Handle") as fresh:
        executor.execute(capture_contract(provider, probe=probe), ARGS, provider.handler)

    assert fresh.value.has_output
    assert ledger.get(OPERATION).status is EffectStatus.CONFIRMED
    assert provider.requests == 1
    assert provider.committed() == 1


def test_a_false_postcondition_is_still_not_a_confirmation(ledger):
    """Not storable is not the same as refused: a false postcondition still never confirms."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)

    def handler(arguments, *, idempotency_key):
        provider.handler(arguments, idempotency_key=idempotency_key)
        return {"handle": Handle()}

    contract = capture_contract(provider, probe=False, postcondition=lambda out: False)
    result = EffectExecutor(ledger).execute(contract, ARGS, handler)

    assert result.status is EffectStatus.QUARANTINED
    assert provider.committed() == 1


def test_observers_hear_of_a_result_that_reaches_the_caller_as_output_not_stored(ledger):
    """The effect happened: an observer (the agent runtime) learns of it, fresh and on replay."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)

    def handler(arguments, *, idempotency_key):
        return {**provider.handler(arguments, idempotency_key=idempotency_key), "h": Handle()}

    heard = []
    executor = EffectExecutor(ledger, observers=[heard.append])
    contract = capture_contract(provider, probe=False)
    for _ in range(2):
        with pytest.raises(OutputNotStored):
            executor.execute(contract, ARGS, handler)
    results = [t.result for t in heard if t.result is not None]
    assert [(r.status, r.replayed) for r in results] == [
        (EffectStatus.CONFIRMED, False),
        (EffectStatus.CONFIRMED, True),
    ]
    assert provider.committed() == 1
