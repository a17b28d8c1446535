"""A typing sample: mypy checks it from ``test_decorator_typing.py``; it is never run.

A trailing "R:" comment says what ``reveal_type`` on that line must show, an
"E:" comment which error code mypy must report there. Any other error fails.
"""

from __future__ import annotations

from typing import reveal_type

from effectguard import INJECTED, call_scoped, effect


@effect(operation_id="invoice:{invoice_id}:capture", idempotency_key="capture:{invoice_id}")
def capture(
    invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
) -> dict[str, int]:
    """Capture a payment."""
    return {"amount_cents": amount_cents, "key": len(idempotency_key + invoice_id)}


@effect(operation_id="mail:{to}")
async def send(to: str, subject: str = "hello") -> bool:
    """Send one email."""
    return bool(to and subject)


@effect(operation_id=call_scoped("charge"))
def charge(customer_id: str, amount_cents: int, *, idempotency_key: str = INJECTED) -> str:
    """Charge a customer: the operation id comes from the call scope."""
    return customer_id + idempotency_key


class Billing:
    """A client whose method is a guarded tool."""

    @effect(operation_id="refund:{refund_id}")
    def refund(self, refund_id: str) -> int:
        """Refund one payment."""
        return len(refund_id)


captured = capture("INV-1", 100)
result = capture.execute("INV-1", amount_cents=100)
refunded = Billing().refund.execute("R-1")
reveal_type(captured)  # R: dict[str, int]
reveal_type(result)  # R: effectguard._model.EffectResult[dict[str, int]]
reveal_type(result.output)  # R: dict[str, int] | None
reveal_type(capture.contract)  # R: effectguard._contract.EffectContract
reveal_type(Billing().refund("R-1"))  # R: int
reveal_type(refunded)  # R: effectguard._model.EffectResult[int]


async def main() -> None:
    """Await the async tool both ways."""
    sent = await send.execute("a@example.com")
    reveal_type(await send("a@example.com"))  # R: bool
    reveal_type(sent)  # R: effectguard._model.EffectResult[bool]
    await send(42)  # E: arg-type


capture("INV-1", "100")  # E: arg-type
capture("INV-1")  # E: call-arg
capture("INV-1", 100, currency="EUR")  # E: call-arg
Billing().refund(7)  # E: arg-type
reveal_type(charge("cus_1", 500))  # R: str
effect(name="no operation id")  # E: call-arg
