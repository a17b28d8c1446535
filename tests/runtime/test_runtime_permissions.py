"""The permission policy runs after validation and before any handler; approvals make runs wait."""

from __future__ import annotations

import json

import pytest
from runtime_support import ARGUMENTS, CAPTURE, OPERATION, RUN, capture_tool, script, tool_messages

from effectguard import EffectStatus, InvalidRequestError
from effectguard.runtime import (
    AgentRuntime,
    ApprovalNotPendingError,
    ApprovalRequest,
    AuditAction,
    Decision,
    RunState,
    ToolCall,
    allow_list,
    require_approval,
)
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan


def test_a_denied_call_never_reaches_the_provider(executor, provider, checkpoints, audit):
    """DENY: nothing is sent or recorded, and the model is told the call was denied."""
    runtime = AgentRuntime(
        script(CAPTURE, "could not pay"),
        [capture_tool(provider)],
        executor,
        permission_policy=lambda request: Decision.DENY,
        checkpoints=checkpoints,
        audit=audit,
    )
    result = runtime.start(RUN, "pay")
    assert result.state is RunState.COMPLETED
    assert result.effects == {}
    assert provider.requests == 0
    assert provider.committed() == 0
    assert executor.ledger.get(OPERATION) is None
    [message] = tool_messages(checkpoints.load(RUN).messages)
    assert json.loads(message["content"])["error"]["kind"] == "permission_denied"
    assert [r.action for r in audit.of(RUN, AuditAction.PERMISSION_DENIED)] == [
        AuditAction.PERMISSION_DENIED
    ]
    assert audit.of(RUN, AuditAction.DISPATCHED) == []


def test_allow_list_denies_every_tool_it_does_not_name(executor, provider):
    """allow_list: a listed tool runs, an unlisted one is denied before its handler."""
    seen = []

    def lookup_invoice(invoice_id: str) -> str:
        """Read an invoice."""
        seen.append(invoice_id)
        return "open"

    lookup = ToolCall("call-1", "lookup_invoice", {"invoice_id": "INV-1042"})
    capture = ToolCall("call-2", "capture_payment", ARGUMENTS)
    runtime = AgentRuntime(
        script([lookup, capture], "done"),
        [lookup_invoice, capture_tool(provider)],
        executor,
        permission_policy=allow_list(["lookup_invoice"]),
    )
    assert runtime.start(RUN, "pay").state is RunState.COMPLETED
    assert seen == ["INV-1042"]
    assert provider.requests == 0


def test_the_policy_sees_the_validated_call(executor, provider):
    """A policy receives the run, the call, the tool (with its contract) and parsed arguments."""
    requests = []

    def policy(request):
        requests.append(request)
        return Decision.ALLOW

    call = ToolCall("call-1", "capture_payment", json.dumps(ARGUMENTS))
    runtime = AgentRuntime(
        script(call, "done"), [capture_tool(provider)], executor, permission_policy=policy
    )
    runtime.start(RUN, "pay")
    [request] = requests
    assert request.run_id == RUN
    assert request.call.id == "call-1"
    assert request.arguments == ARGUMENTS
    assert request.effectful
    assert request.tool.contract.name == "tests.capture"


def test_approval_holds_the_call_until_a_person_approves(executor, provider, audit):
    """REQUIRE_APPROVAL: the run WAITs (resume does not dispatch) until approve, then runs once."""
    model = script()
    runtime = AgentRuntime(
        model,
        [capture_tool(provider)],
        executor,
        permission_policy=require_approval(),
        audit=audit,
    )
    waiting = runtime.start(RUN, "pay")
    assert waiting.state is RunState.WAITING
    assert waiting.waiting_on == (ApprovalRequest(RUN, "call-1", "capture_payment", ARGUMENTS),)
    assert waiting.approvals[0].arguments == ARGUMENTS
    assert waiting.operations == ()
    assert runtime.resume(RUN).state is RunState.WAITING
    assert provider.requests == 0

    runtime.approve(RUN, "call-1", actor="alice", reason="invoice checked")
    assert runtime.result(RUN).waiting_on == ()
    assert provider.requests == 0  # approving records the decision; resume acts on it
    done = runtime.resume(RUN)
    assert done.state is RunState.COMPLETED
    assert done.effects == {OPERATION: EffectStatus.CONFIRMED}
    assert provider.committed() == 1
    [approved] = audit.of(RUN, AuditAction.APPROVED)
    assert approved.actor == "alice"
    assert approved.details["reason"] == "invoice checked"
    assert model.requests == 2


def test_a_refused_call_is_reported_to_the_model_and_never_sent(executor, provider, checkpoints):
    """deny(): the next resume tells the model who refused and why; nothing is dispatched."""
    runtime = AgentRuntime(
        script(CAPTURE, "payment refused"),
        [capture_tool(provider)],
        executor,
        permission_policy=require_approval(["capture_payment"]),
        checkpoints=checkpoints,
    )
    runtime.start(RUN, "pay")
    runtime.deny(RUN, "call-1", actor="bob", reason="duplicate invoice")
    result = runtime.resume(RUN)
    assert result.state is RunState.COMPLETED
    assert result.final == "payment refused"
    [message] = tool_messages(checkpoints.load(RUN).messages)
    error = json.loads(message["content"])["error"]
    assert error["kind"] == "approval_refused"
    assert "bob" in error["message"]
    assert "duplicate invoice" in error["message"]
    assert provider.requests == 0


def test_approving_what_is_not_awaiting_approval_is_refused(executor, provider):
    """approve() of an unknown call, or one already approved, is an error that changes nothing."""
    runtime = AgentRuntime(
        script(), [capture_tool(provider)], executor, permission_policy=require_approval()
    )
    runtime.start(RUN, "pay")
    with pytest.raises(ApprovalNotPendingError, match="no pending call 'call-9'"):
        runtime.approve(RUN, "call-9", actor="alice")
    with pytest.raises(InvalidRequestError, match="actor"):
        runtime.approve(RUN, "call-1", actor=" ")
    runtime.approve(RUN, "call-1", actor="alice")
    with pytest.raises(ApprovalNotPendingError, match="not awaiting approval"):
        runtime.deny(RUN, "call-1", actor="bob")
    assert runtime.resume(RUN).state is RunState.COMPLETED
    assert provider.committed() == 1


def test_a_dispatched_call_is_reconciled_on_resume_even_if_the_policy_changed(
    executor, checkpoints
):
    """The decision is checkpointed: a resume never re-asks the policy about a call already sent."""
    provider = FakePaymentProvider(faults=FaultPlan({1: Fault.PENDING}, pending_probes=1))
    tool = capture_tool(provider)
    first = AgentRuntime(script(), [tool], executor, checkpoints=checkpoints)
    assert first.start(RUN, "pay").state is RunState.WAITING
    stricter = AgentRuntime(
        script(),
        [tool],
        executor,
        permission_policy=lambda request: Decision.DENY,
        checkpoints=checkpoints,
    )
    result = stricter.resume(RUN)
    assert result.state is RunState.COMPLETED
    assert result.effects == {OPERATION: EffectStatus.CONFIRMED}
    [message] = tool_messages(checkpoints.load(RUN).messages)
    assert message["is_error"] is False
    assert provider.committed() == 1
    assert provider.requests == 1


def test_a_policy_returning_something_else_is_an_error_before_dispatch(executor, provider):
    """A policy must return a Decision; anything else raises and nothing is sent."""
    runtime = AgentRuntime(
        script(), [capture_tool(provider)], executor, permission_policy=lambda r: True
    )
    with pytest.raises(TypeError, match="not a Decision"):
        runtime.start(RUN, "pay")
    assert provider.requests == 0
