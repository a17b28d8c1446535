"""A LlamaIndex agent refunds an order; the acknowledgement is lost; the workflow waits, not lies.

To use this with your own provider and model, change four things:

- ``RefundAPI.refund``: call your provider's refund endpoint and forward
  ``idempotency_key`` (Stripe: the ``Idempotency-Key`` header).
- ``refund_order``'s ``@effect`` options: keep ``idempotency_guaranteed=False``
  unless your provider documents that a resend with the same key never refunds
  twice; add ``probe=`` when it has a lookup you trust.
- ``scripted_llm``: your LLM (``OpenAI(model=...)`` from ``llama-index-llms-openai``).
- Keep the paused workflow's ``Context`` (``handler.ctx.to_dict(...)``, JSON)
  where your app keeps conversations; when the operator has acted, restore it,
  ``agent.run(ctx=ctx)`` and send ``resume_event`` for each of
  ``paused_calls(ctx)``: the tool re-reads the ledger and never sends again.

Run: ``python recipes/llama_index_refund.py`` (offline: LlamaIndex's
``MockFunctionCallingLLM`` playing a script, and a fake provider that counts
what it committed). It exits non-zero unless the provider holds exactly one refund.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llama_index.core import set_global_tokenizer
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock
from llama_index.core.llms import MockFunctionCallingLLM
from workflows import Context
from workflows.context.serializers import PickleSerializer

from effectguard import INJECTED, EffectExecutor, SQLiteEffectLedger, effect
from effectguard.adapters.llama_index import (
    EffectPaused,
    as_function_tool,
    paused_calls,
    resume_event,
)
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, Lookup

OPERATION = "order:ORD-7:refund"

# LlamaIndex's chat memory counts tokens with tiktoken, and restoring a pickled memory in a
# new process fetches tiktoken's encoding from the network unless a cache holds it. Counting
# words keeps the recipe offline; with a real model, point TIKTOKEN_CACHE_DIR at a cache.
set_global_tokenizer(str.split)


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


def scripted_llm(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
    """The model: ask for the refund; once the tool answered, say what it returned."""
    returned = [m for m in messages if m.role == MessageRole.TOOL]
    if not returned:
        call = ToolCallBlock(
            tool_call_id="call-1",
            tool_name="refund_order",
            tool_kwargs={"order_id": "ORD-7", "amount_cents": 2500},
        )
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[call])
    text = f"Refunded: {returned[-1].content}"
    return ChatMessage(role=MessageRole.ASSISTANT, blocks=[TextBlock(text=text)])


def open_agent(workdir: Path, api: RefundAPI) -> tuple[FunctionAgent, SQLiteEffectLedger]:
    """Everything a process needs, opened from the files in ``workdir``."""
    ledger = SQLiteEffectLedger(workdir / "ledger.db")
    tool = as_function_tool(refund_tool(api, EffectExecutor(ledger)))
    agent = FunctionAgent(
        name="shop",
        description="Refunds orders.",
        llm=MockFunctionCallingLLM(response_generator=scripted_llm),
        tools=[tool],
    )
    return agent, ledger


async def keep(handler: Any, workdir: Path) -> None:
    """Write the paused workflow's Context to ``workdir``, then stop this process's run."""
    data = handler.ctx.to_dict(serializer=PickleSerializer())
    (workdir / "context.json").write_text(json.dumps(data), encoding="utf-8")
    await handler.cancel_run()


async def start(workdir: Path, api: RefundAPI) -> bool:
    """Step 1: run until the refund is in doubt; keep the workflow; True if it paused."""
    agent, ledger = open_agent(workdir, api)
    handler = agent.run(user_msg="Please refund order ORD-7 (25.00).")
    async for event in handler.stream_events():
        if isinstance(event, EffectPaused):
            print(f"  the workflow waits on {event.operation_id}: {event.status}")
            print(f"  why: {event.payload['reason']}")
            print(f"  operator: {event.payload['operator_command']}")
            await keep(handler, workdir)
            ledger.close()
            return True
    print(f"FAIL: the run completed with {await handler!r}")
    ledger.close()
    return False


async def resume(workdir: Path, api: RefundAPI) -> str | None:
    """Step 2 or 4, with fresh handles: restore the workflow, resume its paused calls."""
    agent, ledger = open_agent(workdir, api)
    data = json.loads((workdir / "context.json").read_text(encoding="utf-8"))
    ctx = Context.from_dict(agent, data, serializer=PickleSerializer())
    handler = agent.run(ctx=ctx)
    for paused in await paused_calls(ctx):
        handler.ctx.send_event(resume_event(paused))
    async for event in handler.stream_events():
        if isinstance(event, EffectPaused):
            print(f"  still waiting: {event.operation_id} is {event.status}")
            await keep(handler, workdir)
            ledger.close()
            return None
    final = str(await handler)
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


async def main(workdir: Path) -> int:
    """Run the story; return the exit status."""
    # The provider commits the refund and loses its acknowledgement; it has no lookup
    # and no idempotency guarantee, so nobody but an operator can say it happened.
    faults = FaultPlan({1: Fault.LOSE_ACK})
    api = RefundAPI(
        idempotency_guaranteed=False, lookup=Lookup.NONE, faults=faults, path=workdir / "api.db"
    )
    print("1. The agent refunds ORD-7; the acknowledgement is lost.")
    if not await start(workdir, api):
        return 1
    print("2. Resuming before anyone checked: the ledger still says QUARANTINED.")
    if await resume(workdir, api) is not None:
        print("FAIL: a quarantined refund must not complete the run")
        return 1
    print("3. The operator checks the provider and confirms the refund.")
    operator_confirms(workdir, api)
    print("4. Resuming again (fresh handles, as after a restart).")
    final = await resume(workdir, api)
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
    with tempfile.TemporaryDirectory(prefix="effectguard-llama-index-") as directory:
        sys.exit(asyncio.run(main(Path(directory))))
