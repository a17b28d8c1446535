"""Standard types in outputs are stored losslessly, and replayed as the same types."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import uuid
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from effectguard import (
    ConfigurationError,
    EffectExecutor,
    EffectStatus,
    OutputNotStored,
    effect,
)
from effectguard.testkit import FakePaymentProvider

WHEN = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=timezone(timedelta(hours=2)))


class Color(enum.Enum):
    """A plain enum: its class is needed to rebuild a member."""

    RED = "red"


@dataclasses.dataclass(frozen=True)
class Slot:
    """A dataclass with every newly supported kind of field."""

    at: time
    day: date
    ref: uuid.UUID
    blob: bytes
    pair: tuple[int, str]
    color: Color


@pytest.fixture
def executor(ledger, clock) -> EffectExecutor:
    """An executor over this test's ledger."""
    return EffectExecutor(ledger, clock=clock)


def test_an_untyped_dict_with_a_datetime_is_stored_and_replayed_as_a_datetime(ledger, executor):
    """-> dict returning {"when": datetime}: CONFIRMED, replayed with the same aware datetime."""
    provider = FakePaymentProvider()

    @effect(operation_id="invoice:{invoice_id}", executor=executor)
    def capture(invoice_id: str) -> dict[str, Any]:
        provider.capture(invoice_id, 100)
        return {"when": WHEN, "total": Decimal("1.10"), "ids": (1, 2), "raw": b"\x00\xff"}

    fresh = capture("INV-1")
    replayed = capture("INV-1")

    assert (
        replayed
        == fresh
        == {"when": WHEN, "total": Decimal("1.10"), "ids": (1, 2), "raw": b"\x00\xff"}
    )
    assert replayed["when"].utcoffset() == timedelta(hours=2)
    assert ledger.get("invoice:INV-1").status is EffectStatus.CONFIRMED
    assert ledger.get("invoice:INV-1").output["total"] == {"$decimal": "1.10"}
    assert provider.committed() == 1


def test_a_dict_that_looks_like_a_tag_comes_back_as_itself(executor):
    """An output of the tool's own shaped like a tag is escaped, not misread on replay."""

    @effect(operation_id="t:{n}", executor=executor)
    def tool(n: int) -> dict[str, Any]:
        return {"$date": "not a date", "n": n} if n else {"$date": "2026-01-01"}

    for n in (0, 1):
        first = tool(n)
        assert tool(n) == first


@pytest.mark.parametrize(
    ("annotation", "value"),
    [
        (datetime, WHEN),
        (date, date(2026, 1, 2)),
        (time, time(3, 4, 5, tzinfo=UTC)),
        (Decimal, Decimal("12.30")),
        (uuid.UUID, uuid.UUID(int=7)),
        (bytes, b"\x01\x02"),
        (Color, Color.RED),
        (tuple[int, str], (1, "a")),
        (dict[str, Decimal], {"a": Decimal("0.1")}),
        (list[datetime], [WHEN]),
        (Slot, Slot(time(1), date(2026, 1, 1), uuid.UUID(int=1), b"x", (1, "b"), Color.RED)),
    ],
)
def test_an_annotated_standard_type_is_replayed_as_that_type(executor, annotation, value):
    """-> datetime, -> dict[str, Decimal], a dataclass of such fields…: equal and same type."""
    calls = []

    def tool(n: int):
        calls.append(n)
        return value

    tool.__annotations__["return"] = annotation
    guarded = effect(operation_id="t:{n}", executor=executor)(tool)
    assert guarded(1) == value
    replayed = guarded(1)
    assert replayed == value
    assert type(replayed) is type(value)
    assert calls == [1]


def test_an_async_tool_replays_standard_types_too(executor):
    """The async path stores and rebuilds the same way."""

    @effect(operation_id="a:{n}", executor=executor)
    async def tool(n: int) -> datetime:
        return WHEN

    assert asyncio.run(tool(1)) == WHEN
    assert asyncio.run(tool(1)) == WHEN


@pytest.mark.parametrize("annotation", [set[int], frozenset, Color | datetime, complex])
def test_an_annotation_no_codec_can_store_fails_at_decoration(annotation):
    """A return type that can never be stored is a ConfigurationError naming the tool and type."""

    def send_report(n: int):
        return n

    send_report.__annotations__["return"] = annotation
    with pytest.raises(ConfigurationError, match="send_report") as info:
        effect(operation_id="r:{n}")(send_report)
    assert repr(annotation) in str(info.value) or getattr(annotation, "__name__", "?") in str(
        info.value
    )


def test_a_plain_enum_in_an_untyped_output_is_confirmed_but_not_stored(ledger, executor):
    """An enum member no annotation names: CONFIRMED, OutputNotStored, one commit."""
    provider = FakePaymentProvider()

    @effect(operation_id="invoice:{invoice_id}", executor=executor)
    def capture(invoice_id: str) -> dict[str, Any]:
        provider.capture(invoice_id, 100)
        return {"color": Color.RED}

    with pytest.raises(OutputNotStored, match=r"\$\.color is a Color member") as fresh:
        capture("INV-9")
    assert fresh.value.output == {"color": Color.RED}
    with pytest.raises(OutputNotStored):
        capture("INV-9")
    assert ledger.get("invoice:INV-9").status is EffectStatus.CONFIRMED
    assert provider.committed() == 1
