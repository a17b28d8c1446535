"""Identity templates and other settings are checked when the tool is decorated, not when called."""

from __future__ import annotations

from typing import Any

import pytest

from effectguard import (
    INJECTED,
    ConfigurationError,
    EffectExecutor,
    OperationConflictError,
    effect,
)


@pytest.fixture
def executor(ledger, clock) -> EffectExecutor:
    """An executor over this test's ledger, on the hand-moved clock."""
    return EffectExecutor(ledger, clock=clock)


def capture(invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED) -> dict:
    """A tool to decorate in many ways."""
    return {"invoice_id": invoice_id, "key": idempotency_key}


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (
            {"operation_id": "invoice:{invoice}:capture"},
            "names 'invoice', which is not a parameter",
        ),
        ({"operation_id": "invoice:{}:capture"}, "positional field"),
        ({"operation_id": "invoice:{0}:capture"}, "positional field"),
        ({"operation_id": "invoice:{invoice_id:capture"}, "malformed"),
        ({"operation_id": "invoice:{idempotency_key}"}, "'idempotency_key', which is not a param"),
        ({"operation_id": ""}, "non-empty"),
        ({"operation_id": 42}, "non-empty"),
        ({"operation_id": "i:{invoice_id}", "idempotency_key": "k:{amount}"}, "'amount'"),
        ({"operation_id": "i:{invoice_id:>{width}}"}, "'width'"),
        ({"operation_id": "i:{invoice_id}", "redact": ["card"]}, "redact names card"),
        (
            {"operation_id": "i:{invoice_id}:{amount_cents}", "redact": ["amount_cents"]},
            "redacted parameter 'amount_cents'",
        ),
        ({"operation_id": "i:{invoice_id}", "unknown_outcome": "retry"}, "unknown_outcome="),
        ({"operation_id": "i:{invoice_id}", "timeout": "5s"}, "timeout= sets handler_timeout"),
        ({"operation_id": "i:{invoice_id}", "max_attempts": 0}, "max_attempts"),
        ({"operation_id": "i:{invoice_id}", "codec": int}, "not a dataclass or a pydantic model"),
    ],
)
def test_bad_settings_fail_at_decoration(settings, expected):
    """Each bad setting is a one-line ConfigurationError (a ValueError) before any call."""
    with pytest.raises(ConfigurationError, match=expected) as info:
        effect(**settings)(capture)
    assert isinstance(info.value, ValueError)
    assert "\n" not in str(info.value)


def test_key_template_needs_a_key_parameter():
    """A key the tool cannot receive, or a guarantee without a key, is refused at decoration."""

    def no_key(invoice_id: str) -> dict:
        return {}

    with pytest.raises(ConfigurationError, match="no idempotency_key parameter"):
        effect(operation_id="i:{invoice_id}", idempotency_key="k:{invoice_id}")(no_key)
    with pytest.raises(ConfigurationError, match="idempotency_guaranteed=True needs"):
        effect(operation_id="i:{invoice_id}", idempotency_guaranteed=True)(no_key)


def test_templates_format_values_and_index_into_them(ledger, executor):
    """Templates format any argument and may index into mappings and lists."""

    @effect(operation_id="order:{order[id]}:line:{lines[0]}:{total:.2f}", executor=executor)
    def place(order: dict, lines: list, total: float) -> str:
        return "placed"

    place({"id": "O-1"}, ["L-9", "L-10"], 12.5)
    assert ledger.get("order:O-1:line:L-9:12.50") is not None


def test_a_template_that_cannot_format_a_call_records_nothing(ledger, executor):
    """A template indexing what a call lacks is a ConfigurationError, and nothing is recorded."""
    calls = []

    @effect(operation_id="order:{order[id]}", executor=executor)
    def place(order: dict) -> str:
        calls.append(order)
        return "placed"

    with pytest.raises(ConfigurationError, match="cannot be formatted"):
        place({"number": 1})
    assert calls == []
    assert ledger.list_operations() == []


def test_callable_identity_receives_the_arguments_mapping(executor):
    """Callable operation ids and keys get the bound arguments, without self or the key."""
    seen: list[dict[str, Any]] = []

    def operation_id(arguments: Any) -> str:
        seen.append(dict(arguments))
        return f"invoice:{arguments['invoice_id']}"

    class Client:
        @effect(
            operation_id=operation_id,
            idempotency_key=lambda a: f"key-{a['invoice_id']}-{a['amount_cents']}",
            executor=executor,
        )
        def capture(
            self, invoice_id: str, amount_cents: int = 5, *, idempotency_key: str = INJECTED
        ) -> dict:
            return {"key": idempotency_key, "amount": (invoice_id, amount_cents)}

    assert Client().capture("INV-1") == {"key": "key-INV-1-5", "amount": ("INV-1", 5)}
    assert seen[0] == {"invoice_id": "INV-1", "amount_cents": 5}


def test_version_and_name_count_in_the_fingerprint(executor):
    """Another contract version under the same operation id is a conflict, not a replay."""

    def job(n: int) -> int:
        return n

    effect(operation_id="job:{n}", name="jobs", executor=executor)(job)(1)
    with pytest.raises(OperationConflictError):
        effect(operation_id="job:{n}", name="jobs", version=2, executor=executor)(job)(1)
