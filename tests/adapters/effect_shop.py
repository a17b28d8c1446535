"""The tools the OpenAI Agents and MCP adapter tests run: a capture and a receipt email.

Both providers keep their state in files, so a second process (a restart)
sees what the first committed; their counts are the ground truth every test
asserts on. Neither provider deduplicates, and neither tool has a probe: a
lost acknowledgement leaves the operation QUARANTINED until an operator acts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from effectguard import INJECTED, EffectExecutor, EffectLedger, effect, open_ledger
from effectguard.testkit import FakeEmailProvider, FakePaymentProvider, Fault, FaultPlan, Lookup

CAPTURE_OPERATION = "invoice:{invoice_id}:capture"
RECEIPT_OPERATION = "receipt:{invoice_id}"
OPS = str(Path(sys.executable).with_name("agent-effect-ops"))


@dataclass
class Shop:
    """One test's providers, ledger and the two ``@effect`` tools over them."""

    directory: Path
    payments: FakePaymentProvider
    mail: FakeEmailProvider
    ledger: EffectLedger
    capture: Any
    send_receipt: Any

    @property
    def ledger_path(self) -> str:
        """The ledger file, as ``agent-effect-ops --db`` takes it."""
        return str(self.directory / "ledger.db")

    def close(self) -> None:
        """Close the ledger."""
        # Only the ledger: a fake provider's Store cannot close connections that worker
        # threads (asyncio.to_thread, the SDKs' thread pools) opened, and raises.
        self.ledger.close()


def open_shop(
    directory: Path,
    *,
    kind: str = "sync",
    payment_faults: list[Fault] | None = None,
    mail_faults: list[Fault] | None = None,
    late_commit_after: float = 5.0,
) -> Shop:
    """The shop over the files in ``directory``: sync or async tools, with these provider faults."""
    payments = FakePaymentProvider(
        idempotency_guaranteed=False,
        lookup=Lookup.NONE,
        faults=FaultPlan(payment_faults or []),
        path=directory / "payments.db",
        late_commit_after=late_commit_after,
    )
    mail = FakeEmailProvider(
        lookup=Lookup.NONE, faults=FaultPlan(mail_faults or []), path=directory / "mail.db"
    )
    ledger = open_ledger(str(directory / "ledger.db"))
    executor = EffectExecutor(ledger)
    capture, send_receipt = _tools(payments, mail, executor, kind)
    return Shop(directory, payments, mail, ledger, capture, send_receipt)


def _tools(
    payments: FakePaymentProvider, mail: FakeEmailProvider, executor: EffectExecutor, kind: str
) -> tuple[Any, Any]:
    if kind == "sync":

        @effect(operation_id=CAPTURE_OPERATION, executor=executor)
        def capture(invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED) -> dict:
            """Capture the payment of an invoice.

            Args:
                invoice_id: The invoice to capture, e.g. INV-1042.
                amount_cents: The amount to capture, in cents.
                idempotency_key: Supplied by the executor, never by the model.
            """
            return payments.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)

        @effect(operation_id=RECEIPT_OPERATION, executor=executor)
        def send_receipt(to: str, invoice_id: str, *, idempotency_key: str = INJECTED) -> dict:
            """Email the receipt of an invoice.

            Args:
                to: The customer's email address.
                invoice_id: The invoice the receipt is for.
                idempotency_key: Supplied by the executor, never by the model.
            """
            return mail.send(to, f"Receipt {invoice_id}", "Paid.", message_id=idempotency_key)

        return capture, send_receipt

    @effect(operation_id=CAPTURE_OPERATION, executor=executor)
    async def capture(
        invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
    ) -> dict:
        """Capture the payment of an invoice.

        Args:
            invoice_id: The invoice to capture, e.g. INV-1042.
            amount_cents: The amount to capture, in cents.
            idempotency_key: Supplied by the executor, never by the model.
        """
        return payments.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)

    @effect(operation_id=RECEIPT_OPERATION, executor=executor)
    async def send_receipt(to: str, invoice_id: str, *, idempotency_key: str = INJECTED) -> dict:
        """Email the receipt of an invoice.

        Args:
            to: The customer's email address.
            invoice_id: The invoice the receipt is for.
            idempotency_key: Supplied by the executor, never by the model.
        """
        return mail.send(to, f"Receipt {invoice_id}", "Paid.", message_id=idempotency_key)

    return capture, send_receipt


def confirm_with_cli(ledger_path: str, operation: str, output: dict[str, Any]) -> None:
    """Resolve ``operation`` as an operator would: ``agent-effect-ops confirm`` in a subprocess."""
    subprocess.run(
        [
            OPS,
            "--db",
            ledger_path,
            "confirm",
            operation,
            "--output-json",
            json.dumps(output),
            "--provider-operation-id",
            str(output["id"]),
            "--actor",
            "oncall",
            "--reason",
            "the provider's dashboard shows it",
            "--evidence-reference",
            "TICKET-1",
        ],
        check=True,
        capture_output=True,
    )


def confirm_with_ledger(ledger: EffectLedger, operation: str, output: dict[str, Any]) -> None:
    """Resolve ``operation`` through the ledger API."""
    ledger.confirm(
        operation,
        output=output,
        provider_operation_id=str(output["id"]),
        actor="oncall",
        reason="the provider's dashboard shows it",
        evidence_reference="TICKET-1",
    )
