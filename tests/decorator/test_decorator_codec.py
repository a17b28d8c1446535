"""Outputs that are not plain JSON, and arguments that must never be stored."""

from __future__ import annotations

import dataclasses
import enum
import sqlite3
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pydantic
import pytest

from effectguard import (
    INJECTED,
    ConfigurationError,
    DataclassCodec,
    EffectExecutor,
    EffectStatus,
    OperationConflictError,
    OutcomeProbeResult,
    OutputNotStored,
    PydanticCodec,
    SQLiteEffectLedger,
    effect,
)
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan


class Currency(enum.Enum):
    """A currency, stored by value."""

    EUR = "EUR"
    USD = "USD"


@dataclasses.dataclass(frozen=True)
class Money:
    """An amount in a currency."""

    amount: Decimal
    currency: Currency


@dataclasses.dataclass(frozen=True)
class Receipt:
    """A capture's receipt, as a typed client library would return it."""

    id: str
    captured_at: datetime
    total: Money
    lines: tuple[Money, ...]
    note: str | None = None
    tags: list[str] = dataclasses.field(default_factory=list)


class ReceiptModel(pydantic.BaseModel):
    """The same receipt as a pydantic model."""

    id: str
    captured_at: datetime
    amount: Decimal


@dataclasses.dataclass
class Opaque:
    """A dataclass with a field no JSON codec can store losslessly."""

    handles: set[int]


@pytest.fixture
def executor(ledger, clock) -> EffectExecutor:
    """An executor over this test's ledger, on the hand-moved clock."""
    return EffectExecutor(ledger, clock=clock)


def receipt_for(invoice_id: str, seq: int) -> Receipt:
    """Return a receipt with every supported kind of field filled in."""
    return Receipt(
        id=f"rcpt-{invoice_id}-{seq}",
        captured_at=datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
        total=Money(Decimal("12.30"), Currency.EUR),
        lines=(Money(Decimal("10.00"), Currency.EUR), Money(Decimal("2.30"), Currency.EUR)),
        tags=["a", "b"],
    )


def test_dataclass_output_round_trips_through_the_ledger(ledger, executor):
    """A dataclass output, inferred from the annotation, is replayed as an equal dataclass."""
    calls = []

    @effect(operation_id="invoice:{invoice_id}", executor=executor)
    def capture(invoice_id: str) -> Receipt:
        calls.append(invoice_id)
        return receipt_for(invoice_id, len(calls))

    assert isinstance(capture.contract.codec, DataclassCodec)
    fresh = capture("INV-1")
    replayed = capture("INV-1")
    assert type(replayed) is Receipt
    assert replayed == fresh == receipt_for("INV-1", 1)
    assert calls == ["INV-1"]
    stored = ledger.get("invoice:INV-1").output
    assert stored["total"] == {"amount": "12.30", "currency": "EUR"}


def test_codec_may_be_named_by_type_or_instance(executor):
    """codec= takes a dataclass type or a codec object; either replays the same type."""

    @effect(operation_id="a:{n}", codec=Money, executor=executor)
    def by_type(n: int) -> Any:
        return Money(Decimal(n), Currency.USD)

    @effect(operation_id="b:{n}", codec=DataclassCodec(Money), executor=executor)
    def by_codec(n: int) -> Any:
        return Money(Decimal(n), Currency.USD)

    for tool in (by_type, by_codec):
        tool(1)
        assert tool(1) == Money(Decimal(1), Currency.USD)


def test_pydantic_output_round_trips_through_the_ledger(executor):
    """A pydantic model output, inferred from the annotation, is replayed as the same model."""

    @effect(operation_id="invoice:{invoice_id}", executor=executor)
    def capture(invoice_id: str) -> ReceiptModel:
        return ReceiptModel(
            id=f"rcpt-{invoice_id}", captured_at=datetime(2026, 1, 2, tzinfo=UTC), amount="9.99"
        )

    assert isinstance(capture.contract.codec, PydanticCodec)
    fresh = capture("INV-2")
    replayed = capture("INV-2")
    assert type(replayed) is ReceiptModel
    assert replayed == fresh
    assert replayed.amount == Decimal("9.99")


def test_pydantic_codec_handles_container_types(executor):
    """PydanticCodec takes any type pydantic validates, such as a list of models."""

    @effect(operation_id="batch:{n}", codec=PydanticCodec(list[ReceiptModel]), executor=executor)
    def batch(n: int) -> list[ReceiptModel]:
        return [
            ReceiptModel(id=str(i), captured_at=datetime(2026, 1, 1, tzinfo=UTC), amount=i)
            for i in range(n)
        ]

    assert batch(2) == batch(2)
    assert all(type(item) is ReceiptModel for item in batch(2))


def test_unsupported_dataclass_fields_are_refused_at_decoration():
    """A dataclass the codec cannot store losslessly is refused before any effect is sent."""
    with pytest.raises(ConfigurationError, match=r"Opaque\.handles"):

        @effect(operation_id="x:{n}")
        def make(n: int) -> Opaque:
            return Opaque({n})

    with pytest.raises(ConfigurationError, match="needs a dataclass"):
        DataclassCodec(dict)  # type: ignore[type-var]


def test_probe_output_is_encoded_like_the_tool_output(executor):
    """After a lost ack the probe's dataclass output confirms, and replays as the dataclass."""
    provider = FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]))

    def find_capture(invoice_id: str) -> OutcomeProbeResult:
        found = provider.find_capture(f"invoice:{invoice_id}")
        if found is None:
            return OutcomeProbeResult.not_committed()
        return OutcomeProbeResult.committed(receipt_for(invoice_id, 1))

    @effect(operation_id="invoice:{invoice_id}", probe=find_capture, executor=executor)
    def capture(invoice_id: str) -> Receipt:
        provider.capture(invoice_id, 1230)
        return receipt_for(invoice_id, 1)

    assert capture("INV-3") == receipt_for("INV-3", 1)
    assert capture("INV-3") == receipt_for("INV-3", 1)
    assert provider.committed() == 1


def test_output_of_the_wrong_type_is_confirmed_but_not_stored(ledger, executor):
    """An output the codec cannot store: the effect is CONFIRMED, once, and the caller told so."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)

    @effect(operation_id="invoice:{invoice_id}", codec=Receipt, executor=executor)
    def capture(invoice_id: str) -> Any:
        return provider.capture(invoice_id, 100)  # a dict, not a Receipt

    with pytest.raises(OutputNotStored, match="not the Receipt annotated") as fresh:
        capture("INV-4")
    assert fresh.value.has_output
    assert fresh.value.output["invoice_id"] == "INV-4"
    with pytest.raises(OutputNotStored) as replay:
        capture("INV-4")
    assert not replay.value.has_output
    assert ledger.get("invoice:INV-4").status is EffectStatus.CONFIRMED
    assert provider.committed() == 1


# -- redaction ---------------------------------------------------------------------------------

SECRET = "4242-4242-4242-4242-SECRET"  # noqa: S105 - a card number is the secret under test


def _files_containing(directory: Any, needle: bytes) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.is_file() and needle in p.read_bytes())


def test_redacted_argument_never_reaches_the_ledger_file(tmp_path):
    """A redacted value is in neither the SQLite file nor its WAL, yet a changed one conflicts."""
    ledger = SQLiteEffectLedger(tmp_path / "ledger.db")
    executor = EffectExecutor(ledger)
    seen = []

    @effect(
        operation_id="charge:{customer}",
        idempotency_key="charge-key:{customer}",
        redact=["card_number"],
        executor=executor,
    )
    def charge(customer: str, card_number: str, *, idempotency_key: str = INJECTED) -> dict:
        seen.append(card_number)
        return {"charged": customer, "last4": card_number[-4:]}

    assert charge("cus-1", SECRET) == {"charged": "cus-1", "last4": "CRET"}
    assert charge("cus-1", SECRET)["charged"] == "cus-1"
    with pytest.raises(OperationConflictError):
        charge("cus-1", SECRET.replace("4242", "4000", 1))
    assert seen == [SECRET]
    assert ledger.get("charge:cus-1").arguments == {
        "customer": "cus-1",
        "card_number": "[redacted]",
    }
    assert (tmp_path / "ledger.db-wal").exists()
    assert _files_containing(tmp_path, b"cus-1")  # the search does find what is stored
    assert _files_containing(tmp_path, SECRET.encode()) == []
    ledger.close()
    assert _files_containing(tmp_path, SECRET.encode()) == []
    # Checkpointed into the main file, the database holds it nowhere either.
    with sqlite3.connect(tmp_path / "ledger.db") as conn:
        dump = "\n".join(conn.iterdump())
    assert SECRET not in dump
