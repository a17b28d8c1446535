"""The move to CONFIRMED is one transition, whoever makes it: it always clears overlap risk."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from support import ARGS, KEY, OPERATION, capture_contract, wait_until

from effectguard import EffectExecutor, EffectStatus, EventType
from effectguard.ledger._protocol import to_confirmed
from effectguard.testkit import FakePaymentProvider, ManualClock

DRIVERS = ["sync", "async"]


def _execute(driver: str, executor: EffectExecutor, *args: Any) -> Any:
    if driver == "sync":
        return executor.execute(*args)
    return asyncio.run(executor.execute_async(*args))


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_retry_that_confirms_leaves_no_overlap_risk_while_the_old_attempt_runs(ledger, driver):
    """Attempt 1 passes its deadline and keeps running; attempt 2 confirms: no overlap risk.

    The late return of attempt 1 afterwards is evidence only: the confirmed
    output stays attempt 2's, and the provider holds one effect.
    """
    provider = FakePaymentProvider(idempotency_guaranteed=True)
    gate = threading.Event()
    calls: list[str] = []

    def handler(arguments, *, idempotency_key):
        calls.append(idempotency_key)
        attempt = len(calls)
        if attempt == 1:
            gate.wait(30)  # past its deadline; it sends only once released
        response = provider.handler(arguments, idempotency_key=idempotency_key)
        return {**response, "attempt": attempt}

    executor = EffectExecutor(ledger, clock=ManualClock())
    contract = capture_contract(provider, guaranteed=True, handler_timeout=0.05)
    try:
        result = _execute(driver, executor, contract, ARGS, handler)
        record = ledger.get(OPERATION)
        assert result.status is EffectStatus.CONFIRMED
        assert result.attempts == 2
        assert record.status is EffectStatus.CONFIRMED
        assert not record.overlap_risk
        assert record.overlap == ()
        assert record.evidence.get("overlap_risk") is not True
        assert provider.committed() == 1
    finally:
        gate.set()

    wait_until(lambda: ledger.events(OPERATION)[-1].type is EventType.LATE_RESULT)
    late = ledger.events(OPERATION)[-1]
    assert late.to_status is EffectStatus.CONFIRMED
    assert late.evidence["matches_confirmed_output"] is False
    record = ledger.get(OPERATION)
    assert record.output["attempt"] == 2
    assert result.output["attempt"] == 2
    assert not record.overlap_risk
    assert calls == [KEY, KEY]
    assert provider.requests == 2
    assert provider.committed() == 1


def test_the_move_to_confirmed_releases_the_lease_clears_overlap_and_keeps_its_evidence():
    """The one builder every confirming writer uses: no lease, no overlap, evidence on both."""
    changes, event = to_confirmed(
        EffectStatus.RECONCILING,
        3,
        output_json='{"id":"cap_1"}',
        provider_operation_id="cap_1",
        reason="the probe found the effect committed",
        evidence={"probe": "COMMITTED"},
        event=EventType.LATE_RESULT,
    )
    assert changes.status is EffectStatus.CONFIRMED
    assert (changes.lease, changes.overlap) == (None, ())
    assert changes.evidence == event.evidence == {"probe": "COMMITTED"}
    assert (event.type, event.from_status, event.to_status, event.attempt) == (
        EventType.LATE_RESULT,
        EffectStatus.RECONCILING,
        EffectStatus.CONFIRMED,
        3,
    )
