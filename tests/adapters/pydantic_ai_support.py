"""Tools, a scripted Pydantic AI model and a gated ledger for the Pydantic AI adapter's tests.

The tools charge a :class:`FakePaymentProvider` (or send through a
:class:`FakeEmailProvider`) that counts what it committed on its own, so every
test asserts on what reached the provider, not on what the library reports.
Each tool comes sync and async: the adapter builds a different function for each.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from extras_support import import_extra

from effectguard import INJECTED, EffectExecutor, EffectStatus, SQLiteEffectLedger, effect
from effectguard._model import OperationRecord
from effectguard.testkit import FakeEmailProvider, FakePaymentProvider

pydantic_ai = import_extra("pydantic_ai", "pydantic-ai")

from pydantic_ai import Agent, DeferredToolRequests, models  # noqa: E402 - after the extra check
from pydantic_ai.messages import (  # noqa: E402 - after the extra check
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402 - after the extra check

# No test may reach a real model: a model request that is not a FunctionModel's fails.
models.ALLOW_MODEL_REQUESTS = False

#: The tools' flavours: each test runs with a sync and an async tool.
FLAVOURS = ["sync", "async"]


class GatedLedger(SQLiteEffectLedger):
    """A real SQLite ledger that notes when a reader finds an operation DISPATCHED.

    A handler can wait on :attr:`peer_read` to hold its dispatch open until an
    identical call has found it in flight, so "two calls at once" is certain,
    not a matter of scheduling luck.
    """

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self.peer_read = threading.Event()

    def get(self, operation_id: str, *, now: float | None = None) -> OperationRecord | None:
        """See :meth:`EffectLedger.get`; sets :attr:`peer_read` on a DISPATCHED record."""
        record = super().get(operation_id, now=now)
        if record is not None and record.status is EffectStatus.DISPATCHED:
            self.peer_read.set()
        return record


def capture_tool(
    provider: FakePaymentProvider,
    executor: EffectExecutor,
    flavour: str,
    *,
    before: Callable[[], None] | None = None,
    **options: Any,
) -> Any:
    """A ``capture_payment`` ``@effect`` tool on ``provider``, sync or async.

    Its probe asks the provider (with ``Lookup.NONE`` that answers UNKNOWN);
    ``before`` runs before the request is sent (a gate, in the peer test).
    """

    def find_capture(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> Any:
        del amount_cents  # the key identifies the request
        return provider.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)

    settings: dict[str, Any] = {
        "operation_id": "invoice:{invoice_id}:capture",
        "idempotency_key": "capture:{invoice_id}",
        "probe": find_capture,
        "name": f"tests.pyd.capture.{flavour}",
        "executor": executor,
    }
    settings.update(options)

    if flavour == "async":

        @effect(**settings)
        async def capture_payment(
            invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
        ) -> dict[str, Any]:
            """Capture the payment of an invoice.

            Args:
                invoice_id: The invoice to charge.
                amount_cents: The amount, in cents.
                idempotency_key: Supplied by the executor.
            """
            if before is not None:
                await asyncio.to_thread(before)
            return provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)

        return capture_payment

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
        if before is not None:
            before()
        return provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)

    return capture_payment


def receipt_tool(mail: FakeEmailProvider, executor: EffectExecutor, flavour: str) -> Any:
    """A ``send_receipt`` ``@effect`` tool that mails a receipt with a Message-ID of its own."""

    def message_id(arguments: Any) -> str:
        return FakeEmailProvider.message_id_for(f"receipt:{arguments['invoice_id']}")

    settings: dict[str, Any] = {
        "operation_id": "receipt:{invoice_id}",
        "idempotency_key": message_id,
        "name": f"tests.pyd.receipt.{flavour}",
        "executor": executor,
    }

    def send(invoice_id: str, to: str, key: str) -> dict[str, Any]:
        return mail.send(to, f"Receipt {invoice_id}", "Paid, thank you.", message_id=key)

    if flavour == "async":

        @effect(**settings)
        async def send_receipt(
            invoice_id: str, to: str, *, idempotency_key: str = INJECTED
        ) -> dict[str, Any]:
            """Mail the receipt of an invoice.

            Args:
                invoice_id: The invoice paid.
                to: The customer's address.
                idempotency_key: Supplied by the executor (the receipt's Message-ID).
            """
            return send(invoice_id, to, idempotency_key)

        return send_receipt

    @effect(**settings)
    def send_receipt(
        invoice_id: str, to: str, *, idempotency_key: str = INJECTED
    ) -> dict[str, Any]:
        """Mail the receipt of an invoice.

        Args:
            invoice_id: The invoice paid.
            to: The customer's address.
            idempotency_key: Supplied by the executor (the receipt's Message-ID).
        """
        return send(invoice_id, to, idempotency_key)

    return send_receipt


def capture(invoice_id: str, call_id: str, amount_cents: int | str = 1999) -> ToolCallPart:
    """The model's call of ``capture_payment``."""
    arguments = {"invoice_id": invoice_id, "amount_cents": amount_cents}
    return ToolCallPart("capture_payment", arguments, tool_call_id=call_id)


def receipt(invoice_id: str, call_id: str) -> ToolCallPart:
    """The model's call of ``send_receipt``."""
    arguments = {"invoice_id": invoice_id, "to": "ada@example.com"}
    return ToolCallPart("send_receipt", arguments, tool_call_id=call_id)


class ScriptedModel:
    """A FunctionModel script: the given tool calls (again, if asked to), then what came back.

    ``seen`` keeps every tool return the model was shown (content and outcome),
    so a test can check what the model was told.
    """

    def __init__(self, calls: Sequence[ToolCallPart]) -> None:
        self.calls = list(calls)
        self.seen: list[tuple[str, Any, str]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        """Answer one model request."""
        del info
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if not returns:
            return ModelResponse(parts=list(self.calls))
        self.seen.extend((p.tool_call_id, p.content, p.outcome) for p in returns)
        if all(p.outcome == "retried" for p in returns):
            return ModelResponse(parts=list(self.calls))  # asked to call again: it does
        told = ", ".join(f"{p.tool_call_id}={p.outcome}" for p in returns)
        return ModelResponse(parts=[TextPart(f"done: {told}")])


def agent(script: ScriptedModel, tools: Sequence[Any]) -> Agent[None, str | DeferredToolRequests]:
    """An agent on ``script`` whose output may be the deferred calls it waits on."""
    return Agent(FunctionModel(script), tools=list(tools), output_type=[str, DeferredToolRequests])


def run(flavour: str, target: Agent[None, Any], **options: Any) -> Any:
    """Run ``target`` to its end: ``run_sync`` for sync tools, ``await run`` for async ones."""
    if flavour == "async":
        return asyncio.run(target.run(**options))
    return target.run_sync(**options)
