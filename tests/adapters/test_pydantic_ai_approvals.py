"""Pydantic AI: a capture that needs a person's approval is a deferred approval, sent once after it.

The application's decision travels in ``DeferredToolResults.approvals``;
``record_approvals`` writes it to the ledger, and only the ledger's approval
lets the resumed run send. Every test counts captures at the fake provider,
on every ledger backend.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from extras_support import import_extra
from fault_children import AUDIT, ops, report
from pydantic_ai_support import FLAVOURS, ScriptedModel, agent, capture, capture_tool, run

from effectguard import EffectExecutor, EffectLedger, EffectStatus, EventType, InvalidRequestError
from effectguard.adapters import APPROVAL_KIND, ApprovalRequest
from effectguard.adapters.pydantic_ai import (
    arecord_approvals,
    as_tool,
    asettle_deferred,
    record_approvals,
    settle_deferred,
)
from effectguard.errors import OperationChangedError
from effectguard.testkit import FakePaymentProvider

pydantic_ai = import_extra("pydantic_ai", "pydantic-ai")
DeferredToolRequests = pydantic_ai.DeferredToolRequests
DeferredToolResults = pydantic_ai.DeferredToolResults
ToolApproved = pydantic_ai.ToolApproved
ToolDenied = pydantic_ai.ToolDenied

OPERATION = "invoice:INV-1:capture"
DECISION = {"actor": "alice", "reason": "the order checks out", "evidence_reference": "T-7"}
CHILD = Path(__file__).with_name("pydantic_ai_approval_child.py")


class Shop:
    """A capture tool over ``ledger`` that needs an approval above 10.00, and its provider."""

    def __init__(self, ledger: EffectLedger, flavour: str) -> None:
        self.flavour = flavour
        self.provider = FakePaymentProvider(idempotency_guaranteed=False)
        self.fn = capture_tool(
            self.provider,
            EffectExecutor(ledger),
            flavour,
            requires_approval=lambda a: a["amount_cents"] > 1_000,
        )
        self.tool = as_tool(self.fn)
        self.ledger = ledger

    def start(self, call_id: str = "call-1", amount_cents: int = 1999) -> tuple[Any, Any]:
        """A run asking for one capture of INV-1: the script and the run's result."""
        script = ScriptedModel([capture("INV-1", call_id, amount_cents)])
        return script, run(self.flavour, agent(script, [self.tool]), user_prompt="charge INV-1")

    def record(self, requests: Any, results: Any, **options: Any) -> Any:
        """record_approvals, or arecord_approvals in an event loop for the async flavour."""
        if self.flavour == "async":
            return asyncio.run(
                arecord_approvals(requests, results, [self.fn], **DECISION, **options)
            )
        return record_approvals(requests, results, [self.fn], **DECISION, **options)

    def settle(self, requests: Any) -> Any:
        """settle_deferred, or asettle_deferred for the async flavour."""
        if self.flavour == "async":
            return asyncio.run(asettle_deferred(requests, [self.fn]))
        return settle_deferred(requests, [self.fn])

    def resume(self, script: ScriptedModel, paused: Any, results: Any) -> Any:
        """The paused run resumed with ``results``."""
        target = agent(script, [self.tool])
        return run(
            self.flavour,
            target,
            message_history=paused.all_messages(),
            deferred_tool_results=results,
        )


@pytest.fixture(params=FLAVOURS)
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_nothing_is_sent_before_the_approval_once_after_and_replayed_later(
    ledger: EffectLedger, flavour: str
) -> None:
    """ApprovalRequired with the ledger's request; a forged approval sends nothing; one capture."""
    shop = Shop(ledger, flavour)
    script, paused = shop.start()
    requests = paused.output
    assert isinstance(requests, DeferredToolRequests)
    assert [call.tool_call_id for call in requests.approvals] == ["call-1"]
    assert requests.calls == []
    request = ApprovalRequest.from_json(requests.metadata["call-1"])
    assert requests.metadata["call-1"]["kind"] == APPROVAL_KIND
    assert (request.operation_id, request.arguments) == (
        OPERATION,
        {"invoice_id": "INV-1", "amount_cents": 1999},
    )
    assert f"approve {OPERATION}" in request.approve_command
    assert shop.provider.committed() == 0

    results, waiting = shop.settle(requests)  # nobody decided yet
    assert (results.approvals, [w.status for w in waiting]) == (
        {},
        [EffectStatus.AWAITING_APPROVAL],
    )

    # An approval only in Pydantic AI's state: the tool asks the ledger, which says no.
    forged = shop.resume(script, paused, DeferredToolResults(approvals={"call-1": True}))
    assert isinstance(forged.output, DeferredToolRequests)
    assert [call.tool_call_id for call in forged.output.approvals] == ["call-1"]
    assert shop.provider.committed() == 0
    assert ledger.get(OPERATION).status is EffectStatus.AWAITING_APPROVAL  # type: ignore[union-attr]

    results, waiting = shop.record(requests, DeferredToolResults(approvals={"call-1": True}))
    assert waiting == []
    assert results.approvals == {"call-1": ToolApproved()}
    assert shop.provider.committed() == 0  # recording the approval sends nothing
    done = shop.resume(script, paused, results)
    assert done.output == "done: call-1=success"
    assert shop.provider.committed() == 1

    # The same capture asked for again in a new run: replayed from the ledger.
    again, later = shop.start("call-2")
    assert later.output == "done: call-2=success"
    assert again.seen == [("call-2", script.seen[0][1], "success")]
    assert shop.provider.committed() == 1

    kinds = [event.type for event in ledger.events(OPERATION)]
    assert kinds == [
        EventType.APPROVAL_REQUESTED,
        EventType.OPERATOR_APPROVED,
        EventType.DISPATCHED,
        EventType.CONFIRMED,
    ]
    approval = ledger.events(OPERATION)[1].evidence
    assert (approval["actor"], approval["evidence_reference"]) == ("alice", "T-7")
    assert approval["approved_fingerprint"] == ledger.get(OPERATION).fingerprint  # type: ignore[union-attr]


def test_a_denial_is_recorded_and_nothing_is_ever_sent(ledger: EffectLedger, flavour: str) -> None:
    """ToolDenied: REJECTED in the ledger, the model told not to retry; asking again is refused."""
    shop = Shop(ledger, flavour)
    script, paused = shop.start()
    results, waiting = shop.record(paused.output, DeferredToolResults(approvals={"call-1": False}))
    assert waiting == []
    denial = results.approvals["call-1"]
    assert isinstance(denial, ToolDenied)
    assert "do not retry" in denial.message
    assert ledger.get(OPERATION).status is EffectStatus.REJECTED  # type: ignore[union-attr]
    assert ledger.events(OPERATION)[-1].type is EventType.OPERATOR_DENIED

    done = shop.resume(script, paused, results)
    assert script.seen == [("call-1", denial.message, "denied")]
    assert done.output == "done: call-1=denied"

    _, later = shop.start("call-2")
    assert later.output == "done: call-2=failed"
    assert shop.provider.committed() == 0
    assert shop.provider.attempts() == 0


def test_other_arguments_under_the_same_operation_are_a_conflict(ledger: EffectLedger) -> None:
    """Approved at 19.99; another run asks 25.00 for INV-1: refused, none sent; then one capture."""
    shop = Shop(ledger, "sync")
    script, paused = shop.start()
    results, _ = shop.record(paused.output, DeferredToolResults(approvals={"call-1": True}))

    other, changed = shop.start("call-2", amount_cents=2500)
    assert changed.output == "done: call-2=failed"
    assert "do not retry" in str(other.seen[0][1])
    assert shop.provider.committed() == 0

    shop.resume(script, paused, results)
    assert shop.provider.committed() == 1
    found = shop.provider.find_capture("capture:INV-1")
    assert found is not None
    assert found["amount_cents"] == 1999


def test_an_approval_with_other_arguments_is_refused_before_anything_is_written(
    ledger: EffectLedger,
) -> None:
    """ToolApproved(override_args=...) would send what nobody approved: refused, nothing written."""
    shop = Shop(ledger, "sync")
    _, paused = shop.start()
    overridden = ToolApproved(override_args={"invoice_id": "INV-1", "amount_cents": 99_999})
    with pytest.raises(InvalidRequestError, match="override_args"):
        shop.record(paused.output, DeferredToolResults(approvals={"call-1": overridden}))
    record = ledger.get(OPERATION)
    assert record is not None
    assert (record.status, record.event_count) == (EffectStatus.AWAITING_APPROVAL, 1)
    assert shop.provider.committed() == 0


def test_a_decision_on_a_request_that_moved_on_is_refused(ledger: EffectLedger) -> None:
    """Denied in the ledger first: the application's approval is refused; settle says denied."""
    shop = Shop(ledger, "sync")
    script, paused = shop.start()
    ledger.deny(OPERATION, **DECISION)  # type: ignore[attr-defined]
    with pytest.raises(OperationChangedError):
        shop.record(paused.output, DeferredToolResults(approvals={"call-1": True}))
    results, waiting = shop.settle(paused.output)
    assert waiting == []
    assert isinstance(results.approvals["call-1"], ToolDenied)
    shop.resume(script, paused, results)
    assert shop.provider.committed() == 0


def test_other_tools_answers_pass_through(ledger: EffectLedger) -> None:
    """An answer for a call effectguard did not defer is the application's: kept as given."""
    shop = Shop(ledger, "sync")
    _, paused = shop.start()
    given = DeferredToolResults(approvals={"call-1": True}, calls={"someone-else": "42"})
    results, _ = shop.record(paused.output, given)
    assert results.calls == {"someone-else": "42"}
    assert results.approvals == {"call-1": ToolApproved()}


@pytest.mark.slow
def test_approved_in_one_process_and_resumed_in_another(tmp_path: Path) -> None:
    """Deferred in one process, approved in a second, resumed in a third: one capture, replayed."""
    started = report(CHILD, "start", str(tmp_path))
    request = ApprovalRequest.from_json(started["metadata"])
    assert started["committed"] == 0

    early = report(CHILD, "resume", str(tmp_path))
    assert [w["status"] for w in early["waiting"]] == ["AWAITING_APPROVAL"]
    assert early["committed"] == 0

    assert report(CHILD, "approve", str(tmp_path))["status"] == "PREPARED"
    done = report(CHILD, "resume", str(tmp_path))
    assert done["output"] == "done: call-1=success"
    assert done["committed"] == 1
    again = report(CHILD, "resume", str(tmp_path))  # the same resume once more: replayed
    assert again == done
    assert request.operation_id == started["metadata"]["operation_id"]


@pytest.mark.slow
def test_approved_with_the_cli_then_resumed_in_another_process(tmp_path: Path) -> None:
    """The payload's `agent-effect-ops approve` command is what settle_deferred and the run obey."""
    started = report(CHILD, "start", str(tmp_path))
    request = ApprovalRequest.from_json(started["metadata"])
    ledger = str(tmp_path / "ledger.db")
    ops(
        ledger, "approve", request.operation_id, "--expect-events", str(request.event_count), *AUDIT
    )
    done = report(CHILD, "resume", str(tmp_path))
    assert (done["output"], done["committed"]) == ("done: call-1=success", 1)


def test_an_expired_approval_sends_nothing_and_a_fresh_one_sends_once(
    ledger: EffectLedger,
) -> None:
    """Approved for 50 ms, resumed later: asked again, nothing sent; approved again: one capture."""
    shop = Shop(ledger, "sync")
    script, paused = shop.start()
    yes = DeferredToolResults(approvals={"call-1": True})
    results, _ = shop.record(paused.output, yes, expires_in=0.05)
    time.sleep(0.2)
    expired = shop.resume(script, paused, results)
    assert isinstance(expired.output, DeferredToolRequests)
    assert ledger.get(OPERATION).status is EffectStatus.AWAITING_APPROVAL  # type: ignore[union-attr]
    assert shop.provider.committed() == 0

    results, waiting = shop.record(expired.output, yes)
    assert waiting == []
    done = shop.resume(script, expired, results)
    assert done.output == "done: call-1=success"
    assert shop.provider.committed() == 1
