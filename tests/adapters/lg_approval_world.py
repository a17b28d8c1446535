"""A LangGraph agent whose refund tool needs a person's approval above 100.00.

Used by ``test_adapters_langgraph_approvals.py`` in process and, for the
cross-process test, by ``lg_approval_child.py``. The provider counts what it
committed on its own; nothing talks to a network or a real model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition
from lg_world import FINAL, ToolCallingModel, calls

from effectguard import EffectExecutor, EffectLedger, effect
from effectguard.adapters.langgraph import EffectToolNode
from effectguard.testkit import FakePaymentProvider

REFUND = "refund:INV-9"
LIMIT_CENTS = 10_000


@dataclass
class Refunds:
    """The provider that counts refunds, the executor, and the ``refund`` ``@effect`` tool."""

    provider: FakePaymentProvider
    executor: EffectExecutor
    refund: Any
    is_async: bool

    def graph(self, turns: Sequence[AIMessage], checkpointer: Any) -> Any:
        """An agent graph: the model's turns, then tools, until the model stops calling them."""
        model = ToolCallingModel(messages=iter([*turns, AIMessage(content=FINAL)]))

        def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
            return {"messages": [model.invoke(state["messages"])]}

        async def aagent(state: MessagesState) -> dict[str, list[BaseMessage]]:
            return {"messages": [await model.ainvoke(state["messages"])]}

        builder = StateGraph(MessagesState)
        builder.add_node("agent", aagent if self.is_async else agent)
        builder.add_node("tools", EffectToolNode([self.refund]))
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "agent")
        return builder.compile(checkpointer=checkpointer)


def make_refunds(
    ledger: EffectLedger, *, is_async: bool, provider_path: Path | None = None
) -> Refunds:
    """A refund tool over ``ledger``; refunds above the limit wait for an approval.

    ``note`` is redacted: a person sees it masked, the ledger never stores it.
    """
    provider = FakePaymentProvider(idempotency_guaranteed=False, path=provider_path)
    executor = EffectExecutor(ledger, poll_interval=0.01)
    settings: dict[str, Any] = {
        "name": "tests.lg.refund",
        "operation_id": "refund:{invoice_id}",
        "idempotency_key": "refund:{invoice_id}",
        "requires_approval": lambda a: a["amount_cents"] > LIMIT_CENTS,
        "redact": ["note"],
        "executor": executor,
    }

    def send(invoice_id: str, amount_cents: int, key: str) -> dict[str, Any]:
        return provider.capture(invoice_id, amount_cents, idempotency_key=key)

    if is_async:

        @effect(**settings)
        async def refund(
            invoice_id: str, amount_cents: int, note: str, *, idempotency_key: str
        ) -> dict[str, Any]:
            """Refund an invoice.

            Args:
                invoice_id: The invoice to refund.
                amount_cents: How much, in cents.
                note: A note for the customer.
                idempotency_key: Supplied by effectguard.
            """
            return send(invoice_id, amount_cents, idempotency_key)

    else:

        @effect(**settings)
        def refund(
            invoice_id: str, amount_cents: int, note: str, *, idempotency_key: str
        ) -> dict[str, Any]:
            """Refund an invoice.

            Args:
                invoice_id: The invoice to refund.
                amount_cents: How much, in cents.
                note: A note for the customer.
                idempotency_key: Supplied by effectguard.
            """
            return send(invoice_id, amount_cents, idempotency_key)

    return Refunds(provider, executor, refund, is_async)


def refund_call(
    call_id: str = "call_refund", amount_cents: int = 25_000
) -> tuple[str, dict[str, Any], str]:
    """A tool call of ``refund`` for INV-9."""
    arguments = {"invoice_id": "INV-9", "amount_cents": amount_cents, "note": "sorry, PIN 4417"}
    return ("refund", arguments, call_id)


def asked(call_id: str = "call_refund", amount_cents: int = 25_000) -> list[AIMessage]:
    """The model's script: one refund call."""
    return [calls(refund_call(call_id, amount_cents))]


def start_message() -> dict[str, list[BaseMessage]]:
    """The user's request that starts a run."""
    return {"messages": [HumanMessage("Refund invoice INV-9.")]}
