"""The LlamaIndex adapter under its offline MockFunctionCallingLLM, counted at the fakes."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from effect_shop import confirm_with_cli, confirm_with_ledger, open_shop
from extras_support import import_extra

from effectguard import (
    INJECTED,
    ConfigurationError,
    EffectRejected,
    EffectStatus,
    call_scoped,
    effect,
)
from effectguard._decorator import executor_of
from effectguard.testkit import Fault

import_extra("llama_index.core", "llama-index")

from llama_index.core.agent.workflow import AgentWorkflow  # noqa: E402 - after the extra's check
from llama_index_support import (  # noqa: E402 - imports llama_index, after the extra's check
    Script,
    keep,
    restore,
    shop_agent,
    until_paused,
)

from effectguard.adapters.llama_index import (  # noqa: E402 - imports llama_index, after the check
    RUN_ID_KEY,
    as_function_tool,
    paused_calls,
    resume_event,
)

I1 = {"invoice_id": "INV-1", "amount_cents": 1999}
CAPTURED = {"id": "cap_000001", "status": "succeeded", "invoice_id": "INV-1", "amount_cents": 1999}
CHILD = Path(__file__).with_name("llama_index_child.py")


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_schema_is_the_business_parameters_with_descriptions(tmp_path, kind):
    """The tool's schema holds exactly the business parameters, each described; no key, no ctx."""
    shop = open_shop(tmp_path, kind=kind)
    tool = as_function_tool(shop.capture)
    schema = tool.metadata.fn_schema.model_json_schema()
    assert tool.metadata.name == "capture"
    assert tool.metadata.description == "Capture the payment of an invoice."
    assert sorted(schema["properties"]) == ["amount_cents", "invoice_id"]
    assert sorted(schema["required"]) == ["amount_cents", "invoice_id"]
    assert schema["properties"]["invoice_id"]["description"] == (
        "The invoice to capture, e.g. INV-1042."
    )
    assert schema["properties"]["amount_cents"]["description"] == "The amount to capture, in cents."
    shop.close()


def test_two_identical_calls_in_one_turn_commit_once(tmp_path, kind):
    """Two identical parallel calls share one dispatch; the model reads the output for both."""
    shop = open_shop(tmp_path, kind=kind)
    script = Script([[("capture", I1, "call-1"), ("capture", I1, "call-2")], "Paid."])
    result = asyncio.run(_run(shop_agent(script, shop.capture), "Capture INV-1."))
    assert str(result) == "Paid."
    sent = script.results()
    assert json.loads(sent["call-1"]) == CAPTURED
    assert sent["call-1"] == sent["call-2"]
    assert shop.payments.committed() == 1
    assert shop.payments.attempts() == 1
    shop.close()


async def _run(agent, message):
    return await agent.run(user_msg=message)


def test_lost_ack_pauses_resume_before_operator_stays_paused_then_confirm_commits_once(
    tmp_path, kind
):
    """Lost ack: the workflow waits; an early resume waits again; after confirm, one effect."""
    shop = open_shop(tmp_path, kind=kind, payment_faults=[Fault.LOSE_ACK])
    script = Script([[("capture", I1, "call-1")], "Captured INV-1."])
    agent = shop_agent(script, shop.capture)

    async def story():
        handler = agent.run(user_msg="Capture INV-1.")
        (paused,) = await until_paused(handler, 1)
        assert paused.tool_call_id == "call-1"
        assert paused.operation_id == "invoice:INV-1:capture"
        assert paused.payload["status"] == EffectStatus.QUARANTINED.value
        assert "confirm invoice:INV-1:capture" in paused.payload["operator_command"]
        assert len(script.seen) == 1  # the model has read nothing of the uncertain capture
        handler.ctx.send_event(resume_event(paused))
        (again,) = await until_paused(handler, 1)
        assert again.round == 2
        assert again.payload["status"] == EffectStatus.QUARANTINED.value
        assert shop.payments.attempts() == 1
        assert len(script.seen) == 1
        await asyncio.to_thread(
            confirm_with_cli, shop.ledger_path, "invoice:INV-1:capture", CAPTURED
        )
        handler.ctx.send_event(resume_event(again))
        return await handler

    assert str(asyncio.run(story())) == "Captured INV-1."
    assert json.loads(script.results()["call-1"]) == CAPTURED
    assert shop.payments.committed() == 1
    assert shop.payments.attempts() == 1
    shop.close()


def test_a_serialized_context_resumes_in_this_process_and_a_repeated_resume_is_ignored(tmp_path):
    """Context.to_dict / from_dict keeps the pause; resuming twice still gives one model turn."""
    shop = open_shop(tmp_path, payment_faults=[Fault.LOSE_ACK])
    script = Script([[("capture", I1, "call-1"), ("capture", I1, "call-2")], "Paid."])
    agent = shop_agent(script, shop.capture)

    async def story():
        handler = agent.run(user_msg="Capture INV-1.")
        paused = await until_paused(handler, 2)
        assert sorted(p.tool_call_id for p in paused) == ["call-1", "call-2"]
        text = await keep(handler)
        confirm_with_ledger(shop.ledger, "invoice:INV-1:capture", CAPTURED)
        ctx = restore(agent, text)
        kept = await paused_calls(ctx)
        assert sorted(p.tool_call_id for p in kept) == ["call-1", "call-2"]
        resumed = agent.run(ctx=ctx)
        for pause in [*kept, *kept]:
            resumed.ctx.send_event(resume_event(pause))
        return await resumed

    assert str(asyncio.run(story())) == "Paid."
    assert len(script.seen) == 2
    assert shop.payments.committed() == 1
    assert shop.payments.attempts() == 1
    shop.close()


@pytest.mark.slow
def test_a_context_resumed_in_a_new_process_commits_once(tmp_path):
    """Pause (Context saved, then SIGKILL), resume early (still waiting), confirm, resume: one."""

    def child(phase: str, returncode: int = 0) -> dict:
        done = subprocess.run(
            [sys.executable, str(CHILD), phase, str(tmp_path)],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == returncode, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    paused = child("pause", -signal.SIGKILL)
    assert paused["paused"] == ["invoice:INV-7:capture"]
    early = child("resume")
    assert early["paused"] == ["invoice:INV-7:capture"]
    shop = open_shop(tmp_path)
    assert shop.payments.attempts() == 1
    found = shop.payments.effects()[0]["response"]
    confirm_with_cli(str(tmp_path / "ledger.db"), "invoice:INV-7:capture", found)
    resumed = child("resume")
    assert resumed["final"] == "Captured INV-7."
    assert json.loads(resumed["sent"]["call-1"]) == found
    assert shop.payments.committed() == 1
    assert shop.payments.attempts() == 1
    shop.close()


def test_a_rejection_is_a_tool_error_that_invites_no_retry(tmp_path):
    """A REJECTED operation reaches the model as an error; calling again does not send."""
    shop = open_shop(tmp_path)
    calls = []

    @effect(operation_id="refund:{invoice_id}", executor=executor_of(shop.capture))
    def refund(invoice_id: str) -> dict:
        """Refund an invoice."""
        calls.append(invoice_id)
        reason = "card closed"
        raise EffectRejected(reason)

    script = Script(
        [
            [("refund", {"invoice_id": "INV-9"}, "call-1")],
            [("refund", {"invoice_id": "INV-9"}, "call-2")],
            "Could not refund.",
        ]
    )
    result = asyncio.run(_run(shop_agent(script, refund), "Refund INV-9."))
    assert str(result) == "Could not refund."
    for text in script.results().values():
        assert "card closed" in text
        assert "never sent again" in text
        assert "try again" not in text.lower()
    assert calls == ["INV-9"]
    shop.close()


def test_arguments_the_schema_refuses_send_nothing(tmp_path):
    """Arguments that do not fit the parameters are a tool error, and nothing is recorded."""
    shop = open_shop(tmp_path)
    script = Script([[("capture", {"invoice_id": "INV-1"}, "call-1")], "Sorry."])
    asyncio.run(_run(shop_agent(script, shop.capture), "Capture INV-1."))
    assert "do not fit its parameters" in script.results()["call-1"]
    assert shop.payments.attempts() == 0
    assert shop.ledger.get("invoice:INV-1:capture") is None
    shop.close()


def test_call_scoped_ids_keep_the_run_id_across_a_restored_context(tmp_path):
    """prefix:run_id:tool_call_id; a run continued from a saved Context keeps its run id."""
    shop = open_shop(tmp_path, payment_faults=[Fault.LOSE_ACK])

    @effect(operation_id=call_scoped("pay"), executor=executor_of(shop.capture))
    def pay(invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED) -> dict:
        """Pay an invoice.

        Args:
            invoice_id: The invoice.
            amount_cents: How much, in cents.
            idempotency_key: Supplied by the executor.
        """
        return shop.payments.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)

    script = Script([[("pay", I1, "call-1")], "Paid."])
    agent = shop_agent(script, pay)

    async def story():
        handler = agent.run(user_msg="Pay INV-1.")
        (paused,) = await until_paused(handler, 1)
        run_id = await handler.ctx.store.get(RUN_ID_KEY)
        assert paused.operation_id == f"pay:{run_id}:call-1"
        text = await keep(handler)
        found = shop.payments.effects()[0]["response"]
        confirm_with_ledger(shop.ledger, paused.operation_id, found)
        ctx = restore(agent, text)
        resumed = agent.run(ctx=ctx)
        for pause in await paused_calls(ctx):
            assert pause.operation_id == paused.operation_id
            resumed.ctx.send_event(resume_event(pause))
        return await resumed, found

    final, found = asyncio.run(story())
    assert str(final) == "Paid."
    assert json.loads(script.results()["call-1"]) == found
    assert shop.payments.committed() == 1
    assert shop.payments.attempts() == 1
    shop.close()


def test_called_outside_an_agent_workflow_it_refuses_and_sends_nothing(tmp_path):
    """Without the agent's ToolCall there is no tool call id: a clear error, nothing sent."""
    shop = open_shop(tmp_path)
    tool = as_function_tool(shop.capture)

    async def call():
        await tool.acall(ctx=object(), **I1)

    with pytest.raises(ConfigurationError, match="must be called by an agent workflow"):
        asyncio.run(call())
    assert shop.payments.attempts() == 0
    shop.close()


def test_resuming_against_a_ledger_without_the_operation_sends_nothing(tmp_path):
    """A Context resumed with another ledger: the model is told to stop, and nothing is sent."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = open_shop(tmp_path / "a", payment_faults=[Fault.LOSE_ACK])
    paused_agent = shop_agent(Script([[("capture", I1, "call-1")]]), first.capture)
    other = open_shop(tmp_path / "b")
    script = Script(["It needs attention."])
    agent = shop_agent(script, other.capture)

    async def story():
        handler = paused_agent.run(user_msg="Capture INV-1.")
        await until_paused(handler, 1)
        ctx = restore(agent, await keep(handler))
        resumed = agent.run(ctx=ctx)
        for pause in await paused_calls(ctx):
            resumed.ctx.send_event(resume_event(pause))
        return await resumed

    assert str(asyncio.run(story())) == "It needs attention."
    text = script.results()["call-1"]
    assert "OperationNotFoundError" in text
    assert "Do not call capture again" in text
    assert other.payments.attempts() == 0
    assert other.ledger.get("invoice:INV-1:capture") is None
    assert first.payments.attempts() == 1
    first.close()
    other.close()


def test_a_confirmed_sibling_is_not_sent_again_when_the_run_continues(tmp_path):
    """Capture confirmed, receipt paused: after a restore and confirm, each was sent once."""
    shop = open_shop(tmp_path, mail_faults=[Fault.LOSE_ACK])
    receipt = {"to": "ada@example.com", "invoice_id": "INV-1"}
    script = Script(
        [[("capture", I1, "call-1"), ("send_receipt", receipt, "call-2")], "Paid and receipted."]
    )
    agent = shop_agent(script, shop.capture, shop.send_receipt)

    async def story():
        handler = agent.run(user_msg="Capture INV-1 and send the receipt.")
        (paused,) = await until_paused(handler, 1)
        assert paused.tool == "send_receipt"
        text = await keep(handler)
        confirm_with_ledger(shop.ledger, "receipt:INV-1", shop.mail.effects()[0]["response"])
        ctx = restore(agent, text)
        resumed = agent.run(ctx=ctx)
        for pause in await paused_calls(ctx):
            resumed.ctx.send_event(resume_event(pause))
        return await resumed

    assert str(asyncio.run(story())) == "Paid and receipted."
    sent = script.results()
    assert json.loads(sent["call-1"]) == CAPTURED
    assert json.loads(sent["call-2"]) == shop.mail.effects()[0]["response"]
    assert len(script.seen) == 2
    assert shop.payments.attempts() == 1
    assert shop.mail.attempts() == 1
    assert shop.payments.committed() == 1
    assert shop.mail.committed() == 1
    shop.close()


def test_an_agent_workflow_shares_one_dispatch_between_identical_calls(tmp_path):
    """The same tool in a multi-agent AgentWorkflow: two identical calls, one capture."""
    shop = open_shop(tmp_path, kind="async")
    script = Script([[("capture", I1, "call-1"), ("capture", I1, "call-2")], "Paid."])
    workflow = AgentWorkflow(agents=[shop_agent(script, shop.capture)], root_agent="shop")

    async def story():
        return await workflow.run(user_msg="Capture INV-1.")

    assert str(asyncio.run(story())) == "Paid."
    sent = script.results()
    assert json.loads(sent["call-1"]) == json.loads(sent["call-2"]) == CAPTURED
    assert shop.payments.attempts() == 1
    assert shop.payments.committed() == 1
    shop.close()
