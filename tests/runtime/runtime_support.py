"""Tools, models and builders shared by the runtime tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from effectguard import INJECTED, EffectExecutor, OutcomeProbeResult, effect
from effectguard.runtime import (
    AgentRuntime,
    Message,
    ModelTurn,
    ScriptedModel,
    ToolCall,
    ToolDefinition,
)
from effectguard.testkit import FakePaymentProvider

RUN = "run-1"
OPERATION = "invoice:INV-1042:capture"
ARGUMENTS = {"invoice_id": "INV-1042", "amount_cents": 1999}
CAPTURE = ToolCall("call-1", "capture_payment", ARGUMENTS)


class Payments:
    """Payment tools on one provider, written as methods (the probe is a method too)."""

    def __init__(self, provider: FakePaymentProvider) -> None:
        self.provider = provider

    def find_capture(
        self, invoice_id: str, amount_cents: int, *, idempotency_key: str
    ) -> OutcomeProbeResult:
        """Look the capture up by its key."""
        del amount_cents  # the key identifies the request
        return self.provider.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)

    @effect(
        operation_id="invoice:{invoice_id}:capture",
        idempotency_key="capture:{invoice_id}",
        idempotency_guaranteed=True,
        probe=find_capture,
        name="tests.capture",
    )
    def capture_payment(
        self, invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
    ) -> dict[str, Any]:
        """Capture the payment of an invoice.

        Args:
            invoice_id: The invoice to charge.
            amount_cents: The amount, in cents.
            idempotency_key: Supplied by the executor.
        """
        return self.provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)

    def lookup_invoice(self, invoice_id: str) -> dict[str, Any]:
        """Read an invoice (a plain, read-only method; not discovered)."""
        return {"invoice_id": invoice_id, "amount_cents": 1999}


def capture_tool(provider: FakePaymentProvider, *, probe: bool = True, **options: Any) -> Any:
    """Return a decorated ``capture_payment`` function on ``provider``."""

    def find_capture(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> Any:
        return provider.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)

    settings: dict[str, Any] = {
        "operation_id": "invoice:{invoice_id}:capture",
        "idempotency_key": "capture:{invoice_id}",
        "idempotency_guaranteed": True,
        "probe": find_capture if probe else None,
        "name": "tests.capture",
    }
    settings.update(options)

    @effect(**settings)
    def capture_payment(
        invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
    ) -> dict[str, Any]:
        """Capture the payment of an invoice.

        Args:
            invoice_id: The invoice to charge.
            amount_cents: The amount, in cents.
            idempotency_key: Supplied by the executor.
        """
        return provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)

    return capture_payment


def script(*turns: Any) -> ScriptedModel:
    """A scripted model; by default it captures and then says "payment done"."""
    return ScriptedModel(list(turns) or [CAPTURE, "payment done"])


def runtime(model: Any, tools: Any, executor: EffectExecutor, **options: Any) -> AgentRuntime:
    """An AgentRuntime with in-memory checkpoints, trace and audit unless told otherwise."""
    return AgentRuntime(model, tools, executor, **options)


def tool_messages(messages: Sequence[Message]) -> list[Message]:
    """The tool results in a conversation."""
    return [m for m in messages if m.get("role") == "tool"]


class RecordingModel:
    """A model that plays a script and keeps what it was shown at every turn."""

    def __init__(self, turns: Sequence[Any]) -> None:
        self.script = ScriptedModel(turns)
        self.seen: list[list[Message]] = []
        self.tools: list[list[str]] = []

    def next_turn(self, messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> ModelTurn:
        """Note the conversation, then play the script."""
        self.seen.append([dict(m) for m in messages])
        self.tools.append([t.name for t in tools])
        return self.script.next_turn(messages, tools)
