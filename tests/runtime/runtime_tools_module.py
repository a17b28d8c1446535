"""A module of tools, for ToolRegistry.discover: two decorated functions and a plain one."""

from __future__ import annotations

from typing import Any

from effectguard import INJECTED, effect
from effectguard.testkit import FakePaymentProvider

#: The provider these tools talk to; tests replace it.
PROVIDER = FakePaymentProvider()


def find_capture(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> Any:
    """Look a capture up by key."""
    return PROVIDER.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)


@effect(
    operation_id="invoice:{invoice_id}:capture",
    idempotency_key="capture:{invoice_id}",
    idempotency_guaranteed=True,
    probe=find_capture,
    name="module.capture",
)
def capture_payment(
    invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
) -> dict[str, Any]:
    """Capture the payment of an invoice.

    Args:
        invoice_id: The invoice to charge.
        amount_cents: The amount, in cents.
        idempotency_key: Supplied by the executor.
    """
    return PROVIDER.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)


@effect(operation_id="invoice:{invoice_id}:refund", name="module.refund")
def refund_payment(invoice_id: str) -> str:
    """Refund an invoice."""
    return f"refunded {invoice_id}"


#: The same tool under a second name: discovered once.
capture_alias = capture_payment


def lookup_invoice(invoice_id: str) -> dict[str, Any]:
    """Read an invoice (plain: not discovered)."""
    return {"invoice_id": invoice_id}
