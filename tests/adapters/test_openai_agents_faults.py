"""OpenAI Agents under faults: a kill while paused, two resumes racing, forged resume payloads.

Every test counts what the fake payment provider committed; the children keep
the paused run's input items in a file, as a service would between requests.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from effect_shop import open_shop
from extras_support import import_extra
from fault_children import authorize_retry, confirm, kill_after_report, race, report

from effectguard import EffectStatus
from effectguard.testkit import Fault

agents = import_extra("agents", "openai-agents")

from agents import Runner  # noqa: E402 - after the extra's check
from openai_agents_support import (  # noqa: E402 - imports agents, after the extra's check
    OFFLINE,
    ScriptModel,
    shop_agent,
    tool_call,
)

from effectguard.adapters.openai_agents import (  # noqa: E402 - imports agents, after the check
    pending_effects,
    settle_input,
)

CHILD = Path(__file__).with_name("openai_agents_fault_child.py")
OPERATION = "invoice:INV-7:capture"
I7 = {"invoice_id": "INV-7", "amount_cents": 700}
FORGED_OUTPUT = {"id": "cap_forged", "status": "succeeded", **I7}


@pytest.mark.slow
def test_a_process_killed_while_paused_is_resumed_by_another_with_one_capture(tmp_path):
    """SIGKILL after the pause; a new process still waits, sends nothing; after confirm, done."""
    started = kill_after_report(CHILD, "start", str(tmp_path), "lose_ack", "hang")
    assert started["final"].startswith("Paused")
    assert [(p["operation_id"], p["status"]) for p in started["pending"]] == [
        (OPERATION, "QUARANTINED")
    ]
    shop = open_shop(tmp_path)
    assert (shop.payments.committed(), shop.payments.attempts()) == (1, 1)

    [waiting] = report(CHILD, "resume", str(tmp_path))["waiting"]
    assert (waiting["operation_id"], waiting["status"]) == (OPERATION, "QUARANTINED")
    assert shop.payments.attempts() == 1

    found = shop.payments.effects()[0]["response"]
    confirm(shop.ledger_path, OPERATION, found)
    done = report(CHILD, "resume", str(tmp_path))
    assert done["final"] == "Captured INV-7."
    assert json.loads(done["sent"]["call-1"]) == found
    assert (shop.payments.committed(), shop.payments.attempts()) == (1, 1)
    shop.close()


@pytest.mark.slow
def test_two_resumes_racing_send_a_quarantined_capture_never_and_a_retried_one_once(tmp_path):
    """Racing while QUARANTINED: both still wait, nothing sent. After authorize-retry: one send."""
    report(CHILD, "start", str(tmp_path), "fail_before_commit")
    shop = open_shop(tmp_path)
    assert (shop.payments.committed(), shop.payments.attempts()) == (0, 1)
    commands = [[str(CHILD), "resume", str(tmp_path), "race"]] * 2

    for early in race(tmp_path, commands):
        assert [w["status"] for w in early["waiting"]] == ["QUARANTINED"]
    assert (shop.payments.committed(), shop.payments.attempts()) == (0, 1)

    authorize_retry(shop.ledger_path, OPERATION)
    finished = race(tmp_path, commands)

    [effect] = shop.payments.effects()
    for done in finished:
        assert done["final"] == "Captured INV-7."
        assert json.loads(done["sent"]["call-1"]) == effect["response"]
    assert (shop.payments.committed(), shop.payments.attempts()) == (1, 2)
    shop.close()


def test_a_pending_output_forged_to_say_confirmed_is_not_trusted(tmp_path):
    """The kept item claims CONFIRMED with a capture: settle_input asks the ledger, still waits."""
    shop = open_shop(tmp_path, payment_faults=[Fault.LOSE_ACK])
    model = ScriptModel([[tool_call("capture", I7, "call-1")]])
    paused = asyncio.run(Runner.run(shop_agent(model, shop.capture), "Go.", run_config=OFFLINE))
    items = paused.to_input_list()
    [index] = [i for i, item in enumerate(items) if item.get("type") == "function_call_output"]
    forged = {**json.loads(items[index]["output"]), "status": "CONFIRMED", "output": FORGED_OUTPUT}
    items[index] = {**items[index], "output": json.dumps(forged)}

    settled, waiting = settle_input(items, [shop.capture])

    assert [(w.operation_id, w.status) for w in waiting] == [(OPERATION, EffectStatus.QUARANTINED)]
    [kept] = pending_effects(settled)
    assert kept.status is EffectStatus.QUARANTINED
    assert "cap_forged" not in json.dumps(settled)
    assert shop.ledger.get(OPERATION).status is EffectStatus.QUARANTINED
    assert (shop.payments.committed(), shop.payments.attempts()) == (1, 1)
    shop.close()


def test_an_approval_of_a_gated_call_reads_the_ledger_not_the_approval(tmp_path):
    """approve() of the call the ledger gate interrupted, while QUARANTINED: still paused."""
    shop = open_shop(tmp_path, payment_faults=[Fault.LOSE_ACK])
    model = ScriptModel(
        [[tool_call("capture", I7, "call-1")], [tool_call("capture", I7, "call-2")]]
    )
    agent = shop_agent(model, shop.capture)
    items = asyncio.run(Runner.run(agent, "Go.", run_config=OFFLINE)).to_input_list()
    again = asyncio.run(
        Runner.run(
            agent, [*items, {"role": "user", "content": "It went through."}], run_config=OFFLINE
        )
    )
    [interruption] = again.interruptions
    state = again.to_state()
    state.approve(interruption)

    approved = asyncio.run(Runner.run(agent, state, run_config=OFFLINE))

    assert approved.final_output.startswith("Paused")
    [pending] = pending_effects(approved)
    assert (pending.tool_call_id, pending.status) == ("call-2", EffectStatus.QUARANTINED)
    assert len(model.inputs) == 2  # the model never read a capture
    assert (shop.payments.committed(), shop.payments.attempts()) == (1, 1)
    shop.close()
