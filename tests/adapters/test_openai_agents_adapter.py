"""The OpenAI Agents SDK adapter, run by an offline scripted Model, counted at the providers."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from effect_shop import confirm_with_cli, confirm_with_ledger, open_shop
from extras_support import import_extra

from effectguard import ConfigurationError, EffectRejected, EffectStatus, call_scoped, effect
from effectguard._decorator import executor_of
from effectguard.adapters import PendingEffect
from effectguard.testkit import Fault

agents = import_extra("agents", "openai-agents")

from agents import Runner, RunState  # noqa: E402 - after the extra's check
from openai_agents_support import (  # noqa: E402 - imports agents, after the extra's check
    OFFLINE,
    ScriptModel,
    say,
    shop_agent,
    tool_call,
)

from effectguard.adapters.openai_agents import (  # noqa: E402 - imports agents, after the check
    as_function_tool,
    asettle_input,
    pending_effects,
    settle_input,
)

I1 = {"invoice_id": "INV-1", "amount_cents": 1999}
RECEIPT = {"to": "ada@example.com", "invoice_id": "INV-1"}
CAPTURED = {"id": "cap_000001", "status": "succeeded", "invoice_id": "INV-1", "amount_cents": 1999}
CHILD = Path(__file__).with_name("openai_agents_child.py")


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def run(agent, given):
    return asyncio.run(Runner.run(agent, given, run_config=OFFLINE))


def settle(items, tools, kind):
    if kind == "sync":
        return settle_input(items, tools)
    return asyncio.run(asettle_input(items, tools))


def test_schema_is_the_business_parameters_with_descriptions(tmp_path, kind):
    """The strict schema holds exactly the business parameters, each described; no key."""
    shop = open_shop(tmp_path, kind=kind)
    tool = as_function_tool(shop.capture)
    schema = tool.params_json_schema
    assert tool.name == "capture"
    assert tool.description == "Capture the payment of an invoice."
    assert sorted(schema["properties"]) == ["amount_cents", "invoice_id"]
    assert sorted(schema["required"]) == ["amount_cents", "invoice_id"]
    assert schema["properties"]["invoice_id"]["description"] == (
        "The invoice to capture, e.g. INV-1042."
    )
    assert schema["properties"]["amount_cents"]["description"] == "The amount to capture, in cents."
    shop.close()


def test_two_identical_calls_in_one_turn_commit_once(tmp_path, kind):
    """Two identical calls in one turn run together and share one dispatch."""
    shop = open_shop(tmp_path, kind=kind)
    model = ScriptModel(
        [[tool_call("capture", I1, "call-1"), tool_call("capture", I1, "call-2")], [say("Paid.")]]
    )
    result = run(shop_agent(model, shop.capture), "Capture INV-1.")
    assert result.final_output == "Paid."
    outputs = model.tool_outputs()
    assert json.loads(outputs["call-1"])["id"] == "cap_000001"
    assert outputs["call-1"] == outputs["call-2"]
    assert shop.payments.committed() == 1
    assert shop.payments.attempts() == 1
    shop.close()


def test_lost_acknowledgement_ends_the_run_with_the_pending_payload(tmp_path, kind):
    """The run stops before the model reads the pending effect; the payload names it."""
    shop = open_shop(tmp_path, kind=kind, payment_faults=[Fault.LOSE_ACK])
    model = ScriptModel([[tool_call("capture", I1, "call-1")], [say("Payment done.")]])
    result = run(shop_agent(model, shop.capture), "Capture INV-1.")
    assert result.final_output.startswith("Paused: 1 effect(s) await an operator")
    assert len(model.inputs) == 1
    (payload,) = pending_effects(result)
    assert isinstance(payload, PendingEffect)
    assert payload.operation_id == "invoice:INV-1:capture"
    assert payload.status is EffectStatus.QUARANTINED
    assert payload.tool_call_id == "call-1"
    assert payload.run_id == "openai-agents"
    assert "confirm invoice:INV-1:capture" in payload.operator_command
    assert pending_effects(result.to_input_list()) == [payload]
    assert shop.payments.committed() == 1
    shop.close()


def test_without_the_stop_the_model_is_told_not_to_call_again(tmp_path):
    """Under run_llm_again the model reads the payload, never an invitation to try again."""
    shop = open_shop(tmp_path, payment_faults=[Fault.LOSE_ACK])
    model = ScriptModel([[tool_call("capture", I1, "call-1")], [say("It is pending.")]])
    run(shop_agent(model, shop.capture, stop=False), "Capture INV-1.")
    sent = model.tool_outputs()["call-1"]
    assert "Do not call capture again" in sent
    assert "try again" not in sent.lower()
    assert json.loads(sent)["status"] == "QUARANTINED"
    assert shop.payments.attempts() == 1
    shop.close()


def test_resuming_before_the_operator_acts_sends_nothing(tmp_path, kind):
    """Settling before the operator acts leaves the call pending; asking again is interrupted."""
    shop = open_shop(tmp_path, kind=kind, payment_faults=[Fault.LOSE_ACK])
    model = ScriptModel(
        [[tool_call("capture", I1, "call-1")], [tool_call("capture", I1, "call-2")]]
    )
    agent = shop_agent(model, shop.capture)
    items = run(agent, "Capture INV-1.").to_input_list()
    settled, waiting = settle(items, [shop.capture], kind)
    assert [w.operation_id for w in waiting] == ["invoice:INV-1:capture"]
    assert pending_effects(settled)[0].status is EffectStatus.QUARANTINED
    again = run(agent, [*items, {"role": "user", "content": "Try again."}])
    (interruption,) = again.interruptions
    assert interruption.raw_item.call_id == "call-2"
    state = again.to_state()
    state.approve(interruption)
    model.turns.append([say("unused")])
    approved = asyncio.run(Runner.run(agent, state, run_config=OFFLINE))
    assert approved.final_output.startswith("Paused")
    assert shop.payments.attempts() == 1
    assert shop.payments.committed() == 1
    shop.close()


def test_after_confirm_the_run_continues_with_the_confirmed_output(tmp_path, kind):
    """After agent-effect-ops confirm, settle_input replays the ledger and the run finishes."""
    shop = open_shop(tmp_path, kind=kind, payment_faults=[Fault.LOSE_ACK])
    model = ScriptModel([[tool_call("capture", I1, "call-1")], [say("Captured INV-1.")]])
    agent = shop_agent(model, shop.capture)
    items = run(agent, "Capture INV-1.").to_input_list()
    confirm_with_cli(shop.ledger_path, "invoice:INV-1:capture", CAPTURED)
    settled, waiting = settle(items, [as_function_tool(shop.capture)], kind)
    assert waiting == []
    result = run(agent, settled)
    assert result.final_output == "Captured INV-1."
    assert json.loads(model.tool_outputs()["call-1"]) == CAPTURED
    assert shop.payments.committed() == 1
    assert shop.payments.attempts() == 1
    shop.close()


def test_a_confirmed_sibling_is_not_sent_again(tmp_path):
    """Settling the receipt leaves the capture alone, and calling both again replays both."""
    shop = open_shop(tmp_path, mail_faults=[Fault.LOSE_ACK])
    model = ScriptModel(
        [
            [tool_call("capture", I1, "call-1"), tool_call("send_receipt", RECEIPT, "call-2")],
            [tool_call("capture", I1, "call-3"), tool_call("send_receipt", RECEIPT, "call-4")],
            [say("Paid and receipted.")],
        ]
    )
    agent = shop_agent(model, shop.capture, shop.send_receipt)
    first = run(agent, "Capture INV-1 and send the receipt.")
    assert [p.tool for p in pending_effects(first)] == ["send_receipt"]
    sent = shop.mail.effects()[0]["response"]
    confirm_with_ledger(shop.ledger, "receipt:INV-1", sent)
    settled, waiting = settle_input(first.to_input_list(), [shop.capture, shop.send_receipt])
    assert waiting == []
    result = run(agent, settled)
    assert result.final_output == "Paid and receipted."
    outputs = model.tool_outputs()
    assert json.loads(outputs["call-4"]) == sent
    assert json.loads(outputs["call-3"])["id"] == "cap_000001"
    assert shop.payments.attempts() == 1
    assert shop.mail.attempts() == 1
    assert shop.payments.committed() == 1
    assert shop.mail.committed() == 1
    shop.close()


@pytest.mark.slow
def test_a_run_state_resumed_in_a_new_process_commits_once(tmp_path):
    """RunState.to_string() in one process, confirm, from_string() and approve in another."""

    def child(phase: str) -> dict:
        done = subprocess.run(
            [sys.executable, str(CHILD), phase, str(tmp_path)],
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return json.loads(done.stdout.strip().splitlines()[-1])

    paused = child("pause")
    assert paused["first"].startswith("Paused")
    assert paused["interruptions"] == 1
    shop = open_shop(tmp_path)
    assert shop.payments.attempts() == 1
    found = shop.payments.effects()[0]["response"]
    confirm_with_cli(str(tmp_path / "ledger.db"), "invoice:INV-7:capture", found)
    resumed = child("resume")
    assert resumed["final"] == "Captured INV-7."
    assert json.loads(resumed["sent"]["call-2"]) == found
    assert shop.payments.committed() == 1
    assert shop.payments.attempts() == 1
    shop.close()


def test_a_rejection_is_final_and_invites_no_retry(tmp_path):
    """A REJECTED operation reaches the model as final; calling again does not send."""
    shop = open_shop(tmp_path)
    calls = []

    @effect(operation_id="refund:{invoice_id}", executor=executor_of(shop.capture))
    def refund(invoice_id: str) -> dict:
        """Refund an invoice."""
        calls.append(invoice_id)
        reason = "card closed"
        raise EffectRejected(reason)

    model = ScriptModel(
        [
            [tool_call("refund", {"invoice_id": "INV-9"}, "call-1")],
            [tool_call("refund", {"invoice_id": "INV-9"}, "call-2")],
            [say("Could not refund.")],
        ]
    )
    result = run(shop_agent(model, refund), "Refund INV-9.")
    assert result.final_output == "Could not refund."
    for text in model.tool_outputs().values():
        assert "card closed" in text
        assert "never sent again" in text
        assert "try again" not in text.lower()
    assert calls == ["INV-9"]
    shop.close()


def test_call_scoped_ids_come_from_the_run_id_and_the_tool_call_id(tmp_path):
    """call_scoped operation ids are prefix:run_id:tool_call_id; two calls are two operations."""
    shop = open_shop(tmp_path)
    seen = []

    @effect(operation_id=call_scoped("note"), executor=executor_of(shop.capture))
    def note(text: str) -> dict:
        """Write a note."""
        seen.append(text)
        return {"text": text}

    model = ScriptModel(
        [
            [
                tool_call("note", {"text": "a"}, "call-1"),
                tool_call("note", {"text": "a"}, "call-2"),
            ],
            [say("Noted.")],
        ]
    )
    agent = shop_agent(model, note, run_id=lambda ctx: ctx.context["conversation"])
    asyncio.run(
        Runner.run(agent, "Note a.", context={"conversation": "conv-9"}, run_config=OFFLINE)
    )
    assert seen == ["a", "a"]
    assert shop.ledger.get("note:conv-9:call-1") is not None
    assert shop.ledger.get("note:conv-9:call-2") is not None
    shop.close()


def test_settle_input_names_a_missing_tool(tmp_path):
    """Settling a pending call whose tool was not passed is a clear error, and sends nothing."""
    shop = open_shop(tmp_path, payment_faults=[Fault.LOSE_ACK])
    model = ScriptModel([[tool_call("capture", I1, "call-1")]])
    items = run(shop_agent(model, shop.capture), "Capture INV-1.").to_input_list()
    with pytest.raises(ConfigurationError, match="does not hold"):
        settle_input(items, [shop.send_receipt])
    assert shop.payments.attempts() == 1
    shop.close()


def test_run_state_round_trips_the_pending_gate(tmp_path):
    """The interrupted state survives to_string()/from_string() in the same process too."""
    shop = open_shop(tmp_path, payment_faults=[Fault.LOSE_ACK])
    model = ScriptModel(
        [[tool_call("capture", I1, "call-1")], [tool_call("capture", I1, "call-2")], [say("ok")]]
    )
    agent = shop_agent(model, shop.capture)
    items = run(agent, "Capture INV-1.").to_input_list()
    again = run(agent, [*items, {"role": "user", "content": "Again."}])
    text = again.to_state().to_string()
    confirm_with_ledger(shop.ledger, "invoice:INV-1:capture", CAPTURED)
    state = asyncio.run(RunState.from_string(agent, text))
    for item in state.get_interruptions():
        state.approve(item)
    result = asyncio.run(Runner.run(agent, state, run_config=OFFLINE))
    assert result.final_output == "ok"
    assert json.loads(model.tool_outputs()["call-2"]) == CAPTURED
    assert shop.payments.attempts() == 1
    shop.close()


def test_settle_input_refuses_an_async_tool(tmp_path):
    """The sync settle names asettle_input for an async tool, and sends nothing."""
    shop = open_shop(tmp_path, kind="async", payment_faults=[Fault.LOSE_ACK])
    model = ScriptModel([[tool_call("capture", I1, "call-1")]])
    items = run(shop_agent(model, shop.capture), "Capture INV-1.").to_input_list()
    with pytest.raises(TypeError, match="asettle_input"):
        settle_input(items, [shop.capture])
    assert shop.payments.attempts() == 1
    shop.close()
