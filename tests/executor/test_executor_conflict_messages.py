"""A fingerprint conflict says what differs, and never shows a redacted value."""

from __future__ import annotations

import asyncio

import pytest
from support import ARGS, capture_contract

from effectguard import EffectExecutor, OperationConflictError
from effectguard.testkit import FakePaymentProvider

SECRET = "tok_live_4242424242424242"  # noqa: S105 - a fake card token, never a credential


def test_conflict_names_the_argument_that_differs_with_both_values(ledger):
    """Reusing an id with another amount names amount_cents, stored and requested; no dispatch."""
    provider = FakePaymentProvider()
    executor = EffectExecutor(ledger)
    contract = capture_contract(provider)
    executor.execute(contract, {**ARGS, "amount_cents": 1000}, provider.handler)

    with pytest.raises(OperationConflictError) as info:
        executor.execute(contract, {**ARGS, "amount_cents": 2500}, provider.handler)

    assert "amount_cents: stored 1000, this call 2500" in str(info.value)
    assert info.value.differences == ("amount_cents: stored 1000, this call 2500",)
    assert provider.requests == 1
    assert provider.committed() == 1


def test_conflict_from_an_async_call_names_the_difference_too(ledger):
    """execute_async raises the same explained conflict, before any dispatch."""
    provider = FakePaymentProvider()
    executor = EffectExecutor(ledger)
    contract = capture_contract(provider)
    executor.execute(contract, ARGS, provider.handler)

    with pytest.raises(OperationConflictError, match="amount_cents") as info:
        asyncio.run(executor.execute_async(contract, {**ARGS, "amount_cents": 7}, provider.handler))
    assert "amount_cents: stored 1999, this call 7" in str(info.value)
    assert provider.committed() == 1


def test_conflict_on_a_redacted_argument_says_it_differs_without_its_value(ledger):
    """Only a redacted card token differs: the error says so from the hashes, and shows no value."""
    provider = FakePaymentProvider()
    executor = EffectExecutor(ledger)
    contract = capture_contract(provider, redact=frozenset({"card_token"}))
    executor.execute(contract, {**ARGS, "card_token": "tok_old_1111"}, provider.handler)

    with pytest.raises(OperationConflictError) as info:
        executor.execute(contract, {**ARGS, "card_token": SECRET}, provider.handler)

    message = str(info.value)
    assert "redacted card_token: differs" in message
    assert SECRET not in message
    assert "tok_old_1111" not in message
    assert provider.committed() == 1


def test_a_visible_difference_does_not_claim_an_unchanged_secret_differs(ledger):
    """The amount differs and the secret does not: only the amount is named."""
    provider = FakePaymentProvider()
    executor = EffectExecutor(ledger)
    contract = capture_contract(provider, redact=frozenset({"card_token"}))
    executor.execute(contract, {**ARGS, "card_token": SECRET}, provider.handler)

    with pytest.raises(OperationConflictError) as info:
        executor.execute(
            contract, {**ARGS, "amount_cents": 5, "card_token": SECRET}, provider.handler
        )

    assert info.value.differences == ("amount_cents: stored 1999, this call 5",)
    assert SECRET not in str(info.value)
    assert provider.committed() == 1


def test_conflict_names_a_changed_contract_version(ledger):
    """The same arguments under a new contract version: the version is what differs."""
    provider = FakePaymentProvider()
    executor = EffectExecutor(ledger)
    executor.execute(capture_contract(provider), ARGS, provider.handler)

    with pytest.raises(OperationConflictError, match="contract version: stored 1, this call 2"):
        executor.execute(capture_contract(provider, version=2), ARGS, provider.handler)
    assert provider.committed() == 1
