"""Pause and resume with Pydantic AI's deferred tools: never a second dispatch (provider-counted).

A capture whose acknowledgement is lost, with a provider that has no lookup
and no idempotency guarantee, is QUARANTINED: the run must pause, wait for an
operator, and resume with the confirmed capture without sending it again.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai_support import (
    FLAVOURS,
    ScriptedModel,
    agent,
    capture,
    capture_tool,
    receipt,
    receipt_tool,
    run,
)

from effectguard import ConfigurationError, EffectExecutor, EffectStatus, SQLiteEffectLedger
from effectguard.adapters import PENDING_KIND
from effectguard.adapters.pydantic_ai import as_tool, asettle_deferred, settle_deferred
from effectguard.testkit import FakeEmailProvider, FakePaymentProvider, Fault, FaultPlan, Lookup

CHILD = Path(__file__).with_name("pydantic_ai_child.py")
OPERATION = "invoice:INV-1:capture"


@pytest.fixture
def executor(tmp_path: Path) -> EffectExecutor:
    """An executor on a fresh SQLite ledger."""
    return EffectExecutor(SQLiteEffectLedger(tmp_path / "ledger.db"))


def lossy_provider(**options: Any) -> FakePaymentProvider:
    """A provider that commits the first capture and loses its acknowledgement; no lookup."""
    settings: dict[str, Any] = {
        "idempotency_guaranteed": False,
        "lookup": Lookup.NONE,
        "faults": FaultPlan({1: Fault.LOSE_ACK}),
    }
    settings.update(options)
    return FakePaymentProvider(**settings)


def settle(flavour: str, requests: Any, tools: Any) -> Any:
    """``settle_deferred`` for sync tools, ``asettle_deferred`` in an event loop for async ones."""
    if flavour == "async":
        return asyncio.run(asettle_deferred(requests, tools))
    return settle_deferred(requests, tools)


def confirm_as_the_operator(executor: EffectExecutor, provider: FakePaymentProvider) -> Any:
    """The operator finds the capture at the provider and confirms it in the ledger."""
    found = provider.find_capture("capture:INV-1")
    assert found is not None
    executor.ledger.confirm(
        OPERATION,
        output=found,
        provider_operation_id=found["id"],
        actor="ops@example.com",
        reason="seen in the provider's dashboard",
        evidence_reference="DASH-1",
    )
    return found


def pause(flavour: str, executor: EffectExecutor, provider: FakePaymentProvider) -> Any:
    """Run the agent on one capture of INV-1 until it pauses; return the tool, script, run."""
    tool = as_tool(capture_tool(provider, executor, flavour))
    script = ScriptedModel([capture("INV-1", "call-1")])
    paused = run(flavour, agent(script, [tool]), user_prompt="charge INV-1")
    return tool, script, paused


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_lost_acknowledgement_pauses_the_run_with_the_pending_payload(executor, flavour):
    """The run ends with DeferredToolRequests naming the QUARANTINED operation; one commit."""
    provider = lossy_provider()
    _, script, paused = pause(flavour, executor, provider)

    requests = paused.output
    assert [call.tool_call_id for call in requests.calls] == ["call-1"]
    payload = requests.metadata["call-1"]
    assert payload["kind"] == PENDING_KIND
    assert payload["tool"] == "capture_payment"
    assert payload["tool_call_id"] == "call-1"
    assert payload["operation_id"] == OPERATION
    assert payload["status"] == "QUARANTINED"
    assert payload["attempts"] == 1
    assert "timed out" in payload["reason"]
    assert f"confirm {OPERATION}" in payload["operator_command"]
    assert str(executor.ledger.path.resolve()) in payload["operator_command"]
    assert payload["arguments"] == {"invoice_id": "INV-1", "amount_cents": 1999}
    assert script.seen == []  # the model was never told the payment went through
    assert provider.committed() == 1


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_resuming_before_the_operator_acts_stays_paused_and_sends_nothing(executor, flavour):
    """Settling finds it still QUARANTINED; re-running the tools defers again; nothing is sent."""
    provider = lossy_provider()
    tool, script, paused = pause(flavour, executor, provider)

    results, waiting = settle(flavour, paused.output, [tool])
    again = run(flavour, agent(script, [tool]), message_history=paused.all_messages())

    assert results.calls == {}
    assert [(w.operation_id, w.status) for w in waiting] == [(OPERATION, EffectStatus.QUARANTINED)]
    assert again.output.metadata["call-1"]["status"] == "QUARANTINED"
    assert script.seen == []
    assert provider.attempts() == 1
    assert provider.committed() == 1
    assert executor.ledger.get(OPERATION).status is EffectStatus.QUARANTINED


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_operators_confirmation_resumes_the_run_with_one_commit(tmp_path, executor, flavour):
    """agent-effect-ops confirm, as the payload says; settle and resume: the confirmed output."""
    provider = lossy_provider()
    tool, script, paused = pause(flavour, executor, provider)
    found = provider.find_capture("capture:INV-1")
    command = paused.output.metadata["call-1"]["operator_command"].split()
    values = {
        "JSON": json.dumps(found),
        "ID": found["id"],
        "NAME": "ops@example.com",
        "TEXT": "seen in the dashboard",
        "REF": "DASH-1",
    }
    ops = Path(sys.executable).with_name(command[0])
    argv = [str(ops), *[values.get(a, a) for a in command[1:]]]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr

    results, waiting = settle(flavour, paused.output, {"capture_payment": tool})
    resumed = run(
        flavour,
        agent(script, [tool]),
        message_history=paused.all_messages(),
        deferred_tool_results=results,
    )

    assert waiting == []
    assert results.calls == {"call-1": found}
    assert resumed.output == "done: call-1=success"
    assert script.seen == [("call-1", found, "success")]
    assert provider.committed() == 1
    assert provider.attempts() == 1


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_an_unknown_outcome_is_probed_again_on_settling(executor, flavour):
    """A kept OUTCOME_UNKNOWN is probed again: found committed, no operator, no resend."""
    provider = lossy_provider(lookup=Lookup.EVENTUAL, visible_after_reads=1)
    tool = as_tool(capture_tool(provider, executor, flavour, unknown_outcome="keep_unknown"))
    script = ScriptedModel([capture("INV-1", "call-1")])
    paused = run(flavour, agent(script, [tool]), user_prompt="charge INV-1")
    assert paused.output.metadata["call-1"]["status"] == "OUTCOME_UNKNOWN"

    results, waiting = settle(flavour, paused.output, [tool])

    assert waiting == []
    assert results.calls["call-1"]["invoice_id"] == "INV-1"
    assert executor.ledger.get(OPERATION).status is EffectStatus.CONFIRMED
    assert provider.committed() == 1
    assert provider.attempts() == 1


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_sibling_effect_already_confirmed_is_not_sent_again_on_resume(executor, flavour):
    """Capture and receipt in one turn: the receipt went out once, and stays once after resume."""
    provider = lossy_provider()
    mail = FakeEmailProvider()
    pay = as_tool(capture_tool(provider, executor, flavour))
    send = as_tool(receipt_tool(mail, executor, flavour))
    script = ScriptedModel([capture("INV-1", "call-1"), receipt("INV-1", "call-2")])
    paused = run(flavour, agent(script, [pay, send]), user_prompt="charge INV-1, mail a receipt")
    assert [call.tool_call_id for call in paused.output.calls] == ["call-1"]
    assert mail.committed() == 1

    # Re-running the paused tools before the operator acts: the receipt is not sent again.
    run(flavour, agent(script, [pay, send]), message_history=paused.all_messages())
    confirm_as_the_operator(executor, provider)
    results, waiting = settle(flavour, paused.output, [pay, send])
    resumed = run(
        flavour,
        agent(script, [pay, send]),
        message_history=paused.all_messages(),
        deferred_tool_results=results,
    )

    assert waiting == []
    assert resumed.output.startswith("done: ")
    assert mail.committed() == 1
    assert mail.attempts() == 1
    assert provider.committed() == 1
    assert provider.attempts() == 1


def test_settling_an_async_tool_inside_an_event_loop_says_to_await_the_async_form(executor):
    """settle_deferred cannot drive an async tool from a running loop: a clear error, no send."""
    provider = lossy_provider()
    tool, _, paused = pause("async", executor, provider)

    async def inside_a_loop() -> None:
        with pytest.raises(ConfigurationError, match="asettle_deferred"):
            settle_deferred(paused.output, [tool])

    asyncio.run(inside_a_loop())
    assert provider.attempts() == 1


def child(command: str, workdir: Path, flavour: str) -> dict[str, Any]:
    """Run one side of the restart test in a new process; return its report."""
    done = subprocess.run(
        [sys.executable, str(CHILD), command, str(workdir), flavour],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


@pytest.mark.slow
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_paused_run_resumes_in_a_new_process_with_one_commit(tmp_path, flavour):
    """Paused in one process, confirmed, resumed in another from the kept history: one commit."""
    started = child("start", tmp_path, flavour)
    [waiting] = child("resume", tmp_path, flavour)["waiting"]
    # The operation id comes from the call scope (conversation id, tool call id): the same
    # in the new process, which resumed the conversation from its kept message history.
    assert waiting["operation_id"] == f"capture:{started['conversation_id']}:call-1"
    assert waiting["status"] == "QUARANTINED"
    provider = FakePaymentProvider(path=tmp_path / "provider.db")
    found = provider.find_capture("capture:INV-42")
    assert found is not None
    SQLiteEffectLedger(tmp_path / "ledger.db").confirm(
        waiting["operation_id"],
        output=found,
        provider_operation_id=found["id"],
        actor="ops@example.com",
        reason="seen in the dashboard",
        evidence_reference="DASH-2",
    )

    report = child("resume", tmp_path, flavour)

    assert report == {"output": "done: call-1=success", "seen": [found]}
    assert provider.committed() == 1
    assert provider.attempts() == 1


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_pause_and_resume_behave_alike_on_every_ledger_backend(ledger, flavour):
    """SQLite and PostgreSQL: paused, still paused before the operator, one commit after."""
    executor = EffectExecutor(ledger)
    provider = lossy_provider()
    tool, script, paused = pause(flavour, executor, provider)
    command = paused.output.metadata["call-1"]["operator_command"]
    expected_db = "LEDGER_URL" if not isinstance(ledger, SQLiteEffectLedger) else str(ledger.path)
    assert f"--db {expected_db} confirm {OPERATION}" in command
    assert settle(flavour, paused.output, [tool])[0].calls == {}

    found = confirm_as_the_operator(executor, provider)
    results, waiting = settle(flavour, paused.output, [tool])
    resumed = run(
        flavour,
        agent(script, [tool]),
        message_history=paused.all_messages(),
        deferred_tool_results=results,
    )

    assert waiting == []
    assert resumed.output == "done: call-1=success"
    assert script.seen == [("call-1", found, "success")]
    assert provider.committed() == 1
    assert provider.attempts() == 1


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_settling_uses_the_arguments_as_validated_not_as_the_model_wrote_them(executor, flavour):
    """The model wrote "1999" for an int: the resumed call is the same request, not a conflict."""
    provider = lossy_provider()
    tool = as_tool(capture_tool(provider, executor, flavour))
    script = ScriptedModel([capture("INV-1", "call-1", amount_cents="1999")])
    paused = run(flavour, agent(script, [tool]), user_prompt="charge INV-1")
    found = confirm_as_the_operator(executor, provider)

    results, waiting = settle(flavour, paused.output, [tool])

    assert waiting == []
    assert results.calls == {"call-1": found}
    assert provider.committed() == 1
