"""LangGraph: what each operator resolution becomes on resume, and which operation ids calls get."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from extras_support import import_extra

langgraph = import_extra("langgraph", "langgraph")

from click.testing import CliRunner
from langgraph.checkpoint.memory import InMemorySaver
from lg_world import PAYMENT, World, calls, make_world, pay, start_message, tool_messages

from effectguard import ConfigurationError, EffectStatus, call_scoped, effect
from effectguard.adapters import PendingEffect
from effectguard.adapters._langgraph_tool import _run_id
from effectguard.adapters.langgraph import as_tool, pending_effects, resume_command
from effectguard.cli.ops import main as ops
from effectguard.testkit import Fault

CONFIG = {"configurable": {"thread_id": "thread-1"}}
AUDIT = [
    "--actor",
    "ops@example.com",
    "--reason",
    "checked the provider",
    "--evidence-reference",
    "x",
]


@pytest.fixture(params=["sync", "async"])
def is_async(request: pytest.FixtureRequest) -> bool:
    return request.param == "async"


def run(world: World, graph: Any, value: Any) -> dict[str, Any]:
    if world.is_async:
        return asyncio.run(graph.ainvoke(value, CONFIG))  # type: ignore[no-any-return]
    return graph.invoke(value, CONFIG)  # type: ignore[no-any-return]


def operator(world: World, *command: str) -> None:
    """``agent-effect-ops --db <ledger> <command>`` with the audit options."""
    db = str(world.executor.ledger.path)  # type: ignore[attr-defined]
    done = CliRunner().invoke(ops, ["--db", db, *command, *AUDIT])
    assert done.exit_code == 0, done.output


def test_an_operator_rejection_reaches_the_model_as_an_error_not_to_retry(tmp_path, is_async):
    """Failed before commit, no lookup: QUARANTINED; rejected; resume tells the model; none sent."""
    world = make_world(tmp_path, is_async=is_async, payment_faults=[Fault.FAIL_BEFORE_COMMIT])
    graph = world.graph([calls(pay())], InMemorySaver())
    [pending] = [
        PendingEffect.from_json(i.value)
        for i in run(world, graph, start_message())["__interrupt__"]
    ]
    assert pending.status is EffectStatus.QUARANTINED
    operator(world, "reject", PAYMENT)
    state = run(world, graph, resume_command(graph, CONFIG))
    message = tool_messages(state)["call_pay"]
    assert message.status == "error"
    assert "do not retry" in message.content
    assert world.payments.requests == 1
    assert world.payments.committed() == 0


def test_an_authorized_retry_is_sent_once_on_resume(tmp_path, is_async):
    """Authorize-retry, then resume: one more request with the same key; one payment in total."""
    world = make_world(tmp_path, is_async=is_async, payment_faults=[Fault.FAIL_BEFORE_COMMIT])
    graph = world.graph([calls(pay())], InMemorySaver())
    run(world, graph, start_message())
    operator(world, "authorize-retry", PAYMENT)
    state = run(world, graph, resume_command(graph, CONFIG))
    assert json.loads(tool_messages(state)["call_pay"].content)["status"] == "succeeded"
    assert pending_effects(graph, CONFIG) == []
    assert world.payments.requests == 2
    assert world.payments.committed() == 1


def test_call_scoped_ids_come_from_the_thread_and_the_tool_call(tmp_path, is_async):
    """call_scoped("refund") gives refund:<thread_id>:<tool call id>: two calls, two refunds."""
    world = make_world(tmp_path, is_async=is_async)
    ran: list[str] = []

    @effect(operation_id=call_scoped("refund"), executor=world.executor)
    def refund(order: str) -> str:
        """Refund an order."""
        ran.append(order)
        return f"refunded {order}"

    turns = [calls(("refund", {"order": "O-1"}, "call_a"), ("refund", {"order": "O-1"}, "call_b"))]
    graph = world.graph(turns, InMemorySaver(), tools=[refund])
    run(world, graph, start_message())
    for call_id in ("call_a", "call_b"):
        record = world.executor.ledger.get(f"refund:thread-1:{call_id}")
        assert record is not None
        assert record.status is EffectStatus.CONFIRMED
    assert ran == ["O-1", "O-1"]


@pytest.mark.parametrize(
    ("namespace", "expected"),
    [
        ("", "t"),
        ("tools:1f2e", "t"),
        ("agent:9a|tools:1f2e", "t/agent"),
        ("outer:1|inner:2|tools:3", "t/outer/inner"),
    ],
)
def test_the_run_id_is_the_thread_and_enclosing_nodes_without_task_ids(namespace, expected):
    """Task ids change with each step; the run id must not, or a resume would be a new operation."""
    assert _run_id("t", namespace) == expected


def test_a_tool_called_outside_a_graph_is_refused_before_anything_is_sent(tmp_path):
    """No graph, no thread and no checkpointer to pause into: ConfigurationError, nothing sent."""
    world = make_world(tmp_path, is_async=False)
    tool = as_tool(world.capture_payment)
    call = {"name": "capture_payment", "args": pay()[1], "id": "call_1", "type": "tool_call"}
    with pytest.raises(ConfigurationError, match="runs inside a graph"):
        tool.invoke(call)
    assert world.payments.requests == 0
    assert world.executor.ledger.get(PAYMENT) is None


def test_two_paused_siblings_are_both_listed_and_resumed_together(tmp_path, is_async):
    """Two uncertain payments in one turn: one pause listing both; confirmed, one resume ends it."""
    world = make_world(tmp_path, is_async=is_async, payment_faults=[Fault.LOSE_ACK])
    graph = world.graph([calls(pay("call_1", "INV-1"), pay("call_2", "INV-2"))], InMemorySaver())
    run(world, graph, start_message())
    pending = pending_effects(graph, CONFIG)
    assert sorted(p.operation_id for p in pending) == [PAYMENT, "invoice:INV-2:capture"]
    run(world, graph, resume_command(graph, CONFIG))
    assert len(pending_effects(graph, CONFIG)) == 2
    for effect_ in pending:
        capture = world.payments.find_capture(effect_.operation_id)
        assert capture is not None
        operator(
            world,
            "confirm",
            effect_.operation_id,
            "--output-json",
            json.dumps(capture),
            "--provider-operation-id",
            capture["id"],
        )
    state = run(world, graph, resume_command(graph, CONFIG))
    assert pending_effects(graph, CONFIG) == []
    assert {json.loads(m.content)["invoice_id"] for m in tool_messages(state).values()} == {
        "INV-1",
        "INV-2",
    }
    assert world.payments.requests == 2
    assert world.payments.committed() == 2
