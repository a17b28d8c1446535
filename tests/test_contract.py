"""EffectContract validation: a bad contract fails when it is made, not when it is used."""

from __future__ import annotations

import pytest

from effectguard import ConfigurationError, EffectContract


def _contract(**overrides):
    options = {"name": "capture", "operation_id": lambda a: f"op:{a['id']}"}
    options.update(overrides)
    return EffectContract(**options)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"name": " "}, "name must be a non-empty string"),
        ({"version": 0}, "version must be an int >= 1"),
        ({"max_attempts": 0}, "max_attempts must be an int >= 1"),
        ({"lease_seconds": 0}, "lease_seconds must be > 0"),
        ({"handler_timeout": -1}, "handler_timeout must be > 0"),
        ({"provider_idempotency_guaranteed": True}, "needs a provider_idempotency_key"),
        ({"provider_key_retention_seconds": 0}, "provider_key_retention_seconds"),
        ({"operation_id": "not callable"}, "operation_id must be a callable"),
    ],
)
def test_invalid_contracts_are_configuration_errors(overrides, message):
    """Each invalid field is named in a ConfigurationError, which is also a ValueError."""
    with pytest.raises(ConfigurationError, match=message) as caught:
        _contract(**overrides)
    assert isinstance(caught.value, ValueError)


def test_identity_rejects_empty_operation_ids_and_keys():
    """An operation id or provider key that is not a non-empty string is refused."""
    with pytest.raises(ConfigurationError, match="operation_id must be a non-empty str"):
        _contract(operation_id=lambda a: "").identity({})
    with pytest.raises(ConfigurationError, match="provider idempotency key"):
        _contract(provider_idempotency_key=lambda a: None).identity({"id": 1})
    assert _contract(provider_idempotency_key=lambda a: "k").identity({"id": 1}) == ("op:1", "k")
