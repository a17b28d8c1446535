"""Canonical JSON and request fingerprints."""

from __future__ import annotations

import math

import pytest

from effectguard.fingerprint import (
    REDACTED,
    canonical_json,
    redact_arguments,
    request_fingerprint,
)


def test_canonical_json_sorts_keys_and_drops_whitespace():
    """Equal values have one text form whatever their key order."""
    assert canonical_json({"b": [1, 2.5, None], "a": "é"}) == '{"a":"é","b":[1,2.5,null]}'
    assert canonical_json({"x": (1, 2)}) == canonical_json({"x": [1, 2]})


@pytest.mark.parametrize(
    "value",
    [{1: "a"}, {"a": {1, 2}}, {"a": math.nan}, {"a": math.inf}, {"a": b"bytes"}, object()],
    ids=["int-key", "set", "nan", "inf", "bytes", "object"],
)
def test_values_without_a_canonical_form_are_type_errors(value):
    """Non-str keys, sets, bytes and non-finite numbers are refused, naming where."""
    with pytest.raises(TypeError, match=r"\$"):
        canonical_json(value)


def test_fingerprint_covers_contract_version_arguments_and_key():
    """Changing any of contract, version, arguments or key changes the fingerprint."""
    base = request_fingerprint("capture", 1, {"amount": 5}, "k1")
    assert base == request_fingerprint("capture", 1, {"amount": 5}, "k1")
    variants = {
        request_fingerprint("refund", 1, {"amount": 5}, "k1"),
        request_fingerprint("capture", 2, {"amount": 5}, "k1"),
        request_fingerprint("capture", 1, {"amount": 6}, "k1"),
        request_fingerprint("capture", 1, {"amount": 5}, "k2"),
        request_fingerprint("capture", 1, {"amount": 5}, None),
    }
    assert base not in variants
    assert len(variants) == 5


def test_redacted_values_count_by_hash_and_are_replaced_in_storage():
    """A redacted secret changes the fingerprint but never appears in the stored arguments."""
    one = request_fingerprint("send", 1, {"to": "a@x", "token": "s3cret"}, None, {"token"})
    two = request_fingerprint("send", 1, {"to": "a@x", "token": "other"}, None, {"token"})
    assert one != two
    assert redact_arguments({"to": "a@x", "token": "s3cret"}, {"token"}) == {
        "to": "a@x",
        "token": REDACTED,
    }
