"""What each effect outcome does to a run: output, structured error, or WAITING until resolved."""

from __future__ import annotations

import asyncio
import json

import pytest
from runtime_support import ARGUMENTS, CAPTURE, OPERATION, RUN, capture_tool, script, tool_messages

from effectguard import (
    EffectContract,
    EffectNotConfirmed,
    EffectRejected,
    EffectStatus,
    Transition,
    UnknownOutcomePolicy,
    effect,
    observe_effects,
    observing,
)
from effectguard.runtime import (
    AgentRuntime,
    CheckpointError,
    InMemoryCheckpointStore,
    RunState,
    ToolCall,
    ToolDefinition,
)
from effectguard.runtime.state import RunRecord
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan


def test_a_confirmed_effect_sends_its_output_to_the_model(executor, provider, checkpoints):
    """CONFIRMED: the capture's output is the tool message, and the final text completes the run."""
    model = script()
    runtime = AgentRuntime(model, [capture_tool(provider)], executor, checkpoints=checkpoints)
    result = runtime.start(RUN, "pay INV-1042")
    assert result.state is RunState.COMPLETED
    assert result.final == "payment done"
    assert result.effects == {OPERATION: EffectStatus.CONFIRMED}
    assert result.steps == 2
    [message] = tool_messages(checkpoints.load(RUN).messages)
    output = json.loads(message["content"])
    assert output["status"] == "succeeded"
    assert output["amount_cents"] == 1999
    assert message["is_error"] is False
    assert provider.committed() == 1


def test_payment_done_does_not_complete_a_run_whose_capture_is_unknown(executor, checkpoints):
    """While the capture is in doubt the run WAITs and the model's 'payment done' is never taken."""
    provider = FakePaymentProvider(faults=FaultPlan({1: Fault.PENDING}, pending_probes=2))
    model = script()
    runtime = AgentRuntime(model, [capture_tool(provider)], executor, checkpoints=checkpoints)

    first = runtime.start(RUN, "pay INV-1042")
    assert first.state is RunState.WAITING
    assert first.waiting_on == (OPERATION,)
    assert first.final is None
    assert first.effects == {OPERATION: EffectStatus.OUTCOME_UNKNOWN}
    assert model.requests == 1  # the model was not asked for the turn that says "payment done"

    second = runtime.resume(RUN)
    assert second.state is RunState.WAITING
    assert second.final is None
    assert model.requests == 1
    assert all(m.get("content") != "payment done" for m in checkpoints.load(RUN).messages)

    third = runtime.resume(RUN)
    assert third.state is RunState.COMPLETED
    assert third.final == "payment done"
    assert third.effects == {OPERATION: EffectStatus.CONFIRMED}
    assert provider.committed() == 1
    assert provider.requests == 1  # every resume reconciled; none sent the capture again


def test_a_quarantined_capture_waits_until_an_operator_resolves_it(executor, ledger):
    """QUARANTINED: resumes WAIT without dispatching; once an operator confirms, it completes."""
    provider = FakePaymentProvider(
        idempotency_guaranteed=False, faults=FaultPlan({1: Fault.LOSE_ACK})
    )
    tool = capture_tool(provider, probe=False, idempotency_guaranteed=False)
    runtime = AgentRuntime(script(), [tool], executor)

    assert runtime.start(RUN, "pay").effects == {OPERATION: EffectStatus.QUARANTINED}
    again = runtime.resume(RUN)
    assert again.state is RunState.WAITING
    assert again.waiting_on == (OPERATION,)
    assert provider.requests == 1

    [capture] = provider.effects()
    ledger.confirm(
        OPERATION,
        output=capture["response"],
        provider_operation_id=capture["response"]["id"],
        actor="alice",
        reason="found in the provider dashboard",
        evidence_reference="dashboard:cap",
    )
    done = runtime.resume(RUN)
    assert done.state is RunState.COMPLETED
    assert done.effects == {OPERATION: EffectStatus.CONFIRMED}
    assert provider.committed() == 1
    assert provider.requests == 1


def test_a_rejected_effect_goes_back_to_the_model_as_a_structured_error(executor, checkpoints):
    """REJECTED: the model gets {"error": {"kind": "effect_rejected", ...}} and the run goes on."""

    @effect(operation_id="invoice:{invoice_id}:capture", name="tests.declined")
    def capture_payment(invoice_id: str, amount_cents: int) -> dict:
        raise EffectRejected("card declined", evidence={"code": "card_declined"})

    model = script(CAPTURE, "the card was declined")
    runtime = AgentRuntime(model, [capture_payment], executor, checkpoints=checkpoints)
    result = runtime.start(RUN, "pay")
    assert result.state is RunState.COMPLETED
    assert result.effects == {OPERATION: EffectStatus.REJECTED}
    [message] = tool_messages(checkpoints.load(RUN).messages)
    assert message["is_error"] is True
    error = json.loads(message["content"])["error"]
    assert error["kind"] == "effect_rejected"
    assert error["message"] == "card declined"
    assert error["operation_id"] == OPERATION
    assert error["evidence"] == {"code": "card_declined"}


def test_a_plain_tool_that_swallows_an_unknown_effect_still_makes_the_run_wait(executor):
    """An effect inside a plain tool is observed: in doubt, the run WAITs though the tool hid it."""
    provider = FakePaymentProvider(faults=FaultPlan({1: Fault.PENDING}, pending_probes=1))
    capture = capture_tool(provider)

    def pay_invoice(invoice_id: str) -> str:
        """Pay an invoice and say it is queued, whatever happened."""
        capture.execute(invoice_id, 1999)
        return "queued"

    call = ToolCall("call-1", "pay_invoice", {"invoice_id": "INV-1042"})
    runtime = AgentRuntime(script(call, "payment done"), [pay_invoice], executor)
    first = runtime.start(RUN, "pay")
    assert first.state is RunState.WAITING
    assert first.waiting_on == (OPERATION,)
    done = runtime.resume(RUN)
    assert done.state is RunState.COMPLETED
    assert done.effects == {OPERATION: EffectStatus.CONFIRMED}
    assert provider.committed() == 1
    assert provider.requests == 1


def test_an_effect_on_a_tools_own_executor_is_still_observed(executor):
    """A tool pinned to its own executor= swallows an unknown effect: the run still WAITs."""
    provider = FakePaymentProvider(faults=FaultPlan({1: Fault.PENDING}, pending_probes=1))
    capture = capture_tool(provider, executor=executor)

    def pay_invoice(invoice_id: str) -> str:
        """Pay an invoice and say it is queued, whatever happened."""
        try:
            capture(invoice_id, 1999)
        except EffectNotConfirmed:
            return "queued"
        return "paid"

    call = ToolCall("call-1", "pay_invoice", {"invoice_id": "INV-1042"})
    runtime = AgentRuntime(script(call, "payment done"), [pay_invoice], executor)
    first = runtime.start(RUN, "pay")
    assert first.state is RunState.WAITING
    assert first.waiting_on == (OPERATION,)
    assert provider.committed() == 0
    done = runtime.resume(RUN)
    assert done.state is RunState.COMPLETED
    assert provider.committed() == 1
    assert provider.requests == 1


def test_a_conflicting_request_is_reported_and_never_sent(executor, provider, checkpoints):
    """Same invoice, other amount: the model is told of the conflict and nothing new is sent."""
    other = ToolCall("call-2", "capture_payment", {"invoice_id": "INV-1042", "amount_cents": 1})
    model = script(CAPTURE, other, "done")
    runtime = AgentRuntime(model, [capture_tool(provider)], executor, checkpoints=checkpoints)
    assert runtime.start(RUN, "pay").state is RunState.COMPLETED
    second = tool_messages(checkpoints.load(RUN).messages)[1]
    assert json.loads(second["content"])["error"]["kind"] == "operation_conflict"
    assert provider.requests == 1
    assert provider.committed() == 1


def test_a_tool_definition_with_a_contract_runs_through_the_executor(executor, provider):
    """A ToolDefinition with a contract is executed (and replayed) by the runtime's executor."""
    contract = EffectContract(
        name="tests.capture.definition",
        operation_id=lambda a: f"invoice:{a['invoice_id']}:capture",
        provider_idempotency_key=lambda a: f"capture:{a['invoice_id']}",
        outcome_probe=provider.probe,
        unknown_outcome=UnknownOutcomePolicy.QUARANTINE,
    )
    schema = {
        "type": "object",
        "properties": {"invoice_id": {"type": "string"}, "amount_cents": {"type": "integer"}},
        "required": ["invoice_id", "amount_cents"],
    }
    tool = ToolDefinition(
        "capture_payment", "Capture a payment.", schema, provider.handler, contract
    )
    for run in ("run-a", "run-b"):
        result = AgentRuntime(script(), [tool], executor).start(run, "pay")
        assert result.state is RunState.COMPLETED
        assert result.effects == {OPERATION: EffectStatus.CONFIRMED}
    assert executor.ledger.get(OPERATION).status is EffectStatus.CONFIRMED
    assert provider.requests == 1
    assert provider.committed() == 1


class _FailOnce(InMemoryCheckpointStore):
    """A store whose save fails once, right after the tool call, like a crash at that point."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.saves = 0
        self.fail_at = fail_at

    def save(self, record: RunRecord) -> int:
        self.saves += 1
        if self.saves == self.fail_at:
            msg = "disk full"
            raise CheckpointError(msg)
        return super().save(record)


def test_a_lost_checkpoint_after_dispatch_is_resumed_by_replay_not_resend(executor, provider):
    """A dispatched call whose result was never checkpointed is replayed on resume, not resent."""
    # Saves: model turn (1), before dispatch (2), tool result (3) fails.
    store = _FailOnce(fail_at=3)
    runtime = AgentRuntime(script(), [capture_tool(provider)], executor, checkpoints=store)
    with pytest.raises(CheckpointError, match="disk full"):
        runtime.start(RUN, "pay")
    assert store.load(RUN).state is RunState.RUNNING
    assert provider.committed() == 1
    result = runtime.resume(RUN)
    assert result.state is RunState.COMPLETED
    assert provider.requests == 1
    assert provider.committed() == 1


def test_arguments_reach_the_effect_exactly_as_the_model_sent_them(executor, provider):
    """The operation's recorded arguments are the model's, so a resume has the same fingerprint."""
    AgentRuntime(script(), [capture_tool(provider)], executor).start(RUN, "pay")
    assert executor.ledger.get(OPERATION).arguments == ARGUMENTS


def test_an_effect_left_in_doubt_by_a_tool_keeps_the_final_answer_out(executor, ledger):
    """If a re-issued tool no longer touches its doubtful effect, the model is still not asked.

    The run waits on that operation until the ledger settles it (here an operator).
    """
    provider = FakePaymentProvider(faults=FaultPlan({1: Fault.PENDING}, pending_probes=5))
    capture = capture_tool(provider)
    calls = []

    def pay_invoice(invoice_id: str) -> str:
        """Pay an invoice the first time it is asked; afterwards only report."""
        calls.append(invoice_id)
        if len(calls) == 1:
            capture.execute(invoice_id, 1999)
        return "nothing to do"

    model = script(ToolCall("call-1", "pay_invoice", {"invoice_id": "INV-1042"}), "payment done")
    runtime = AgentRuntime(model, [pay_invoice], executor)
    assert runtime.start(RUN, "pay").waiting_on == (OPERATION,)
    second = runtime.resume(RUN)
    assert len(calls) == 2
    assert second.state is RunState.WAITING
    assert second.waiting_on == (OPERATION,)
    assert second.final is None
    assert model.requests == 1

    assert provider.committed() == 0  # still pending at the provider
    ledger.confirm(
        OPERATION,
        output={"id": "cap_000001"},
        provider_operation_id="cap_000001",
        actor="alice",
        reason="settled in the dashboard",
        evidence_reference="dashboard:cap_000001",
    )
    done = runtime.resume(RUN)
    assert done.state is RunState.COMPLETED
    assert done.final == "payment done"
    assert done.effects == {OPERATION: EffectStatus.CONFIRMED}
    assert provider.requests == 1


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_run_records_each_effect_once_and_observers_around_it_still_hear(
    executor, provider, trace, driver
):
    """The runtime observes through the executor hook, once per effect, beside outer observers."""
    results = []
    transitions: list[Transition] = []
    runtime = AgentRuntime(script(), [capture_tool(provider)], executor, trace=trace)
    with observe_effects(results.append), observing(transitions.append):
        if driver == "sync":
            done = runtime.start(RUN, "pay")
        else:
            done = asyncio.run(runtime.start_async(RUN, "pay"))
    assert done.state is RunState.COMPLETED
    assert [(r.operation_id, r.status) for r in results] == [(OPERATION, EffectStatus.CONFIRMED)]
    assert [t.to_status for t in transitions if t.final] == [EffectStatus.CONFIRMED]
    effects = [e for e in trace.of(RUN) if e.kind.value == "effect"]
    assert [(e.data["operation_id"], e.data["status"]) for e in effects] == [
        (OPERATION, "CONFIRMED")
    ]
    assert provider.requests == 1
    assert provider.committed() == 1
