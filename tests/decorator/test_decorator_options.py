"""@effect's options are EffectContract's fields: one list, checked by the contract alone."""

from __future__ import annotations

import dataclasses
import inspect
from datetime import timedelta
from typing import Any

import pytest

from effectguard import (
    INJECTED,
    ConfigurationError,
    EffectContract,
    UnknownOutcomePolicy,
    effect,
)
from effectguard._decorator import DECORATOR_ONLY, RENAMED, contract_field, keyword_for

#: Contract fields @effect computes from the function rather than taking as given.
_DERIVED = {"name", "operation_id", "outcome_probe", "codec"}


def capture(invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED) -> dict:
    """A tool to decorate."""
    return {"invoice_id": invoice_id, "amount_cents": amount_cents, "key": idempotency_key}


def _keywords() -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(effect).parameters)


def test_every_keyword_sets_a_contract_field_and_every_field_has_a_keyword():
    """The decorator's keywords and the contract's fields name the same options, both ways."""
    keywords = _keywords()
    fields = {field.name for field in dataclasses.fields(EffectContract)}
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in keywords.values())
    assert {contract_field(k) for k in keywords if k not in DECORATOR_ONLY} == fields
    assert {keyword_for(field) for field in fields} == set(keywords) - DECORATOR_ONLY
    assert set(RENAMED.values()) <= fields
    assert set(RENAMED) <= set(keywords)


def test_the_decorators_defaults_are_the_contracts_defaults():
    """A tool decorated with only operation_id gets every other field's contract default."""
    contract = effect(operation_id="i:{invoice_id}")(capture).contract
    for field in dataclasses.fields(EffectContract):
        if field.name in _DERIVED or field.name == "provider_idempotency_key":
            continue
        default = field.default_factory() if callable(field.default_factory) else field.default
        assert getattr(contract, field.name) == default, field.name
    keywords = _keywords()
    for keyword, parameter in keywords.items():
        field = contract_field(keyword)
        declared = next((f for f in dataclasses.fields(EffectContract) if f.name == field), None)
        if declared is None or field in _DERIVED or declared.default is dataclasses.MISSING:
            continue
        assert parameter.default == declared.default, keyword


def test_each_renamed_keyword_reaches_its_contract_field():
    """timeout, lease, provider_key_retention, idempotency_* and probe land on the contract."""

    def find(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> Any:
        raise AssertionError

    contract = effect(
        operation_id="i:{invoice_id}",
        idempotency_key="k:{invoice_id}",
        idempotency_guaranteed=True,
        probe=find,
        timeout=timedelta(seconds=5),
        lease=7,
        provider_key_retention=timedelta(hours=24),
        unknown_outcome="keep-unknown",
        redact="amount_cents",
    )(capture).contract
    assert contract.provider_idempotency_key is not None
    assert contract.provider_idempotency_key({"invoice_id": "INV-1"}) == "k:INV-1"
    assert contract.provider_idempotency_guaranteed is True
    assert callable(contract.outcome_probe)
    assert (contract.handler_timeout, contract.lease_seconds) == (5.0, 7)
    assert contract.provider_key_retention_seconds == 24 * 3600.0
    assert contract.unknown_outcome is UnknownOutcomePolicy.KEEP_UNKNOWN
    assert contract.redact == frozenset({"amount_cents"})


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"timeout": True}, r"handler_timeout must be > 0 seconds .*timeout= sets handler_timeout"),
        ({"lease": -1}, r"lease_seconds must be > 0 seconds.*lease= sets lease_seconds"),
        ({"lease": None}, "lease_seconds must be > 0 seconds"),
        ({"provider_key_retention": timedelta(0)}, "provider_key_retention= sets"),
        ({"idempotency_guaranteed": "yes"}, "must be True or False"),
        ({"postcondition": "ok"}, "postcondition must be a callable"),
        ({"provider_operation_id": 3}, "provider_operation_id must be a callable"),
        ({"max_output_bytes": 0}, "max_output_bytes must be > 0"),
        ({"version": True}, "version must be an int"),
        ({"redact": 5}, "redact must be a collection"),
        ({"codec": object()}, "codec must be an OutputCodec"),
    ],
)
def test_the_contract_judges_every_option_in_the_decorators_terms(settings, expected):
    """A bad value is refused by EffectContract, and the message names the @effect keyword."""
    with pytest.raises(ConfigurationError, match=expected) as info:
        effect(operation_id="i:{invoice_id}", **settings)(capture)
    assert "test_decorator_options.capture" in str(info.value)
    assert "\n" not in str(info.value)


def test_the_contract_refuses_what_the_decorator_would_so_direct_users_get_the_same_checks():
    """EffectContract itself normalizes a policy name and a single redacted name."""
    contract = EffectContract(
        name="c", operation_id=lambda a: "op", unknown_outcome="keep_unknown", redact="card"
    )
    assert contract.unknown_outcome is UnknownOutcomePolicy.KEEP_UNKNOWN
    assert contract.redact == frozenset({"card"})
    with pytest.raises(ConfigurationError, match="unknown_outcome='retry' is not a policy"):
        EffectContract(name="c", operation_id=lambda a: "op", unknown_outcome="retry")


def test_bare_effect_gets_the_librarys_own_message():
    """@effect without parentheses names the tool and shows how to write it, sync and async."""

    def charge(customer_id: str) -> int:
        return 1

    async def notify(customer_id: str) -> int:
        return 1

    for func in (charge, notify):
        with pytest.raises(TypeError, match=r"@effect needs its settings, in parentheses") as info:
            effect(func)  # type: ignore[misc]
        assert func.__qualname__ in str(info.value)
        assert "@effect(operation_id=" in str(info.value)
        assert "missing" not in str(info.value)


def test_effect_without_operation_id_gets_the_librarys_own_message():
    """@effect() or @effect(name=...) without operation_id says what operation_id takes."""
    with pytest.raises(TypeError, match=r"needs operation_id=.*call_scoped") as info:
        effect(name="billing.charge")  # type: ignore[call-arg]
    assert "missing" not in str(info.value)
    with pytest.raises(TypeError, match=r"needs operation_id="):
        effect()  # type: ignore[call-arg]
