"""A tool that fails explains itself: the handler's exception is chained, named, and logged."""

from __future__ import annotations

import asyncio
import logging
import shlex
from typing import Any

import pytest

from effectguard import (
    EffectExecutor,
    EffectOutcomeUnknown,
    EffectQuarantined,
    EffectRejected,
    EffectStatus,
    effect,
)
from effectguard.testkit import FakePaymentProvider, ManualClock

OPERATION = "invoice:INV-1042:capture"
DRIVERS = ["sync", "async"]


def _buggy_tools(provider: FakePaymentProvider, executor: EffectExecutor) -> dict[str, Any]:
    """A capture that sends, then trips over a plain bug: the same tool, sync and async."""

    @effect(operation_id="invoice:{invoice_id}:capture", executor=executor, name="tests.buggy")
    def capture(invoice_id: str, amount_cents: int) -> dict[str, Any]:
        response = provider.capture(invoice_id, amount_cents)
        return undefined_name + response  # type: ignore[name-defined] # noqa: F821 - the bug under test

    @effect(operation_id="invoice:{invoice_id}:capture", executor=executor, name="tests.buggy")
    async def capture_async(invoice_id: str, amount_cents: int) -> dict[str, Any]:
        response = provider.capture(invoice_id, amount_cents)
        return undefined_name + response  # type: ignore[name-defined] # noqa: F821 - the bug under test

    return {"sync": capture, "async": capture_async}


def _call(tool: Any, driver: str) -> Any:
    if driver == "sync":
        return tool("INV-1042", 1999)
    return asyncio.run(tool("INV-1042", 1999))


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_plain_bug_is_chained_named_and_says_what_to_do(ledger, driver):
    """QUARANTINED, chained from the NameError, whose type and message the error and result name."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    tool = _buggy_tools(provider, EffectExecutor(ledger, clock=ManualClock()))[driver]

    with pytest.raises(EffectQuarantined) as raised:
        _call(tool, driver)

    error = raised.value
    assert isinstance(error.__cause__, NameError)
    assert "undefined_name" in str(error.__cause__)
    message = str(error)
    assert "NameError: name 'undefined_name' is not defined" in message
    assert "may already have sent" in message
    assert "does not guarantee idempotency" in message
    path = getattr(ledger, "path", None)  # the ledger is named: a file by its path
    named = "LEDGER_URL" if path is None else shlex.quote(str(path.resolve()))
    assert f"agent-effect-ops --db {named} show {OPERATION}" in message
    assert "confirm" in message
    assert "authorize-retry" in message
    result = error.result
    assert result.status is EffectStatus.QUARANTINED
    assert "NameError: name 'undefined_name' is not defined" in (result.reason or "")
    assert result.evidence["error"] == {
        "type": "NameError",
        "message": "name 'undefined_name' is not defined",
    }
    assert result.handler_error is error.__cause__
    assert provider.requests == 1
    assert provider.committed() == 1


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_later_call_replays_the_explanation_and_sends_nothing(ledger, driver):
    """The quarantined operation called again: the same cause, from the ledger, nothing resent."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    tool = _buggy_tools(provider, EffectExecutor(ledger, clock=ManualClock()))[driver]
    with pytest.raises(EffectQuarantined):
        _call(tool, driver)

    with pytest.raises(EffectQuarantined) as again:
        _call(tool, driver)

    assert again.value.result.replayed
    assert again.value.__cause__ is None  # no handler ran in this call
    assert "NameError: name 'undefined_name' is not defined" in str(again.value)
    assert provider.requests == 1
    assert provider.committed() == 1


def test_an_unknown_outcome_kept_for_later_names_the_cause_and_the_next_step(ledger):
    """KEEP_UNKNOWN: EffectOutcomeUnknown chains the handler's error and says to call again."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)

    @effect(
        operation_id="invoice:{invoice_id}:capture",
        executor=EffectExecutor(ledger, clock=ManualClock()),
        unknown_outcome="keep_unknown",
        name="tests.kept",
    )
    def capture(invoice_id: str, amount_cents: int) -> dict[str, Any]:
        provider.capture(invoice_id, amount_cents)
        msg = "read timed out"
        raise TimeoutError(msg)

    with pytest.raises(EffectOutcomeUnknown) as raised:
        capture("INV-1042", 1999)
    assert isinstance(raised.value.__cause__, TimeoutError)
    assert "TimeoutError: read timed out" in str(raised.value)
    assert "call again later" in str(raised.value)
    assert provider.committed() == 1


@pytest.mark.parametrize("driver", DRIVERS)
def test_the_quarantine_is_logged_as_a_warning_with_the_operation(ledger, driver, caplog):
    """WARNING records on ``effectguard.executor`` say why, with operation, contract and status."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    tool = _buggy_tools(provider, EffectExecutor(ledger, clock=ManualClock()))[driver]
    caplog.set_level(logging.DEBUG, logger="effectguard")
    with pytest.raises(EffectQuarantined):
        _call(tool, driver)

    records = [r for r in caplog.records if r.name.startswith("effectguard")]
    assert records
    for record in records:
        assert record.name == "effectguard.executor"
        assert record.operation_id == OPERATION
        assert record.contract == "tests.buggy"
    warnings = [(r.status, r.getMessage()) for r in records if r.levelno == logging.WARNING]
    assert [status for status, _ in warnings] == ["QUARANTINED"]  # a person is needed: once
    assert all("NameError" in message for _, message in warnings)
    info = [(r.status, r.getMessage()) for r in records if r.levelno == logging.INFO]
    assert [status for status, _ in info] == ["OUTCOME_UNKNOWN"]  # on its way to the probe
    assert "NameError" in info[0][1]
    debug = [r.status for r in records if r.levelno == logging.DEBUG]
    assert debug == ["DISPATCHED", "RECONCILING", "QUARANTINED"]
    assert provider.committed() == 1


def test_confirmed_replayed_and_rejected_are_logged_at_info(ledger, caplog):
    """INFO for a confirmation, a replay and a rejection; each record carries its extras."""
    provider = FakePaymentProvider()
    executor = EffectExecutor(ledger, clock=ManualClock())

    @effect(operation_id="invoice:{invoice_id}:capture", executor=executor, name="tests.ok")
    def capture(invoice_id: str, amount_cents: int) -> dict[str, Any]:
        return provider.capture(invoice_id, amount_cents)

    @effect(operation_id="refund:{invoice_id}", executor=executor, name="tests.refund")
    def refund(invoice_id: str) -> None:
        raise EffectRejected("nothing to refund")

    caplog.set_level(logging.INFO, logger="effectguard")
    capture("INV-1042", 1999)
    capture("INV-1042", 1999)
    with pytest.raises(EffectRejected):
        refund("INV-1042")

    info = [
        (r.operation_id, r.contract, r.status)
        for r in caplog.records
        if r.name == "effectguard.executor" and r.levelno == logging.INFO
    ]
    assert info == [
        (OPERATION, "tests.ok", "CONFIRMED"),
        (OPERATION, "tests.ok", "CONFIRMED"),  # the replay
        ("refund:INV-1042", "tests.refund", "REJECTED"),
    ]
    assert provider.committed() == 1
