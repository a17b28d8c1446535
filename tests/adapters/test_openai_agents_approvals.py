"""Exact-call approvals in the OpenAI Agents SDK's own flow, counted at the fake provider.

A refund above the limit surfaces as the SDK's approval interruption and is
recorded AWAITING_APPROVAL in the ledger, unsent. ``RunState.approve`` or
``reject`` is the person's decision; ``record_decisions`` writes it into the
ledger, bound to the request's fingerprint; only then does the resumed run
send it, once. Every test runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from approval_shop import ARGUMENTS, AUDIT, OPERATION, Refunds, open_refunds
from extras_support import import_extra
from fault_children import ops

from effectguard import ConfigurationError, EffectStatus, EventType, OperationConflictError
from effectguard._scope import CallScope
from effectguard.adapters import ApprovalRequest
from effectguard.adapters._approval import record_decision
from effectguard.errors import IllegalTransitionError

agents = import_extra("agents", "openai-agents")

from agents import Runner  # noqa: E402 - after the extra's check
from openai_agents_support import (  # noqa: E402 - imports agents, after the extra's check
    OFFLINE,
    ScriptModel,
    say,
    shop_agent,
    tool_call,
)

from effectguard.adapters.openai_agents import (  # noqa: E402 - imports agents, after the check
    approval_requests,
    asettle_input,
    pending_effects,
    record_decisions,
    settle_input,
)

CHILD = Path(__file__).with_name("approval_shop.py")
OPS_AUDIT = ("--actor", "bob", "--reason", "checked", "--evidence-reference", "T-35")


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def refunds(tmp_path: Path, ledger_target: str, kind: str) -> Iterator[Refunds]:
    opened = open_refunds(tmp_path, ledger_target, kind=kind)
    yield opened
    opened.close()


def run(agent, given):
    return asyncio.run(Runner.run(agent, given, run_config=OFFLINE))


def paused_run(refunds: Refunds, *later_turns):
    """Run until the SDK's approval interruption for the refund of ARGUMENTS (call-1)."""
    model = ScriptModel([[tool_call("refund", ARGUMENTS, "call-1")], *later_turns])
    agent = shop_agent(model, refunds.refund)
    return model, agent, run(agent, "Refund INV-9.")


def test_a_request_over_the_limit_is_the_sdks_approval_interruption_and_sends_nothing(refunds):
    """The interruption names the ledger's request (secret masked); nothing sent, nothing read."""
    model, _, result = paused_run(refunds)
    (item,) = result.interruptions
    assert item.raw_item.call_id == "call-1"
    assert len(model.inputs) == 1  # the model has not been called again
    record = refunds.ledger.get(OPERATION)
    assert record is not None
    assert record.status is EffectStatus.AWAITING_APPROVAL
    (request,) = approval_requests(result)
    assert isinstance(request, ApprovalRequest)
    assert request.to_json()["kind"] == "effectguard.approval"
    assert request.operation_id == OPERATION
    assert request.tool_call_id == "call-1"
    assert request.fingerprint == record.fingerprint
    assert request.arguments == {**ARGUMENTS, "card_token": "[redacted]"}
    assert "tok_SECRET" not in json.dumps(request.to_json())
    assert f"approve {OPERATION}" in request.operator_command
    assert approval_requests(result.to_state()) == [request]
    assert refunds.provider.committed() == 0


def test_below_the_limit_nobody_is_asked(refunds):
    """The predicate lets a small refund through: no interruption, one send."""
    small = {**ARGUMENTS, "amount_cents": 500}
    model = ScriptModel([[tool_call("refund", small, "call-1")], [say("Refunded.")]])
    result = run(shop_agent(model, refunds.refund), "Refund INV-9.")
    assert result.final_output == "Refunded."
    assert result.interruptions == []
    assert refunds.provider.committed() == 1


def test_an_sdk_approval_recorded_in_the_ledger_sends_once_then_replays(refunds):
    """state.approve + record_decisions: PREPARED, audited; one send on resume; later, replays."""
    model, agent, result = paused_run(refunds, [say("Refunded INV-9.")])
    state = result.to_state()
    (item,) = state.get_interruptions()
    state.approve(item)
    assert refunds.provider.committed() == 0
    (decision,) = record_decisions(state, **AUDIT)
    assert (decision.operation_id, decision.approved) == (OPERATION, True)
    assert decision.status is EffectStatus.PREPARED
    assert record_decisions(state, **AUDIT)[0].status is EffectStatus.PREPARED  # written once
    events = refunds.ledger.events(OPERATION)
    assert [e.type for e in events] == [EventType.APPROVAL_REQUESTED, EventType.OPERATOR_APPROVED]
    approved = events[1].evidence
    assert approved["approved_fingerprint"] == refunds.ledger.get(OPERATION).fingerprint
    assert (approved["actor"], approved["evidence_reference"]) == ("alice", "T-34")
    assert refunds.provider.committed() == 0  # an approval sends nothing by itself

    done = run(agent, state)
    assert done.final_output == "Refunded INV-9."
    sent = json.loads(model.tool_outputs()["call-1"])
    assert sent["amount_cents"] == -25_000
    assert refunds.provider.committed() == 1

    again = ScriptModel([[tool_call("refund", ARGUMENTS, "call-2")], [say("Already done.")]])
    replay = run(shop_agent(again, refunds.refund), "Refund INV-9 again.")
    assert replay.interruptions == []
    assert json.loads(again.tool_outputs()["call-2"]) == sent
    assert refunds.provider.committed() == 1


def test_a_run_state_whose_context_moved_is_a_clear_error_and_writes_nothing(refunds):
    """The SDK keeps a RunState's context private; where it is not found, nothing is guessed."""
    _, _, result = paused_run(refunds, [say("Refunded INV-9.")])
    state = result.to_state()
    (item,) = state.get_interruptions()
    state.approve(item)
    before = refunds.ledger.events(OPERATION)
    state._context = "renamed in a later release"  # what a renamed field looks like

    with pytest.raises(ConfigurationError, match=r"RunState\._context") as raised:
        record_decisions(state, **AUDIT)

    assert "nothing was written" in str(raised.value)
    assert refunds.ledger.events(OPERATION) == before
    assert refunds.provider.committed() == 0


def test_an_approval_only_in_the_run_state_sends_nothing(refunds, kind):
    """The SDK approved, the ledger did not: the body sends nothing and the run pauses again."""
    _, agent, result = paused_run(refunds, [say("unused")])
    state = result.to_state()
    for item in state.get_interruptions():
        state.approve(item)
    again = run(agent, state)
    assert again.final_output.startswith("Paused")
    assert refunds.provider.committed() == 0
    assert refunds.ledger.get(OPERATION).status is EffectStatus.AWAITING_APPROVAL
    (request,) = approval_requests(again)
    assert request.operation_id == OPERATION
    assert pending_effects(again) == []  # an approval is not a pending outcome

    # Approved from the shell instead: settling the paused items sends it once.
    ops(str(refunds.ledger_target), "approve", OPERATION, *OPS_AUDIT)
    if kind == "sync":
        items, waiting = settle_input(again.to_input_list(), [refunds.refund])
    else:
        items, waiting = asyncio.run(asettle_input(again.to_input_list(), [refunds.refund]))
    assert waiting == []
    assert refunds.provider.committed() == 1
    assert json.loads(items[-1]["output"])["amount_cents"] == -25_000


def test_an_sdk_rejection_is_a_denial_and_nothing_is_ever_sent(refunds):
    """state.reject + record_decisions: REJECTED; the model reads why; a new call replays it."""
    model, agent, result = paused_run(refunds, [say("I could not refund it.")])
    state = result.to_state()
    (item,) = state.get_interruptions()
    state.reject(item, rejection_message="A person refused this refund.")
    (decision,) = record_decisions(state, **AUDIT)
    assert (decision.approved, decision.status) == (False, EffectStatus.REJECTED)
    done = run(agent, state)
    assert done.final_output == "I could not refund it."
    assert model.tool_outputs()["call-1"] == "A person refused this refund."
    with pytest.raises(IllegalTransitionError):
        refunds.ledger.approve(OPERATION, **AUDIT)

    later = ScriptModel([[tool_call("refund", ARGUMENTS, "call-2")], [say("Refused.")]])
    run(shop_agent(later, refunds.refund), "Refund INV-9.")
    assert "rejected" in later.tool_outputs()["call-2"]
    assert refunds.provider.committed() == 0


def test_other_arguments_under_the_approved_operation_are_a_conflict_and_send_nothing(refunds):
    """An approval is never spent on arguments nobody saw: another amount is refused."""
    _, agent, result = paused_run(refunds, [say("Refunded INV-9.")])
    state = result.to_state()
    for item in state.get_interruptions():
        state.approve(item)
    record_decisions(state, **AUDIT)

    other = {**ARGUMENTS, "amount_cents": 90_000}
    model = ScriptModel([[tool_call("refund", other, "call-9")], [say("Refused.")]])
    conflicted = run(shop_agent(model, refunds.refund), "Refund more.")
    assert conflicted.interruptions == []
    assert "already recorded with a different request" in model.tool_outputs()["call-9"]
    assert refunds.provider.committed() == 0
    with pytest.raises(OperationConflictError):
        record_decision(
            refunds.refund,
            other,
            scope=CallScope("openai-agents", "call-9"),
            approved=True,
            **AUDIT,
        )

    run(agent, state)  # the request the person approved is still sent, once, as approved
    assert refunds.provider.committed() == 1
    assert refunds.provider.effects()[0]["response"]["amount_cents"] == -25_000


def test_an_approval_that_ran_out_sends_nothing(refunds):
    """record_decisions(expires_in=...): past it, the resumed run sends nothing and waits again."""
    _, agent, result = paused_run(refunds, [say("unused")])
    state = result.to_state()
    for item in state.get_interruptions():
        state.approve(item)
    record_decisions(state, **AUDIT, expires_in=0.05)
    time.sleep(0.2)
    again = run(agent, state)
    assert again.final_output.startswith("Paused")
    assert refunds.ledger.get(OPERATION).status is EffectStatus.AWAITING_APPROVAL
    assert refunds.provider.committed() == 0


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sync"])
def test_decided_in_one_process_resumed_in_others_sends_once(tmp_path, ledger_target, kind):
    """Pause, decide (SDK approve + record), resume: three processes; a second resume replays."""

    def child(*args: str) -> dict:
        done = subprocess.run(
            [
                sys.executable,
                str(CHILD),
                "agents",
                *args[:1],
                str(tmp_path),
                ledger_target,
                *args[1:],
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    refunds = open_refunds(tmp_path, ledger_target)
    paused = child("pause")
    assert paused["interruptions"] == 1
    assert paused["approvals"][0]["arguments"] == {**ARGUMENTS, "card_token": "[redacted]"}
    resumed_early = child("resume")  # nobody decided: the SDK keeps it interrupted
    assert (resumed_early["final"], resumed_early["interruptions"]) == (None, 1)
    assert refunds.provider.committed() == 0
    assert child("decide")["decisions"] == [[OPERATION, True, "PREPARED"]]
    assert refunds.provider.committed() == 0
    first = child("resume")
    assert first["final"] == "Refunded INV-9."
    assert json.loads(first["sent"]["call-1"])["amount_cents"] == -25_000
    second = child("resume")  # the same saved state, resumed again elsewhere: a replay
    assert second["sent"]["call-1"] == first["sent"]["call-1"]
    assert refunds.provider.committed() == 1
    refunds.close()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sync"])
def test_denied_in_one_process_is_never_sent_by_another(tmp_path, ledger_target, kind):
    """A rejection recorded by one process: the resume in another sends nothing."""

    def child(*args: str) -> dict:
        done = subprocess.run(
            [
                sys.executable,
                str(CHILD),
                "agents",
                *args[:1],
                str(tmp_path),
                ledger_target,
                *args[1:],
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    refunds = open_refunds(tmp_path, ledger_target)
    child("pause")
    assert child("decide", "deny")["decisions"] == [[OPERATION, False, "REJECTED"]]
    resumed = child("resume")
    assert resumed["sent"]["call-1"] == "Refused by a person."
    assert refunds.ledger.get(OPERATION).status is EffectStatus.REJECTED
    assert refunds.provider.committed() == 0
    refunds.close()
