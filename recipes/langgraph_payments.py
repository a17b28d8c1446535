"""A LangGraph agent pays an invoice, the acknowledgement is lost, and the graph pauses.

Needs ``pip install 'effectguard[langgraph]'``. Offline: a scripted chat model
stands in for your LLM and a fake provider for your payment API.

What happens: the model asks for ``capture_payment``; the provider commits the
capture but the acknowledgement is lost, and it has no lookup, so the
operation is QUARANTINED and the graph pauses (LangGraph's ``interrupt``) with
a payload naming the operation and the ``agent-effect-ops`` command that
resolves it. Resuming before anyone acts pauses again and sends nothing. An
operator checks the provider and confirms; the next resume reads the ledger,
hands the model the confirmed capture, and the run ends. The provider holds
exactly one payment; the script exits non-zero otherwise.

To use it with your own stack, change three things:

- ``capture_payment``: call your payment API, forwarding ``idempotency_key``;
  give ``probe=`` a lookup if your provider has one (then most lost
  acknowledgements settle themselves, with no operator).
- ``ScriptedModel``: your chat model (``ChatOpenAI(...)``, ``ChatAnthropic(...)``).
- The checkpointer: keep LangGraph's checkpoints where they survive a restart
  (``SqliteSaver`` on a local disk, or ``PostgresSaver``); effectguard refuses a
  graph without one, since a pause that cannot resume is useless.

Run: ``python recipes/langgraph_payments.py``.
"""

from __future__ import annotations

import logging
import sqlite3
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

from effectguard import INJECTED, EffectExecutor, SQLiteEffectLedger, effect
from effectguard.adapters.langgraph import EffectToolNode, pending_effects, resume_command
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, Lookup

OPERATION = "invoice:INV-1042:capture"
CONFIG: Any = {"configurable": {"thread_id": "pay-INV-1042"}}


class ScriptedModel(GenericFakeChatModel):
    """Plays fixed turns: first the tool call, then the final answer."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:  # noqa: ARG002 - the script holds the calls
        """Accept the tools; the script already says which to call."""
        return self


def build(workdir: Path, provider: FakePaymentProvider, connection: sqlite3.Connection) -> Any:
    """The agent graph: the model, then effect tools, until the model stops calling tools."""
    executor = EffectExecutor(SQLiteEffectLedger(workdir / "ledger.db"))

    @effect(operation_id="invoice:{invoice_id}:capture", executor=executor)
    def capture_payment(
        invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
    ) -> dict[str, Any]:
        """Capture a card payment for an invoice.

        Args:
            invoice_id: The invoice to charge, e.g. INV-1042.
            amount_cents: The amount to capture, in cents.
            idempotency_key: Supplied by effectguard; never shown to the model.
        """
        return provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)

    call = {"name": "capture_payment", "args": {"invoice_id": "INV-1042", "amount_cents": 1999}}
    model = ScriptedModel(
        messages=iter(
            [
                AIMessage(content="", tool_calls=[{**call, "id": "call_1", "type": "tool_call"}]),
                AIMessage(content="Invoice INV-1042 is paid."),
            ]
        )
    )

    def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", EffectToolNode([capture_payment]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=SqliteSaver(connection))


def operator_confirms(workdir: Path, provider: FakePaymentProvider) -> None:
    """What an operator does with ``agent-effect-ops ... confirm``, here through the ledger API."""
    capture = provider.find_capture(OPERATION)
    if capture is None:
        sys.exit("the provider has no capture to confirm")
    SQLiteEffectLedger(workdir / "ledger.db").confirm(
        OPERATION,
        output=capture,
        provider_operation_id=str(capture["id"]),
        actor="ops@example.com",
        reason="capture seen in the provider's dashboard",
        evidence_reference=f"dashboard:{capture['id']}",
    )
    print(f"operator: confirmed {OPERATION} as {capture['id']}")


def main(workdir: Path) -> int:
    """Run the story in ``workdir``; 0 when the run ends with exactly one payment."""
    provider = FakePaymentProvider(
        idempotency_guaranteed=False, lookup=Lookup.NONE, faults=FaultPlan([Fault.LOSE_ACK])
    )
    with sqlite3.connect(workdir / "checkpoints.db", check_same_thread=False) as connection:
        graph = build(workdir, provider, connection)
        graph.invoke({"messages": [HumanMessage("Please pay invoice INV-1042.")]}, CONFIG)
        for pending in pending_effects(graph, CONFIG):
            print(f"paused: {pending.message()}")
        graph.invoke(resume_command(graph, CONFIG), CONFIG)
        print(f"resumed early: still paused on {len(pending_effects(graph, CONFIG))} effect(s)")
        operator_confirms(workdir, provider)
        state = graph.invoke(resume_command(graph, CONFIG), CONFIG)
    answer = state["messages"][-1].content
    print(f"resumed: {answer!r}; payments the provider holds: {provider.committed()}")
    return 0 if provider.committed() == 1 and answer == "Invoice INV-1042 is paid." else 1


if __name__ == "__main__":
    # effectguard installs no log handler; this one prints each event it logs as one short line.
    logging.basicConfig(level=logging.WARNING, format="  log: %(levelname)s %(message).100s")
    logging.getLogger("effectguard").setLevel(logging.INFO)
    with tempfile.TemporaryDirectory() as scratch:
        sys.exit(main(Path(scratch)))
