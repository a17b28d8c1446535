"""Frameworks see a decorated tool's business parameters: never the idempotency_key it is given."""

from __future__ import annotations

import asyncio
import inspect
import typing
from typing import Any

import pydantic
import pytest

from effectguard import INJECTED, EffectExecutor, effect, get_contract, use_executor
from effectguard.testkit import FakePaymentProvider

BUSINESS = ["invoice_id", "amount_cents"]


@pytest.fixture
def executor(ledger, clock) -> EffectExecutor:
    """An executor over this test's ledger, on the hand-moved clock."""
    return EffectExecutor(ledger, clock=clock)


@pytest.fixture
def provider() -> FakePaymentProvider:
    """A payment provider with Stripe-like keys."""
    return FakePaymentProvider()


class Billing:
    """Capture written every way a method can be: plain, static, class, async."""

    provider: FakePaymentProvider

    def __init__(self, provider: FakePaymentProvider) -> None:
        self.provider = provider

    @effect(operation_id="method:{invoice_id}", idempotency_key="m:{invoice_id}")
    def capture(
        self, invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
    ) -> dict[str, Any]:
        """Capture as a method."""
        return self.provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)

    @effect(operation_id="static:{invoice_id}")
    @staticmethod
    def static_capture(
        invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
    ) -> dict[str, Any]:
        """Capture as a staticmethod (decorated outside)."""
        return {"invoice_id": invoice_id, "amount_cents": amount_cents, "key": idempotency_key}

    @staticmethod
    @effect(operation_id="inner-static:{invoice_id}")
    def inner_static_capture(
        invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
    ) -> dict[str, Any]:
        """Capture as a staticmethod (decorated inside)."""
        return {"invoice_id": invoice_id, "amount_cents": amount_cents, "key": idempotency_key}

    @effect(operation_id="class:{invoice_id}")
    @classmethod
    def class_capture(
        cls, invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
    ) -> dict[str, Any]:
        """Capture as a classmethod."""
        return {"invoice_id": invoice_id, "amount_cents": amount_cents, "key": idempotency_key}

    @effect(operation_id="async-method:{invoice_id}", idempotency_key="am:{invoice_id}")
    async def capture_async(
        self, invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
    ) -> dict[str, Any]:
        """Capture as an async method."""
        return self.provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)


def make_tools(provider: FakePaymentProvider) -> dict[str, Any]:
    """Every shape of decorated tool, by name, as a framework would be handed it."""

    @effect(operation_id="fn:{invoice_id}", idempotency_key="f:{invoice_id}")
    def capture(
        invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
    ) -> dict[str, Any]:
        """Capture a payment."""
        return provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)

    @effect(operation_id="async-fn:{invoice_id}", idempotency_key="af:{invoice_id}")
    async def capture_async(
        invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
    ) -> dict[str, Any]:
        """Capture a payment, asynchronously."""
        return provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)

    billing = Billing(provider)
    return {
        "function": capture,
        "async function": capture_async,
        "bound method": billing.capture,
        "bound async method": billing.capture_async,
        "staticmethod": Billing.static_capture,
        "staticmethod on an instance": billing.static_capture,
        "staticmethod decorated inside": Billing.inner_static_capture,
        "classmethod": Billing.class_capture,
    }


SHAPES = list(make_tools(FakePaymentProvider()))


@pytest.mark.parametrize("shape", SHAPES)
def test_signature_and_annotations_omit_the_key(shape, provider):
    """inspect.signature, __signature__, get_type_hints and __annotations__ show business params."""
    tool = make_tools(provider)[shape]
    assert list(inspect.signature(tool).parameters) == BUSINESS
    assert list(inspect.signature(tool, eval_str=True).parameters) == BUSINESS
    assert list(tool.__signature__.parameters) == BUSINESS
    assert inspect.signature(tool).return_annotation == "dict[str, Any]"
    hints = typing.get_type_hints(tool)
    assert hints == {"invoice_id": str, "amount_cents": int, "return": dict[str, Any]}
    assert set(tool.__annotations__) == {*BUSINESS, "return"}
    assert "idempotency_key" not in inspect.get_annotations(tool)


def test_unbound_methods_show_self_but_not_the_key(provider):
    """Billing.capture, reached on the class, shows self and the business parameters."""
    assert list(inspect.signature(Billing.capture).parameters) == ["self", *BUSINESS]
    assert list(inspect.signature(Billing.capture_async).parameters) == ["self", *BUSINESS]
    assert set(typing.get_type_hints(Billing.capture)) == {*BUSINESS, "return"}


def test_the_contract_and_the_wrapped_function_keep_the_original_signature(provider):
    """__wrapped__ is the function as written, and the executor still hands it the key."""
    tool = make_tools(provider)["function"]
    assert list(inspect.signature(tool.__wrapped__).parameters) == [*BUSINESS, "idempotency_key"]
    assert "idempotency_key" in tool.__wrapped__.__annotations__
    assert get_contract(tool) is tool.contract
    assert tool.contract.provider_idempotency_key is not None


@pytest.mark.parametrize("shape", SHAPES)
def test_pydantic_builds_a_schema_of_the_business_parameters(shape, provider):
    """pydantic.TypeAdapter(tool).json_schema() has exactly the tool's business properties."""
    schema = pydantic.TypeAdapter(make_tools(provider)[shape]).json_schema()
    assert list(schema["properties"]) == BUSINESS
    assert schema["required"] == BUSINESS


@pytest.mark.parametrize("shape", ["function", "bound method"])
def test_a_call_through_validate_call_commits_once_with_the_contracts_key(
    shape, provider, executor
):
    """validate_call coerces the model's arguments; the tool then injects its own key."""
    tool = make_tools(provider)[shape]
    validated = pydantic.validate_call(tool)
    with use_executor(executor):
        first = validated(invoice_id="INV-1", amount_cents="1999")
        again = validated(invoice_id="INV-1", amount_cents=1999)
    assert first == again
    assert first["amount_cents"] == 1999
    assert provider.committed() == 1
    key = "f:INV-1" if shape == "function" else "m:INV-1"
    assert provider.committed(key) == 1


@pytest.mark.parametrize("shape", ["async function", "bound async method"])
def test_an_async_call_through_validate_call_commits_once(shape, provider, executor):
    """The async tools work through validate_call too, and are awaited as before."""
    tool = make_tools(provider)[shape]
    validated = pydantic.validate_call(tool)

    async def main() -> Any:
        with use_executor(executor):
            return await validated(invoice_id="INV-2", amount_cents="500")

    output = asyncio.run(main())
    assert output["amount_cents"] == 500
    assert provider.committed() == 1
    key = "af:INV-2" if shape == "async function" else "am:INV-2"
    assert provider.committed(key) == 1
