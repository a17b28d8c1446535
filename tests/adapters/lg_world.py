"""A LangGraph agent for the adapter's tests: a scripted chat model, payment and email effects.

Used by the tests in this folder and, for the restart test, by ``lg_child.py``
in a process of its own. Nothing here talks to a network or a real model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from effectguard import EffectExecutor, effect, open_ledger
from effectguard.adapters.langgraph import EffectToolNode
from effectguard.testkit import FakeEmailProvider, FakePaymentProvider, Fault, FaultPlan, Lookup

FINAL = "Payment done."
PAYMENT = "invoice:INV-1:capture"


class ToolCallingModel(GenericFakeChatModel):
    """A scripted chat model that accepts tools, as an agent's model must."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ToolCallingModel:  # noqa: ARG002 - the script holds the calls
        """The script already holds the tool calls; the tools change nothing."""
        return self


def calls(*calls: tuple[str, dict[str, Any], str]) -> AIMessage:
    """A model turn asking for the tool calls ``(name, args, id)``."""
    return AIMessage(
        content="",
        tool_calls=[{"name": n, "args": a, "id": i, "type": "tool_call"} for n, a, i in calls],
    )


def pay(call_id: str = "call_pay", invoice_id: str = "INV-1") -> tuple[str, dict[str, Any], str]:
    """A tool call of ``capture_payment``."""
    return ("capture_payment", {"invoice_id": invoice_id, "amount_cents": 1999}, call_id)


def mail(call_id: str = "call_mail") -> tuple[str, dict[str, Any], str]:
    """A tool call of ``send_receipt``."""
    return ("send_receipt", {"to": "ada@example.com"}, call_id)


@dataclass
class World:
    """Providers that count their commits, a ledger, the effects and a graph builder."""

    payments: FakePaymentProvider
    mailer: FakeEmailProvider
    executor: EffectExecutor
    capture_payment: Any
    send_receipt: Any
    is_async: bool

    def graph(
        self,
        turns: Sequence[AIMessage],
        checkpointer: Any,
        *,
        node: Callable[..., ToolNode] = EffectToolNode,
        tools: Sequence[Any] | None = None,
        **node_options: Any,
    ) -> Any:
        """An agent graph: the model's turns, then tools, until the model stops calling them."""
        model = ToolCallingModel(messages=iter([*turns, AIMessage(content=FINAL)]))

        def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
            return {"messages": [model.invoke(state["messages"])]}

        async def aagent(state: MessagesState) -> dict[str, list[BaseMessage]]:
            return {"messages": [await model.ainvoke(state["messages"])]}

        chosen = [self.capture_payment, self.send_receipt] if tools is None else tools
        builder = StateGraph(MessagesState)
        builder.add_node("agent", aagent if self.is_async else agent)
        builder.add_node("tools", node(chosen, **node_options))
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "agent")
        return builder.compile(checkpointer=checkpointer)


def make_world(
    workdir: Path,
    *,
    is_async: bool,
    payment_faults: Sequence[Fault] = (),
    lookup: Lookup = Lookup.NONE,
    late_commit_after: float = 5.0,
) -> World:
    """Payments without idempotency (a lost ack is QUARANTINED), email that always works.

    Providers and ledger are files under ``workdir``, so another process sees them.
    """
    payments = FakePaymentProvider(
        idempotency_guaranteed=False,
        lookup=lookup,
        faults=FaultPlan(list(payment_faults)),
        path=workdir / "payments.db",
        late_commit_after=late_commit_after,
    )
    mailer = FakeEmailProvider(path=workdir / "mail.db")
    executor = EffectExecutor(open_ledger(str(workdir / "ledger.db")), poll_interval=0.01)

    def find(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> Any:
        return payments.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)

    def capture(invoice_id: str, amount_cents: int, idempotency_key: str) -> dict[str, Any]:
        return payments.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)

    def send(to: str, idempotency_key: str) -> dict[str, Any]:
        message_id = FakeEmailProvider.message_id_for(idempotency_key)
        return mailer.send(to, "Your receipt", "Thank you.", message_id=message_id)

    contract = {"executor": executor}
    if is_async:

        @effect(operation_id="invoice:{invoice_id}:capture", probe=find, **contract)
        async def capture_payment(
            invoice_id: str, amount_cents: int, *, idempotency_key: str
        ) -> dict[str, Any]:
            """Capture a card payment for an invoice.

            Args:
                invoice_id: The invoice to charge, e.g. INV-1042.
                amount_cents: The amount to capture, in cents.
                idempotency_key: Supplied by effectguard.
            """
            return capture(invoice_id, amount_cents, idempotency_key)

        @effect(operation_id="receipt:{to}", **contract)
        async def send_receipt(to: str, *, idempotency_key: str) -> dict[str, Any]:
            """Email the customer their receipt.

            Args:
                to: The customer's email address.
                idempotency_key: Supplied by effectguard.
            """
            return send(to, idempotency_key)

    else:

        @effect(operation_id="invoice:{invoice_id}:capture", probe=find, **contract)
        def capture_payment(
            invoice_id: str, amount_cents: int, *, idempotency_key: str
        ) -> dict[str, Any]:
            """Capture a card payment for an invoice.

            Args:
                invoice_id: The invoice to charge, e.g. INV-1042.
                amount_cents: The amount to capture, in cents.
                idempotency_key: Supplied by effectguard.
            """
            return capture(invoice_id, amount_cents, idempotency_key)

        @effect(operation_id="receipt:{to}", **contract)
        def send_receipt(to: str, *, idempotency_key: str) -> dict[str, Any]:
            """Email the customer their receipt.

            Args:
                to: The customer's email address.
                idempotency_key: Supplied by effectguard.
            """
            return send(to, idempotency_key)

    return World(payments, mailer, executor, capture_payment, send_receipt, is_async)


def start_message() -> dict[str, list[BaseMessage]]:
    """The user's request that starts a run."""
    return {"messages": [HumanMessage("Charge invoice INV-1 and send the receipt.")]}


def tool_messages(state: dict[str, Any]) -> dict[str, ToolMessage]:
    """The run's tool messages by tool call id."""
    return {m.tool_call_id: m for m in state["messages"] if isinstance(m, ToolMessage)}
