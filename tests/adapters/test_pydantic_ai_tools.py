"""The Pydantic AI adapter's tools: schema, shared dispatches, failures the model must not retry."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic_ai_support import (
    FLAVOURS,
    DeferredToolRequests,
    GatedLedger,
    ScriptedModel,
    agent,
    capture,
    capture_tool,
    run,
)

from effectguard import (
    ConfigurationError,
    EffectExecutor,
    EffectRejected,
    EffectStatus,
    SQLiteEffectLedger,
)
from effectguard._fingerprint import REDACTED
from effectguard.adapters.pydantic_ai import as_tool, settle_deferred
from effectguard.errors import OperationNotFoundError
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, Lookup

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ledger(tmp_path: Path) -> SQLiteEffectLedger:
    """A fresh SQLite ledger for the test."""
    return SQLiteEffectLedger(tmp_path / "ledger.db")


@pytest.fixture
def executor(ledger: SQLiteEffectLedger) -> EffectExecutor:
    """An executor on the test's ledger."""
    return EffectExecutor(ledger)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_schema_holds_exactly_the_business_parameters_each_described(executor, flavour):
    """The model sees invoice_id and amount_cents with their docstring descriptions, no key."""
    tool = as_tool(capture_tool(FakePaymentProvider(), executor, flavour))
    definition = tool.tool_def
    schema = definition.parameters_json_schema
    assert definition.name == "capture_payment"
    assert list(schema["properties"]) == ["invoice_id", "amount_cents"]
    assert schema["properties"]["invoice_id"] == {
        "description": "The invoice to charge.",
        "type": "string",
    }
    assert schema["properties"]["amount_cents"] == {
        "description": "The amount, in cents.",
        "type": "integer",
    }
    assert schema["required"] == ["invoice_id", "amount_cents"]
    assert definition.description == "Capture the payment of an invoice."
    assert tool.function_schema.is_async is (flavour == "async")


def test_as_tool_refuses_a_function_that_is_not_an_effect():
    """A plain function is a TypeError that says to decorate it first."""

    def capture_payment(invoice_id: str) -> None:
        del invoice_id

    with pytest.raises(ConfigurationError, match="decorated with @effect"):
        as_tool(capture_payment)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_two_identical_calls_in_one_turn_commit_once(tmp_path, flavour):
    """Two identical calls at once: one waits for the other's dispatch, both get its output."""
    ledger = GatedLedger(tmp_path / "ledger.db")
    provider = FakePaymentProvider(idempotency_guaranteed=False)

    def hold_until_the_peer_reads() -> None:
        # The first dispatch stays open until the second call has found it in flight.
        assert ledger.peer_read.wait(timeout=30)

    tool = capture_tool(provider, EffectExecutor(ledger), flavour, before=hold_until_the_peer_reads)
    script = ScriptedModel([capture("INV-7", "call-a"), capture("INV-7", "call-b")])

    result = run(flavour, agent(script, [as_tool(tool)]), user_prompt="charge INV-7")

    assert ledger.peer_read.is_set()
    assert provider.committed() == 1
    assert provider.attempts() == 1
    assert result.output == "done: call-a=success, call-b=success"
    outputs = {call_id: content for call_id, content, _ in script.seen}
    assert outputs["call-a"] == outputs["call-b"]
    assert outputs["call-a"]["invoice_id"] == "INV-7"


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_rejected_effect_is_a_failure_the_model_sees_and_is_not_invited_to_retry(
    executor, flavour
):
    """REJECTED becomes a failed tool return (ToolFailed), not a retry prompt; nothing commits."""
    provider = FakePaymentProvider()

    def decline() -> None:
        raise EffectRejected("card declined", evidence={"code": "card_declined"})

    tool = as_tool(capture_tool(provider, executor, flavour, before=decline), max_retries=3)
    script = ScriptedModel([capture("INV-8", "call-1")])

    result = run(flavour, agent(script, [tool]), user_prompt="charge INV-8")

    assert result.output == "done: call-1=failed"
    [(_, told, outcome)] = script.seen
    assert outcome == "failed"
    assert "card declined" in told
    assert "do not retry" in told
    assert "Fix the errors" not in told  # Pydantic AI's retry prompt
    assert provider.committed() == 0
    assert executor.ledger.get("invoice:INV-8:capture").status is EffectStatus.REJECTED


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_reusing_an_operation_id_for_another_request_is_a_failure_not_a_dispatch(executor, flavour):
    """The same invoice with another amount conflicts: a failed return, nothing sent again."""
    provider = FakePaymentProvider()
    tool = capture_tool(provider, executor, flavour)
    first = ScriptedModel([capture("INV-9", "call-1", amount_cents=500)])
    run(flavour, agent(first, [as_tool(tool)]), user_prompt="charge INV-9")
    second = ScriptedModel([capture("INV-9", "call-2", amount_cents=900)])

    result = run(flavour, agent(second, [as_tool(tool)]), user_prompt="charge INV-9 again")

    assert result.output == "done: call-2=failed"
    [(_, told, _)] = second.seen
    assert "different request" in told
    assert "do not retry it" in told
    assert provider.committed() == 1
    assert provider.attempts() == 1


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_pending_payload_leaves_out_redacted_arguments(executor, flavour):
    """A deferred call's metadata (run output, telemetry) has no value the contract redacts."""
    provider = FakePaymentProvider(
        idempotency_guaranteed=False, lookup=Lookup.NONE, faults=FaultPlan({1: Fault.LOSE_ACK})
    )
    tool = capture_tool(provider, executor, flavour, redact=["amount_cents"])
    script = ScriptedModel([capture("INV-10", "call-1", amount_cents=123457)])

    result = run(flavour, agent(script, [as_tool(tool)]), user_prompt="charge INV-10")

    metadata = result.output.metadata["call-1"]
    assert metadata["arguments"] == {"invoice_id": "INV-10", "amount_cents": REDACTED}
    assert "123457" not in repr(metadata)
    assert provider.committed() == 1


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_settling_against_another_ledger_refuses_and_sends_nothing(tmp_path, executor, flavour):
    """A pause recorded in one ledger is never settled by dispatching afresh in another."""
    provider = FakePaymentProvider(
        idempotency_guaranteed=False, lookup=Lookup.NONE, faults=FaultPlan({1: Fault.LOSE_ACK})
    )
    script = ScriptedModel([capture("INV-11", "call-1")])
    tool = as_tool(capture_tool(provider, executor, flavour))
    paused = run(flavour, agent(script, [tool]), user_prompt="charge INV-11")
    elsewhere = EffectExecutor(SQLiteEffectLedger(tmp_path / "other.db"))

    with pytest.raises(OperationNotFoundError):
        settle_deferred(paused.output, [capture_tool(provider, elsewhere, flavour)])

    assert provider.attempts() == 1
    assert elsewhere.ledger.get("invoice:INV-11:capture") is None


def test_importing_the_adapter_without_the_extra_names_the_extra():
    """Without pydantic_ai installed, the ImportError says which extra to install."""
    code = (
        "import sys; sys.modules['pydantic_ai'] = None\n"
        "try:\n"
        "    import effectguard.adapters.pydantic_ai\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert "effectguard[pydantic-ai]" in done.stdout


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_request_that_provably_never_left_asks_the_model_to_call_again(ledger, flavour):
    """Connection refused: a retry prompt (calling again is safe), and the retry commits once."""
    provider = FakePaymentProvider(faults=FaultPlan({1: Fault.UNREACHABLE}))
    # deadline=0: no retry within the call, so the model is the one asked to call again.
    executor = EffectExecutor(ledger, deadline=0)
    tool = capture_tool(provider, executor, flavour, not_sent_on=ConnectionRefusedError)
    script = ScriptedModel([capture("INV-12", "call-1")])

    result = run(flavour, agent(script, [as_tool(tool)]), user_prompt="charge INV-12")

    assert result.output == "done: call-1=success"
    [(_, told, outcome), _] = script.seen
    assert outcome == "retried"
    assert "was not sent" in told
    assert provider.committed() == 1
    assert provider.attempts() == 2  # refused at connect, then sent once


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_settling_requests_that_lost_their_metadata_refuses_and_sends_nothing(executor, flavour):
    """Without the call scope the pause recorded, the operation cannot be found: a clear error."""
    provider = FakePaymentProvider(
        idempotency_guaranteed=False, lookup=Lookup.NONE, faults=FaultPlan({1: Fault.LOSE_ACK})
    )
    tool = as_tool(capture_tool(provider, executor, flavour))
    script = ScriptedModel([capture("INV-13", "call-1")])
    paused = run(flavour, agent(script, [tool]), user_prompt="charge INV-13")
    stripped = DeferredToolRequests(calls=paused.output.calls)

    with pytest.raises(ConfigurationError, match="call scope"):
        settle_deferred(stripped, [tool])
    with pytest.raises(ConfigurationError, match="tools made by as_tool"):
        settle_deferred(paused.output, [lambda invoice_id: invoice_id])

    assert provider.attempts() == 1
