"""Canonical JSON and request fingerprints."""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from json import JSONDecodeError
from types import MappingProxyType

import pytest

from effectguard._fingerprint import (
    REDACTED,
    canonical_json,
    compact_encoder,
    read_json,
    redact_arguments,
    request_fingerprint,
)


def test_canonical_json_sorts_keys_and_drops_whitespace():
    """Equal values have one text form whatever their key order."""
    assert canonical_json({"b": [1, 2.5, None], "a": "é"}) == '{"a":"é","b":[1,2.5,null]}'
    assert canonical_json({"x": (1, 2)}) == canonical_json({"x": [1, 2]})


_ENCODED = [
    {"b": [1, -2.5, None, True, False], "a": {"é": '\u2028\x00"\\'}},
    [1e300, 0.1, -0.0, 10**30, "", {}, []],
    "plain",
    7,
]


@pytest.mark.parametrize("sort_keys", [True, False])
@pytest.mark.parametrize("value", _ENCODED)
def test_compact_encoder_writes_what_the_json_encoder_writes(value, sort_keys):
    """Built once, it writes json's own compact text, byte for byte."""
    options = {"sort_keys": sort_keys, "allow_nan": False}
    expected = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, **options)
    assert compact_encoder(**options)(value) == expected.encode(value)


@pytest.mark.parametrize(
    ("value", "error"), [({"a": math.nan}, ValueError), ({"a": object()}, TypeError)]
)
def test_compact_encoder_refuses_what_the_json_encoder_refuses(value, error):
    """No NaN without allow_nan, no object without a JSON form: json's own errors."""
    with pytest.raises(error):
        compact_encoder(sort_keys=True, allow_nan=False)(value)
    assert compact_encoder(sort_keys=True, allow_nan=True)({"a": math.inf}) == '{"a":Infinity}'


@pytest.mark.parametrize(
    "text",
    [
        '{"a":"é","b":[1,2.5,null,true]}',
        '"\\u00e9 \\ud83d\\ude00"',
        "0",
        "NaN",
        ' {"a":1} ',
        '{"a":1}\n',
        b'{"a":1}',
    ],
)
def test_read_json_returns_what_json_loads_returns(text):
    """The ledger's reader gives the very value ``json.loads`` gives, whitespace or not."""
    assert read_json(text) == json.loads(text) or math.isnan(read_json(text))
    assert type(read_json(text)) is type(json.loads(text))


@pytest.mark.parametrize("text", ["", "{", '{"a":1}x', "\ufeff{}", '{"a":}', "[1,]"])
def test_read_json_fails_as_json_loads_fails(text):
    """Text that is not one JSON value raises json.loads's own error, message and all."""
    with pytest.raises(JSONDecodeError) as expected:
        json.loads(text)
    with pytest.raises(JSONDecodeError) as found:
        read_json(text)
    assert str(found.value) == str(expected.value)


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


def test_fingerprints_are_stable_across_releases_and_mapping_types():
    """Stored fingerprints were computed by earlier releases: the value never changes.

    Pinned from the release before the plain-dict fast path; a mapping that is
    not a dict, or keys in another order, give the same fingerprint.
    """
    plain = "5402df17be7cfbbd29bc79286f92fe26a5ecd91b92087b68fd57d54c0af4e692"
    redacted = "882f30a9d2df5dd6f8feb6b4d1e7c2c7636cb56bb60ffcbacd080b9e16a1884b"
    arguments = {"amount": 5, "note": "é"}
    assert request_fingerprint("capture", 1, arguments, "k1") == plain
    assert request_fingerprint("capture", 1, {"note": "é", "amount": 5}, "k1") == plain
    assert request_fingerprint("capture", 1, MappingProxyType(arguments), "k1") == plain
    assert request_fingerprint("capture", 1, OrderedDict(arguments), "k1") == plain
    card = {"amount": 5, "card": "4242"}
    assert request_fingerprint("capture", 1, card, None, ["card"]) == redacted
    assert request_fingerprint("capture", 1, MappingProxyType(card), None, ["card"]) == redacted
