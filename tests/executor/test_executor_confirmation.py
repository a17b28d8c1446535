"""The move to CONFIRMED is one transition, whoever makes it: it always clears overlap risk."""

from __future__ import annotations

import asyncio
import math
import threading
from typing import Any

import pytest
from support import ARGS, KEY, OPERATION, capture_contract, wait_until

from effectguard import EffectContract, EffectExecutor, EffectStatus, EventType
from effectguard._codec import TAGGED
from effectguard._executor._calls import Outcome, new_outcome
from effectguard._executor._machine import confirmation
from effectguard._executor._outputs import Stored, store
from effectguard._fingerprint import canonical_json
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


@pytest.mark.parametrize(
    "stored",
    [
        Stored('{"ok":true}', "cap_1"),
        Stored(None, None, {"reason": "too big", "path": "$", "type": "dict", "hint": "h"}),
    ],
)
def test_a_fresh_confirmation_is_the_one_to_confirmed_builds(stored):
    """The straight path builds its change and event positionally: the builder's values."""
    outcome = new_outcome(Outcome.RETURNED, {"ok": True}, None, False)
    expect, changes, event = confirmation(1, "tok", outcome, stored)
    want_changes, want_event = to_confirmed(
        EffectStatus.DISPATCHED,
        1,
        output_json=stored.json,
        provider_operation_id=stored.provider_operation_id,
        reason=stored.note,
        evidence=stored.evidence({"handler": outcome.describe()}),
    )
    assert (changes, event) == (want_changes, want_event)
    assert type(changes) is type(want_changes)
    assert (expect.lease_token, expect.statuses, expect.event_count) == ("tok", None, None)


@pytest.mark.parametrize(
    "output",
    [
        {"n": 1, "ok": True, "x": None, "f": 1.5, "l": [1, "a", [], {}]},
        [1, 2, {"a": "b"}],
        "text",
        7,
        None,
        {"$date": "2026-01-01"},  # a caller's dict that looks like a tag: wrapped
        {"t": (1, 2)},  # a tuple: tagged
        {"s": "é"},  # not ASCII
        {"a": "$x"},
        {"deep": [[[[[[[[[[1]]]]]]]]]]},
    ],
)
def test_the_plain_output_fast_path_stores_what_the_codec_would(output):
    """An output of plain JSON data is stored as the default codec and the check would store it."""
    contract = EffectContract(name="t.plain", operation_id=lambda arguments: "op")
    text = canonical_json(TAGGED.encode(output))
    assert store(contract, output) == Stored(text, None)


@pytest.mark.parametrize("output", [{"x": math.nan}, [math.inf], {"a": [{"b": -math.inf}]}])
def test_a_number_json_cannot_hold_is_not_stored_on_the_fast_path_either(output):
    """NaN and infinity, at any depth: not stored (a marker says why), never an exception."""
    contract = EffectContract(name="t.nan", operation_id=lambda arguments: "op")
    stored = store(contract, output)
    assert isinstance(stored, Stored)
    assert stored.json is None
    assert stored.not_stored is not None


def test_the_plain_output_fast_path_keeps_the_size_limit():
    """An output over max_output_bytes is not stored, on the fast path as on the general one."""
    contract = EffectContract(
        name="t.big", operation_id=lambda arguments: "op", max_output_bytes=10
    )
    stored = store(contract, {"text": "x" * 20})
    assert isinstance(stored, Stored)
    assert stored.json is None
    assert stored.not_stored is not None
