"""settle_input resumes a call with the arguments the tool body received, not the raw JSON.

The SDK validates a call's JSON with the tool's pydantic model before the body
runs (lax mode: ``20`` for a ``float`` becomes ``20.0``), and the operation's
fingerprint is taken from those values. A resume from the raw JSON would be a
different request: a conflict, told to the model as "not carried out".
"""

from __future__ import annotations

import asyncio
import json

import pytest
from effect_shop import confirm_with_ledger, open_shop
from extras_support import import_extra

from effectguard import INJECTED, effect
from effectguard._decorator import executor_of
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, Lookup

agents = import_extra("agents", "openai-agents")

from agents import Runner  # noqa: E402 - after the extra's check
from openai_agents_support import OFFLINE, ScriptModel, say, shop_agent, tool_call  # noqa: E402 - imports agents

from effectguard.adapters.openai_agents import asettle_input, settle_input  # noqa: E402 - after the check

CHARGED = {"id": "cap_000001", "status": "succeeded", "invoice_id": "INV-7", "amount_cents": 2000}


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_settle_after_confirm_replays_a_call_whose_arguments_the_sdk_coerced(tmp_path, kind):
    """A float sent as 20: settling after the operator confirms replays it and sends nothing."""
    shop = open_shop(tmp_path)
    payments = FakePaymentProvider(
        idempotency_guaranteed=False,
        lookup=Lookup.NONE,
        faults=FaultPlan([Fault.LOSE_ACK]),
        path=tmp_path / "charges.db",
    )

    @effect(operation_id="invoice:{invoice_id}:charge", executor=executor_of(shop.capture))
    def charge(invoice_id: str, amount: float, *, idempotency_key: str = INJECTED) -> dict:
        """Charge an invoice.

        Args:
            invoice_id: The invoice to charge.
            amount: The amount, in euros.
            idempotency_key: Supplied by the executor.
        """
        return payments.capture(invoice_id, round(amount * 100), idempotency_key=idempotency_key)

    model = ScriptModel(
        [[tool_call("charge", {"invoice_id": "INV-7", "amount": 20}, "call-1")], [say("Done.")]]
    )
    # Without the gate: the SDK itself interrupts a gated call whose arguments it coerced.
    agent = shop_agent(model, charge, gate=False)
    paused = asyncio.run(Runner.run(agent, "Charge INV-7 20 EUR.", run_config=OFFLINE))
    assert paused.final_output.startswith("Paused")
    assert payments.committed() == 1
    confirm_with_ledger(shop.ledger, "invoice:INV-7:charge", CHARGED)
    items = paused.to_input_list()
    if kind == "sync":
        settled, waiting = settle_input(items, [charge])
    else:
        settled, waiting = asyncio.run(asettle_input(items, [charge]))
    assert waiting == []
    (output,) = [item["output"] for item in settled if item.get("type") == "function_call_output"]
    # The operator's confirmation reaches the model; it is never told "not carried out".
    assert "not carried out" not in output, output
    assert json.loads(output) == CHARGED
    assert payments.committed() == 1
    assert payments.attempts() == 1
    shop.close()
