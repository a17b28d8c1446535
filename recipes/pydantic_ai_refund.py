"""A Pydantic AI agent refunds an order; the acknowledgement is lost; the run pauses, not lies.

To use this with your own provider and model, change four things:

- ``RefundAPI.refund``: call your provider's refund endpoint and forward
  ``idempotency_key`` (Stripe: the ``Idempotency-Key`` header).
- ``refund_order``'s ``@effect`` options: keep ``idempotency_guaranteed=False``
  unless your provider documents that a resend with the same key never refunds
  twice; add ``probe=`` when it has a lookup you trust.
- ``scripted_model``: your model (``Agent("openai:gpt-5", ...)``); keep
  ``output_type=[str, DeferredToolRequests]`` so a paused run can end paused.
- Persist ``result.all_messages()`` and the ``DeferredToolRequests`` (both are
  JSON) where your app keeps conversations, and settle them when the operator
  has acted: ``settle_deferred`` re-reads the ledger and never sends again.

Run: ``python recipes/pydantic_ai_refund.py`` (offline: a scripted model and a
fake provider that counts what it committed). It exits non-zero unless the
provider holds exactly one refund.
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai import Agent, DeferredToolRequests, ModelMessagesTypeAdapter, models
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from effectguard import INJECTED, EffectExecutor, SQLiteEffectLedger, effect
from effectguard.adapters.pydantic_ai import as_tool, settle_deferred
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, Lookup

OPERATION = "order:ORD-7:refund"
REQUESTS = TypeAdapter(DeferredToolRequests)

# Offline: a request to a real model API fails instead of being sent.
models.ALLOW_MODEL_REQUESTS = False


class RefundAPI(FakePaymentProvider):
    """Stands in for your provider's refund endpoint: a fake that counts what it committed."""

    def refund(self, order_id: str, amount_cents: int, *, idempotency_key: str) -> dict[str, Any]:
        """Refund ``amount_cents`` of ``order_id``; returns the refund when acknowledged."""
        body = {"order_id": order_id, "amount_cents": amount_cents}

        def response(seq: int) -> dict[str, Any]:
            return {"id": f"re_{seq:06d}", "status": "succeeded", **body}

        return self._submit(
            idempotency_key, idempotency_key, body, deduplicate=False, make_response=response
        )


def refund_tool(api: RefundAPI, executor: EffectExecutor) -> Any:
    """The ``@effect`` tool the agent is given, on ``api`` and ``executor``."""

    @effect(
        operation_id="order:{order_id}:refund",
        idempotency_key="refund:{order_id}",
        name="shop.refund_order",
        executor=executor,
    )
    def refund_order(
        order_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
    ) -> dict[str, Any]:
        """Refund a customer's order.

        Args:
            order_id: The order to refund, for example "ORD-7".
            amount_cents: How much to refund, in cents.
            idempotency_key: Supplied by the executor (never shown to the model).
        """
        return api.refund(order_id, amount_cents, idempotency_key=idempotency_key)

    return refund_order


def scripted_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The model: ask for the refund; once the tool answered, say what it returned."""
    del info
    returned = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
    if not returned:
        call = ToolCallPart("refund_order", {"order_id": "ORD-7", "amount_cents": 2500}, "call-1")
        return ModelResponse(parts=[call])
    return ModelResponse(parts=[TextPart(f"Refunded: {returned[0].content}")])


def open_agent(workdir: Path, api: RefundAPI) -> tuple[Any, Agent[None, Any], SQLiteEffectLedger]:
    """Everything a process needs, opened from the files in ``workdir``."""
    ledger = SQLiteEffectLedger(workdir / "ledger.db")
    tool = refund_tool(api, EffectExecutor(ledger))
    agent = Agent(
        FunctionModel(scripted_model),
        tools=[as_tool(tool)],
        output_type=[str, DeferredToolRequests],
    )
    return tool, agent, ledger


def start(workdir: Path, api: RefundAPI) -> bool:
    """Step 1: run until the refund is in doubt; keep the conversation; True if it paused."""
    _, agent, ledger = open_agent(workdir, api)
    result = agent.run_sync("Please refund order ORD-7 (25.00).")
    ledger.close()
    if not isinstance(result.output, DeferredToolRequests):
        print(f"FAIL: the run completed with {result.output!r}")
        return False
    payload = result.output.metadata["call-1"]
    print(f"  the run paused on {payload['operation_id']}: {payload['status']}")
    print(f"  why: {payload['reason']}")
    print(f"  operator: {payload['operator_command']}")
    (workdir / "history.json").write_bytes(
        ModelMessagesTypeAdapter.dump_json(result.all_messages())
    )
    (workdir / "requests.json").write_bytes(REQUESTS.dump_json(result.output))
    return True


def resume(workdir: Path, api: RefundAPI) -> str | None:
    """Step 2 or 4, in a fresh process's handles: settle against the ledger, resume if settled."""
    tool, agent, ledger = open_agent(workdir, api)
    requests = REQUESTS.validate_json((workdir / "requests.json").read_bytes())
    results, waiting = settle_deferred(requests, [tool])
    final = None
    if waiting:
        still = ", ".join(f"{w.operation_id} is {w.status.value}" for w in waiting)
        print(f"  still waiting: {still} (the reason and the command are as above)")
    else:
        history = ModelMessagesTypeAdapter.validate_json((workdir / "history.json").read_bytes())
        done = agent.run_sync(message_history=history, deferred_tool_results=results)
        final = str(done.output)
        print(f"  the run completed: {final}")
    ledger.close()
    return final


def operator_confirms(workdir: Path, api: RefundAPI) -> None:
    """Step 3: the operator finds the refund at the provider and confirms it in the ledger."""
    found = api.find_capture("refund:ORD-7")
    if found is None:
        print("  the provider has no such refund: the operator would `reject` instead")
        return
    print(f"  the provider shows {json.dumps(found)}")
    ledger = SQLiteEffectLedger(workdir / "ledger.db")
    ledger.confirm(
        OPERATION,
        output=found,
        provider_operation_id=found["id"],
        actor="ops@example.com",
        reason="refund found in the provider's dashboard",
        evidence_reference="DASH-7",
    )
    ledger.close()


def main(workdir: Path) -> int:
    """Run the story; return the exit status."""
    # The provider commits the refund and loses its acknowledgement; it has no lookup
    # and no idempotency guarantee, so nobody but an operator can say it happened.
    faults = FaultPlan({1: Fault.LOSE_ACK})
    api = RefundAPI(
        idempotency_guaranteed=False, lookup=Lookup.NONE, faults=faults, path=workdir / "api.db"
    )
    print("1. The agent refunds ORD-7; the acknowledgement is lost.")
    if not start(workdir, api):
        return 1
    print("2. Resuming before anyone checked: the ledger still says QUARANTINED.")
    if resume(workdir, api) is not None:
        print("FAIL: a quarantined refund must not complete the run")
        return 1
    print("3. The operator checks the provider and confirms the refund.")
    operator_confirms(workdir, api)
    print("4. Resuming again (fresh handles, as after a restart).")
    final = resume(workdir, api)
    committed = api.committed()
    print(f"5. The provider holds {committed} refund(s).")
    if final is None or committed != 1:
        print("FAIL: expected a completed run and exactly one refund")
        return 1
    print("OK: one refund, and the run completed only once it was confirmed.")
    return 0


if __name__ == "__main__":
    # effectguard installs no log handler; this one prints each event it logs as one short line.
    logging.basicConfig(level=logging.WARNING, format="  log: %(levelname)s %(message).100s")
    logging.getLogger("effectguard").setLevel(logging.INFO)
    with tempfile.TemporaryDirectory(prefix="effectguard-pydantic-ai-") as directory:
        sys.exit(main(Path(directory)))
