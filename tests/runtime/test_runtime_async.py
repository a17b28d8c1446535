"""Async tools and models: under the sync runtime, and with start_async/resume_async."""

from __future__ import annotations

import asyncio
import json

import pytest
from runtime_support import ARGUMENTS, CAPTURE, OPERATION, RUN, script, tool_messages

from effectguard import INJECTED, ConfigurationError, EffectStatus, effect
from effectguard.runtime import AgentRuntime, ModelTurn, RunState, ScriptedModel
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan


def async_capture(provider: FakePaymentProvider):
    """An async decorated capture with an async probe."""

    async def find_capture(invoice_id: str, amount_cents: int, *, idempotency_key: str):
        await asyncio.sleep(0)
        return provider.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)

    @effect(
        operation_id="invoice:{invoice_id}:capture",
        idempotency_key="capture:{invoice_id}",
        idempotency_guaranteed=True,
        probe=find_capture,
        name="tests.async_capture",
    )
    async def capture_payment(
        invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
    ) -> dict:
        """Capture a payment."""
        await asyncio.sleep(0)
        return provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)

    return capture_payment


class AsyncScript:
    """An async model playing a script."""

    def __init__(self, *turns) -> None:
        self.script = ScriptedModel(list(turns) or [CAPTURE, "payment done"])

    async def next_turn(self, messages, tools) -> ModelTurn:
        """Play the next scripted turn, asynchronously."""
        await asyncio.sleep(0)
        return self.script.next_turn(messages, tools)


def test_an_async_decorated_tool_runs_under_the_sync_runtime(executor, provider, checkpoints):
    """The sync runtime runs an async tool (and an async model) in an event loop of its own."""
    runtime = AgentRuntime(
        AsyncScript(), [async_capture(provider)], executor, checkpoints=checkpoints
    )
    result = runtime.start(RUN, "pay")
    assert result.state is RunState.COMPLETED
    assert result.effects == {OPERATION: EffectStatus.CONFIRMED}
    [message] = tool_messages(checkpoints.load(RUN).messages)
    assert json.loads(message["content"])["invoice_id"] == "INV-1042"
    assert provider.committed() == 1


def test_start_async_waits_and_resume_async_completes(executor):
    """On the event loop, an unknown async capture WAITs, and resume_async reconciles it once."""
    provider = FakePaymentProvider(faults=FaultPlan({1: Fault.PENDING}, pending_probes=1))
    runtime = AgentRuntime(AsyncScript(), [async_capture(provider)], executor)

    async def scenario():
        first = await runtime.start_async(RUN, "pay")
        second = await runtime.resume_async(RUN)
        return first, second

    first, second = asyncio.run(scenario())
    assert first.state is RunState.WAITING
    assert first.waiting_on == (OPERATION,)
    assert second.state is RunState.COMPLETED
    assert second.final == "payment done"
    assert provider.committed() == 1
    assert provider.requests == 1


def test_sync_tools_and_models_run_under_the_async_runtime(executor, provider, checkpoints):
    """start_async takes sync tools and a sync model too, running them in worker threads."""
    from runtime_support import capture_tool  # noqa: PLC0415 - used by this test only

    def lookup_invoice(invoice_id: str) -> dict:
        """Read an invoice."""
        return {"invoice_id": invoice_id, "open": True}

    from effectguard.runtime import ToolCall  # noqa: PLC0415 - used by this test only

    lookup = ToolCall("call-0", "lookup_invoice", {"invoice_id": "INV-1042"})
    runtime = AgentRuntime(
        script(lookup, CAPTURE, "payment done"),
        [lookup_invoice, capture_tool(provider)],
        executor,
        checkpoints=checkpoints,
    )
    result = asyncio.run(runtime.start_async(RUN, "pay"))
    assert result.state is RunState.COMPLETED
    assert [
        json.loads(m["content"])["invoice_id"]
        for m in tool_messages(checkpoints.load(RUN).messages)
    ] == ["INV-1042", "INV-1042"]
    assert provider.committed() == 1


def test_the_sync_runtime_inside_an_event_loop_refuses_async_tools_before_dispatch(
    executor, provider
):
    """In a running loop the sync runtime refuses an async tool clearly, sending nothing."""
    runtime = AgentRuntime(script(), [async_capture(provider)], executor)

    async def inside_a_loop():
        return runtime.start(RUN, "pay")

    with pytest.raises(ConfigurationError, match="start_async"):
        asyncio.run(inside_a_loop())
    assert provider.requests == 0
    assert executor.ledger.get(OPERATION) is None
    assert asyncio.run(runtime.resume_async(RUN)).state is RunState.COMPLETED
    assert provider.committed() == 1
    assert executor.ledger.get(OPERATION).arguments == ARGUMENTS
