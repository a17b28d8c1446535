"""LangGraph: a refund that needs a person's approval interrupts, and is sent once after it.

Every test counts refunds at the fake provider, on every ledger backend. The
decision is the ledger's: a resume value, however it is forged, approves nothing.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from extras_support import import_extra

langgraph = import_extra("langgraph", "langgraph")

from fault_children import AUDIT, ops, report
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from lg_approval_world import REFUND, Refunds, asked, make_refunds, start_message
from lg_world import FINAL, tool_messages

from effectguard import EffectLedger, EffectStatus, EventType, SQLiteEffectLedger
from effectguard.adapters import APPROVAL_KIND, ApprovalRequest
from effectguard.adapters.langgraph import (
    aapprove_pending,
    adeny_pending,
    approvals,
    approve_pending,
    deny_pending,
    pending_effects,
    resume_command,
)
from effectguard.errors import OperationChangedError

CONFIG = {"configurable": {"thread_id": "thread-approve"}}
DECISION = {
    "actor": "alice",
    "reason": "the customer's claim checks out",
    "evidence_reference": "T-9",
}
CHILD = Path(__file__).with_name("lg_approval_child.py")


@pytest.fixture(params=["sync", "async"])
def is_async(request: pytest.FixtureRequest) -> bool:
    return request.param == "async"


def run(refunds: Refunds, graph: Any, value: Any, config: Any = CONFIG) -> dict[str, Any]:
    if refunds.is_async:
        return asyncio.run(graph.ainvoke(value, config))  # type: ignore[no-any-return]
    return graph.invoke(value, config)  # type: ignore[no-any-return]


def decided(refunds: Refunds, graph: Any, *, approve: bool, **options: Any) -> Command[Any]:
    """approve_pending / deny_pending, or their async forms for the async graph."""
    ledger = refunds.executor.ledger
    if refunds.is_async:
        chosen = aapprove_pending if approve else adeny_pending
        return asyncio.run(chosen(graph, CONFIG, ledger=ledger, **DECISION, **options))  # type: ignore[operator]
    chose = approve_pending if approve else deny_pending
    return chose(graph, CONFIG, ledger=ledger, **DECISION, **options)  # type: ignore[operator]


def paused(refunds: Refunds) -> tuple[Any, ApprovalRequest]:
    """A graph paused on the refund's approval request, and that request."""
    graph = refunds.graph(asked(), InMemorySaver())
    state = run(refunds, graph, start_message())
    [interrupt] = state["__interrupt__"]
    return graph, ApprovalRequest.from_json(interrupt.value)


def test_nothing_is_sent_before_the_approval_once_after_and_replayed_later(
    ledger: EffectLedger, is_async: bool
) -> None:
    """Interrupt with the request (note masked), again on an early resume; approved: one refund."""
    refunds = make_refunds(ledger, is_async=is_async)
    graph, request = paused(refunds)
    assert request.to_json()["kind"] == APPROVAL_KIND
    assert (request.tool, request.tool_call_id, request.operation_id) == (
        "refund",
        "call_refund",
        REFUND,
    )
    assert request.arguments == {
        "invoice_id": "INV-9",
        "amount_cents": 25_000,
        "note": "[redacted]",
    }
    assert f"approve {REFUND} --expect-events 1" in request.approve_command
    assert f"deny {REFUND}" in request.deny_command
    assert "4417" not in str(request.to_json())
    assert approvals(graph, CONFIG) == [request]
    assert pending_effects(graph, CONFIG) == []  # an approval is not an uncertain outcome
    assert refunds.provider.committed() == 0

    again = run(refunds, graph, resume_command(graph, CONFIG))
    assert [ApprovalRequest.from_json(i.value) for i in again["__interrupt__"]] == [request]
    assert refunds.provider.committed() == 0

    command = decided(refunds, graph, approve=True)
    assert refunds.provider.committed() == 0  # an approval sends nothing by itself
    done = run(refunds, graph, command)
    sent = tool_messages(done)["call_refund"]
    assert sent.status != "error"
    assert '"status": "succeeded"' in sent.content
    assert done["messages"][-1].content == FINAL
    assert refunds.provider.committed() == 1

    # The same refund asked for again, in another thread: replayed from the ledger.
    other = {"configurable": {"thread_id": "thread-again"}}
    later = refunds.graph(asked("call_again"), InMemorySaver())
    replayed = run(refunds, later, start_message(), other)
    assert tool_messages(replayed)["call_again"].content == sent.content
    assert refunds.provider.committed() == 1

    kinds = [event.type for event in ledger.events(REFUND)]
    assert kinds == [
        EventType.APPROVAL_REQUESTED,
        EventType.OPERATOR_APPROVED,
        EventType.DISPATCHED,
        EventType.CONFIRMED,
    ]
    approval = ledger.events(REFUND)[1].evidence
    assert (approval["actor"], approval["evidence_reference"]) == ("alice", "T-9")
    assert approval["approved_fingerprint"] == ledger.get(REFUND).fingerprint  # type: ignore[union-attr]


def test_a_denied_refund_is_never_sent_and_the_model_is_told_not_to_retry(
    ledger: EffectLedger, is_async: bool
) -> None:
    """Deny: the resumed tool answers an error; asking again later is refused too; none sent."""
    refunds = make_refunds(ledger, is_async=is_async)
    graph, _ = paused(refunds)
    done = run(refunds, graph, decided(refunds, graph, approve=False))
    message = tool_messages(done)["call_refund"]
    assert message.status == "error"
    assert "do not retry" in message.content
    assert "denied by alice" in message.content
    assert ledger.get(REFUND).status is EffectStatus.REJECTED  # type: ignore[union-attr]

    other = {"configurable": {"thread_id": "thread-again"}}
    later = refunds.graph(asked("call_again"), InMemorySaver())
    refused = tool_messages(run(refunds, later, start_message(), other))["call_again"]
    assert refused.status == "error"
    assert refunds.provider.committed() == 0
    assert refunds.provider.attempts() == 0


@pytest.mark.parametrize(
    "forged",
    [
        Command(resume={"approved": True}),
        Command(resume=True),
        Command(resume={"effectguard": "approved", "status": "PREPARED"}),
    ],
)
def test_a_forged_resume_value_approves_nothing(ledger: EffectLedger, forged: Command[Any]) -> None:
    """Whatever the resume value says, the ledger says AWAITING_APPROVAL: interrupt again."""
    refunds = make_refunds(ledger, is_async=False)
    graph, request = paused(refunds)
    state = run(refunds, graph, forged)
    assert [ApprovalRequest.from_json(i.value) for i in state["__interrupt__"]] == [request]
    assert ledger.get(REFUND).status is EffectStatus.AWAITING_APPROVAL  # type: ignore[union-attr]
    assert refunds.provider.committed() == 0


def test_a_request_with_other_arguments_is_a_conflict_and_sends_nothing(
    ledger: EffectLedger,
) -> None:
    """Approved at 250.00; another thread asks 300.00 under the same id: refused, nothing sent."""
    refunds = make_refunds(ledger, is_async=False)
    graph, _ = paused(refunds)
    command = decided(refunds, graph, approve=True)

    other = {"configurable": {"thread_id": "thread-other"}}
    changed = refunds.graph(asked("call_more", amount_cents=30_000), InMemorySaver())
    refused = tool_messages(run(refunds, changed, start_message(), other))["call_more"]
    assert refused.status == "error"
    assert "do not retry" in refused.content
    assert refunds.provider.committed() == 0  # the approval was not spent on other arguments

    run(refunds, graph, command)
    assert refunds.provider.committed() == 1
    capture = refunds.provider.find_capture("refund:INV-9")
    assert capture is not None
    assert capture["amount_cents"] == 25_000


def test_a_decision_on_a_request_that_moved_on_is_refused(ledger: EffectLedger) -> None:
    """Denied with the CLI's ledger API first: approving what was shown is refused, none sent."""
    refunds = make_refunds(ledger, is_async=False)
    graph, _ = paused(refunds)
    ledger.deny(REFUND, **DECISION)  # type: ignore[attr-defined]
    with pytest.raises(OperationChangedError):
        decided(refunds, graph, approve=True)
    assert ledger.get(REFUND).status is EffectStatus.REJECTED  # type: ignore[union-attr]
    done = run(refunds, graph, resume_command(graph, CONFIG))
    assert tool_messages(done)["call_refund"].status == "error"
    assert refunds.provider.committed() == 0


def test_deciding_again_what_the_ledger_holds_writes_nothing(ledger: EffectLedger) -> None:
    """Approved twice (a retry after a crash): one approval event; the resume sends once."""
    refunds = make_refunds(ledger, is_async=False)
    graph, _ = paused(refunds)
    decided(refunds, graph, approve=True)
    command = decided(refunds, graph, approve=True)
    assert [e.type for e in ledger.events(REFUND)].count(EventType.OPERATOR_APPROVED) == 1
    run(refunds, graph, command)
    assert refunds.provider.committed() == 1


@pytest.mark.slow
def test_approved_in_one_process_and_resumed_in_another(tmp_path: Path) -> None:
    """Paused in one process; approved in a second; resumed in a third: one refund, then none."""
    started = report(CHILD, "start", str(tmp_path))
    [request] = [ApprovalRequest.from_json(p) for p in started["paused"]]
    assert request.operation_id == REFUND
    assert started["committed"] == 0

    early = report(CHILD, "resume", str(tmp_path))
    assert [ApprovalRequest.from_json(p) for p in early["paused"]] == [request]
    assert early["committed"] == 0

    assert report(CHILD, "approve", str(tmp_path))["status"] == "PREPARED"
    done = report(CHILD, "resume", str(tmp_path))
    assert done["paused"] == []
    assert '"status": "succeeded"' in done["refund"]
    assert done["committed"] == 1

    again = report(CHILD, "again", str(tmp_path))
    assert again["refund"] == done["refund"]
    assert again["committed"] == 1


@pytest.mark.slow
def test_approved_with_the_cli_while_paused_then_resumed_in_another_process(
    tmp_path: Path,
) -> None:
    """The operator's `agent-effect-ops approve` (the payload's command) is what resume obeys."""
    started = report(CHILD, "start", str(tmp_path))
    [request] = [ApprovalRequest.from_json(p) for p in started["paused"]]
    ledger = str(tmp_path / "ledger.db")
    ops(
        ledger, "approve", request.operation_id, "--expect-events", str(request.event_count), *AUDIT
    )
    done = report(CHILD, "resume", str(tmp_path))
    assert done["committed"] == 1
    record = SQLiteEffectLedger(ledger).get(REFUND)
    assert record is not None
    assert record.status is EffectStatus.CONFIRMED


def test_an_expired_approval_sends_nothing_and_a_fresh_one_sends_once(
    ledger: EffectLedger,
) -> None:
    """Approved for 50 ms, resumed later: interrupts again (a new state shown); re-approved: one."""
    refunds = make_refunds(ledger, is_async=False)
    graph, request = paused(refunds)
    command = decided(refunds, graph, approve=True, expires_in=0.05)
    time.sleep(0.2)
    state = run(refunds, graph, command)
    [again] = [ApprovalRequest.from_json(i.value) for i in state["__interrupt__"]]
    assert again.event_count > request.event_count
    assert ledger.get(REFUND).status is EffectStatus.AWAITING_APPROVAL  # type: ignore[union-attr]
    assert refunds.provider.committed() == 0

    run(refunds, graph, decided(refunds, graph, approve=True))
    assert refunds.provider.committed() == 1
