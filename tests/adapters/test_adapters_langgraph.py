"""The LangGraph adapter: an uncertain effect pauses the graph; resume never dispatches twice.

Offline: a scripted chat model, LangGraph's InMemorySaver, fake providers that
count what they committed. Each test runs with sync and with async tools (and
graphs invoked with ``invoke`` or ``ainvoke``).
"""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from extras_support import import_extra

langgraph = import_extra("langgraph", "langgraph")

from langchain_core.messages import ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import ToolNode
from lg_world import (
    FINAL,
    PAYMENT,
    World,
    calls,
    mail,
    make_world,
    pay,
    start_message,
    tool_messages,
)

from effectguard import ConfigurationError, EffectRejected, EffectStatus, effect
from effectguard.adapters import PendingEffect
from effectguard.adapters.langgraph import (
    as_tool,
    atool_call_wrapper,
    pending_effects,
    resume_command,
    tool_call_wrapper,
)
from effectguard.cli.ops import main as ops
from effectguard.testkit import FakePaymentProvider, Fault

CONFIG = {"configurable": {"thread_id": "thread-1"}}


@pytest.fixture(params=["sync", "async"])
def is_async(request: pytest.FixtureRequest) -> bool:
    return request.param == "async"


def run(world: World, graph: Any, value: Any) -> dict[str, Any]:
    """One invocation of the graph, as the world's tools need: invoke or ainvoke."""
    if world.is_async:
        return asyncio.run(graph.ainvoke(value, CONFIG))  # type: ignore[no-any-return]
    return graph.invoke(value, CONFIG)  # type: ignore[no-any-return]


def paused_on(state: dict[str, Any]) -> list[PendingEffect]:
    """The pending payloads the invocation returned with (``__interrupt__``)."""
    return [PendingEffect.from_json(i.value) for i in state.get("__interrupt__", ())]


def operator_confirms(pending: PendingEffect, output: dict[str, Any]) -> None:
    """Run the payload's own ``agent-effect-ops confirm`` command, placeholders filled in."""
    filled = {
        "JSON": json.dumps(output),
        "ID": str(output["id"]),
        "NAME": "ops@example.com",
        "TEXT": "capture found in the provider's dashboard",
        "REF": "dashboard:capture",
    }
    words = shlex.split(pending.operator_command)
    assert words[0] == "agent-effect-ops"
    done = CliRunner().invoke(ops, [filled.get(w, w) for w in words[1:]])
    assert done.exit_code == 0, done.output


def lost_ack_world(tmp_path: Path, is_async: bool) -> World:
    return make_world(tmp_path, is_async=is_async, payment_faults=[Fault.LOSE_ACK])


def test_the_schema_holds_exactly_the_business_parameters_with_descriptions(tmp_path, is_async):
    """No idempotency_key, no tool_call_id: each business parameter with its Args: text."""
    world = make_world(tmp_path, is_async=is_async)
    tool = as_tool(world.capture_payment)
    schema = tool.tool_call_schema.model_json_schema()
    assert tool.name == "capture_payment"
    assert tool.description == "Capture a card payment for an invoice."
    assert set(schema["properties"]) == {"invoice_id", "amount_cents"}
    assert (
        schema["properties"]["invoice_id"]["description"] == "The invoice to charge, e.g. INV-1042."
    )
    assert schema["properties"]["amount_cents"]["description"] == "The amount to capture, in cents."
    assert schema["properties"]["amount_cents"]["type"] == "integer"
    assert schema["required"] == ["invoice_id", "amount_cents"]


def test_two_identical_calls_in_one_turn_commit_once(tmp_path, is_async):
    """Same invoice twice in one turn: both calls get the one capture; the provider holds one."""
    world = make_world(tmp_path, is_async=is_async)
    graph = world.graph([calls(pay("call_a"), pay("call_b"))], InMemorySaver())
    state = run(world, graph, start_message())
    messages = tool_messages(state)
    assert messages["call_a"].content == messages["call_b"].content
    assert json.loads(messages["call_a"].content)["invoice_id"] == "INV-1"
    assert state["messages"][-1].content == FINAL
    assert world.payments.committed() == 1


def test_a_lost_ack_with_an_unknown_probe_pauses_with_the_pending_payload(tmp_path, is_async):
    """The run pauses (interrupt) on the QUARANTINED operation; the model never answered."""
    world = lost_ack_world(tmp_path, is_async)
    graph = world.graph([calls(pay())], InMemorySaver())
    state = run(world, graph, start_message())
    [pending] = paused_on(state)
    assert pending.operation_id == PAYMENT
    assert pending.status is EffectStatus.QUARANTINED
    assert pending.tool == "capture_payment"
    assert pending.tool_call_id == "call_pay"
    assert pending.attempts == 1
    assert f"confirm {PAYMENT}" in pending.operator_command
    assert pending_effects(graph, CONFIG) == [pending]
    assert all(m.content != FINAL for m in state["messages"])
    assert world.payments.committed() == 1


def test_resuming_before_the_operator_acts_stays_paused_and_sends_nothing(tmp_path, is_async):
    """Twice resumed with nothing resolved: still paused each time, one request in total."""
    world = lost_ack_world(tmp_path, is_async)
    graph = world.graph([calls(pay())], InMemorySaver())
    run(world, graph, start_message())
    for _ in range(2):
        state = run(world, graph, resume_command(graph, CONFIG))
        [pending] = paused_on(state)
        assert pending.status is EffectStatus.QUARANTINED
    assert world.payments.requests == 1
    assert world.payments.committed() == 1


def test_after_the_operator_confirms_the_run_completes_with_the_confirmed_output(
    tmp_path, is_async
):
    """agent-effect-ops confirm, then resume: the tool message is the capture; one commit."""
    world = lost_ack_world(tmp_path, is_async)
    graph = world.graph([calls(pay())], InMemorySaver())
    [pending] = paused_on(run(world, graph, start_message()))
    run(world, graph, resume_command(graph, CONFIG))  # an early resume changes nothing
    capture = world.payments.find_capture(PAYMENT)
    assert capture is not None
    operator_confirms(pending, capture)
    state = run(world, graph, resume_command(graph, CONFIG))
    assert "__interrupt__" not in state
    assert json.loads(tool_messages(state)["call_pay"].content) == capture
    assert state["messages"][-1].content == FINAL
    assert pending_effects(graph, CONFIG) == []
    assert world.payments.committed() == 1


def test_a_sibling_already_confirmed_is_replayed_not_resent_on_resume(tmp_path, is_async):
    """The receipt, sent in the paused turn, is replayed on every resume: one email."""
    world = lost_ack_world(tmp_path, is_async)
    graph = world.graph([calls(pay(), mail())], InMemorySaver())
    [pending] = paused_on(run(world, graph, start_message()))
    assert world.mailer.committed() == 1
    run(world, graph, resume_command(graph, CONFIG))
    operator_confirms(pending, world.payments.find_capture(PAYMENT) or {})
    state = run(world, graph, resume_command(graph, CONFIG))
    assert json.loads(tool_messages(state)["call_mail"].content)["status"] == "sent"
    assert world.mailer.requests == 1
    assert world.mailer.committed() == 1
    assert world.payments.committed() == 1


def test_a_rejected_operation_is_an_error_message_that_does_not_invite_a_retry(tmp_path, is_async):
    """REJECTED is status=error saying not to retry, even under handle_tool_errors=True."""
    world = make_world(tmp_path, is_async=is_async)
    sent: list[str] = []

    @effect(operation_id="refund:{order}", executor=world.executor)
    def refund(order: str) -> str:
        """Refund an order."""
        sent.append(order)
        raise EffectRejected("the card was closed")

    turns = [
        calls(("refund", {"order": "O-1"}, "call_r")),
        calls(("refund", {"order": "O-1"}, "call_s")),
    ]
    graph = world.graph(turns, InMemorySaver(), tools=[refund], handle_tool_errors=True)
    state = run(world, graph, start_message())
    for call_id in ("call_r", "call_s"):
        message = tool_messages(state)[call_id]
        assert message.status == "error"
        assert "do not retry" in message.content
        assert "the card was closed" in message.content
        assert "fix your mistakes" not in message.content
    assert sent == ["O-1"]


def test_effect_tool_node_lets_siblings_finish_before_the_pause(tmp_path):
    """Async: the email in flight when the payment pauses is sent and CONFIRMED, not cancelled."""
    world = lost_ack_world(tmp_path, is_async=True)
    paused = asyncio.Event()

    async def note_the_pause(request: Any, execute: Any) -> Any:
        try:
            return await execute(request)
        except BaseException:
            paused.set()
            raise

    send = world.send_receipt

    @effect(operation_id="receipt:{to}", executor=world.executor)
    async def send_receipt(to: str, *, idempotency_key: str) -> dict[str, Any]:
        """Email the customer their receipt."""
        await paused.wait()  # still in flight when the payment's interrupt is raised
        return await send.__wrapped__(to, idempotency_key=idempotency_key)

    graph = world.graph(
        [calls(pay(), mail())],
        InMemorySaver(),
        tools=[world.capture_payment, send_receipt],
        awrap_tool_call=note_the_pause,
    )
    state = run(world, graph, start_message())
    assert [p.operation_id for p in paused_on(state)] == [PAYMENT]
    record = world.executor.ledger.get("receipt:ada@example.com")
    assert record is not None
    assert record.status is EffectStatus.CONFIRMED
    assert world.mailer.committed() == 1


def test_without_a_checkpointer_nothing_is_sent_and_the_error_says_why(tmp_path, is_async):
    """A pause that could never resume is refused before dispatch (EffectToolNode or ToolNode)."""
    world = lost_ack_world(tmp_path, is_async)
    for node in (None, ToolNode):
        options = {} if node is None else {"node": node, "tools": [as_tool(world.capture_payment)]}
        graph = world.graph([calls(pay())], None, **options)
        with pytest.raises(ConfigurationError, match="no checkpointer"):
            run(world, graph, start_message())
    assert world.payments.requests == 0


def test_tool_call_wrapper_guards_effects_registered_as_plain_functions(tmp_path, is_async):
    """ToolNode([fn], wrap_tool_call=...): pause, operator, resume, one commit; no key shown."""
    world = lost_ack_world(tmp_path, is_async)
    node = ToolNode(
        [world.capture_payment],
        wrap_tool_call=tool_call_wrapper,
        awrap_tool_call=atool_call_wrapper,
    )
    schema = node.tools_by_name["capture_payment"].tool_call_schema.model_json_schema()
    assert set(schema["properties"]) == {"invoice_id", "amount_cents"}
    graph = world.graph(
        [calls(pay())],
        InMemorySaver(),
        node=ToolNode,
        tools=[world.capture_payment],
        wrap_tool_call=tool_call_wrapper,
        awrap_tool_call=atool_call_wrapper,
    )
    [pending] = paused_on(run(world, graph, start_message()))
    assert pending.status is EffectStatus.QUARANTINED
    operator_confirms(pending, world.payments.find_capture(PAYMENT) or {})
    state = run(world, graph, resume_command())
    assert json.loads(tool_messages(state)["call_pay"].content)["invoice_id"] == "INV-1"
    assert world.payments.committed() == 1


def test_the_wrapper_answers_bad_arguments_with_an_error_the_model_can_fix(tmp_path, is_async):
    """Arguments that fail the schema are a tool error; nothing is recorded or sent."""
    world = make_world(tmp_path, is_async=is_async)
    bad = ("capture_payment", {"invoice_id": "INV-1", "amount_cents": "lots"}, "call_bad")
    graph = world.graph(
        [calls(bad)],
        InMemorySaver(),
        node=ToolNode,
        tools=[world.capture_payment],
        wrap_tool_call=tool_call_wrapper,
        awrap_tool_call=atool_call_wrapper,
    )
    state = run(world, graph, start_message())
    message = tool_messages(state)["call_bad"]
    assert isinstance(message, ToolMessage)
    assert message.status == "error"
    assert "amount_cents" in message.content
    assert world.payments.requests == 0
    assert world.executor.ledger.get(PAYMENT) is None


CHILD = Path(__file__).with_name("lg_child.py")


def child(command: str, workdir: Path, mode: str) -> dict[str, Any]:
    """Run one process of the restart test to its end; its JSON summary."""
    done = subprocess.run(
        [sys.executable, str(CHILD), command, str(workdir), mode],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.mark.slow
def test_a_restart_between_pause_and_resume_still_resumes_with_one_commit(tmp_path, is_async):
    """Paused in one process, confirmed by an operator, resumed in another (SQLite checkpoints)."""
    mode = "async" if is_async else "sync"
    first = child("start", tmp_path, mode)
    [payload] = first["paused"]
    pending = PendingEffect.from_json(payload)
    assert pending.status is EffectStatus.QUARANTINED
    again = child("resume", tmp_path, mode)
    assert [PendingEffect.from_json(p).operation_id for p in again["paused"]] == [PAYMENT]
    payments = FakePaymentProvider(path=tmp_path / "payments.db")
    capture = payments.find_capture(PAYMENT)
    assert capture is not None
    operator_confirms(pending, capture)
    done = child("resume", tmp_path, mode)
    assert done["paused"] == []
    assert json.loads(done["payment"]) == capture
    assert done["final"] == FINAL
    assert payments.committed() == 1
    assert payments.attempts() == 1
