# Recipe: an OpenAI Agents SDK agent that emails an order confirmation at most once.
#
# Email has no idempotency: a message sent again is a second message. Left alone, the Agents
# SDK turns a tool failure into "An error occurred while running the tool. Please try
# again." and the model does. Here the tool is an @effect function offered through
# effectguard.adapters.openai_agents.as_function_tool: when the provider's acknowledgement is
# lost, the run ends (tool_use_behavior=stop_on_unconfirmed) before the model reads anything,
# pending_effects(result) names the operation, an operator confirms it in the ledger once
# they have found the message, and settle_input(...) puts the confirmed output into the run's
# input so Runner.run(agent, items) carries on. Nothing is sent twice.
#
# To use it with your provider and model, change:
#   - send_order_confirmation's body: your email API, with idempotency_key as the Message-ID
#     (so a lookup of the sent log can find it: pass probe=... to @effect and most lost
#     acknowledgements settle themselves);
#   - the model: your own (this recipe scripts one so that it runs offline, without a key);
#   - the ledger: effectguard.configure(ledger=...), a SQLite path or a postgresql:// URL;
#   - keep the paused run's items (result.to_input_list()) wherever your app keeps
#     conversations: settle_input needs them, possibly in another process.
"""An Agents SDK run that pauses on an unconfirmed email and resumes without resending."""

from __future__ import annotations

import asyncio
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

from agents import Agent, RunConfig, Runner
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

import effectguard
from effectguard import INJECTED, EffectLedger, effect
from effectguard.adapters.openai_agents import (
    as_function_tool,
    pending_effects,
    settle_input,
    stop_on_unconfirmed,
)
from effectguard.testkit import FakeEmailProvider, Fault, FaultPlan, Lookup

#: A stand-in for your email API: it delivers every send it accepts and, here, loses the
#: acknowledgement of the first one; it has no lookup the library could use.
mail = FakeEmailProvider(lookup=Lookup.NONE, faults=FaultPlan([Fault.LOSE_ACK]))


@effect(operation_id="order:{order_id}:confirmation-email")
def send_order_confirmation(
    order_id: str, to: str, *, idempotency_key: str = INJECTED
) -> dict[str, Any]:
    """Email the customer the confirmation of an order.

    Args:
        order_id: The order to confirm, e.g. A-1001.
        to: The customer's email address.
        idempotency_key: Supplied by effectguard (used as the Message-ID); never by the model.
    """
    message_id = FakeEmailProvider.message_id_for(idempotency_key)
    return mail.send(to, f"Order {order_id} confirmed", "Thank you!", message_id=message_id)


def answer(call: ModelCall) -> list[Any]:
    """The scripted model's last turn: it reports the tool output it was given."""
    outputs = [
        i for i in call.input if isinstance(i, dict) and i.get("type") == "function_call_output"
    ]
    return [assistant_message(f"Done: {outputs[-1]['output']}")]


async def main(ledger: EffectLedger) -> int:
    """Run, pause, resolve as an operator, settle and resume; exit 0 only on exactly one email."""
    model = ScriptedModel(
        [
            [
                function_call(
                    "send_order_confirmation",
                    {"order_id": "A-1001", "to": "ada@example.com"},
                    call_id="call-1",
                )
            ],
            ModelStep(responder=answer),
        ]
    )
    tool = as_function_tool(send_order_confirmation)
    agent = Agent(name="shop", model=model, tools=[tool], tool_use_behavior=stop_on_unconfirmed)
    offline = RunConfig(tracing_disabled=True)

    paused = await Runner.run(agent, "Confirm order A-1001 to ada@example.com.", run_config=offline)
    (pending,) = pending_effects(paused)
    print(f"1. {paused.final_output}")
    items = paused.to_input_list()

    _, waiting = settle_input(items, [tool])
    sent = mail.attempts()
    print(f"2. settled before the operator acted: {len(waiting)} waiting, {sent} request(s) sent")

    message_id = FakeEmailProvider.message_id_for(pending.operation_id)
    found = mail.find_message(message_id)
    if found is None:
        print("the sent log shows no such message: authorize a retry instead", file=sys.stderr)
        return 1
    ledger.confirm(
        pending.operation_id,
        output=found,
        provider_operation_id=found["id"],
        actor="oncall@example.com",
        reason="the message is in the provider's sent log",
        evidence_reference=f"sent-log:{message_id}",
    )
    print(f"3. operator confirmed {pending.operation_id} (found {message_id} in the sent log)")

    items, waiting = settle_input(items, [tool])
    resumed = await Runner.run(agent, items, run_config=offline)
    print(f"4. resumed: {resumed.final_output}")
    sent = mail.committed()
    print(f"the provider sent {sent} message(s)")
    return 0 if sent == 1 and not waiting else 1


if __name__ == "__main__":
    # effectguard installs no log handler; this one prints each event it logs as one short line.
    logging.basicConfig(level=logging.WARNING, format="  log: %(levelname)s %(message).100s")
    logging.getLogger("effectguard").setLevel(logging.INFO)
    with tempfile.TemporaryDirectory() as directory:
        configured = effectguard.configure(ledger=str(Path(directory) / "ledger.db"))
        sys.exit(asyncio.run(main(configured.executor.ledger)))
