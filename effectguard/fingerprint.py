"""Canonical JSON and request fingerprints.

Canonical JSON is the one text form every stored or hashed value takes: object
keys sorted, no insignificant whitespace, UTF-8, finite numbers only. Only
``dict`` (with ``str`` keys), ``list``, ``tuple``, ``str``, ``int``, ``float``,
``bool`` and ``None`` are accepted; anything else is a :class:`TypeError`, raised
before anything is recorded, so two different requests can never share a text
form by accident (``{1: "a"}`` and ``{"1": "a"}`` would under plain ``json``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "REDACTED",
    "canonical_json",
    "check_json_value",
    "redact_arguments",
    "request_fingerprint",
]

#: What a redacted argument's value is replaced by wherever it is stored.
REDACTED = "[redacted]"

def check_json_value(value: Any, path: str = "$") -> None:
    """Raise ``TypeError`` naming the first part of ``value`` that is not canonical JSON."""
    if not _plainly_valid(value):
        _check(value, path)


# Every stored or hashed value passes through here several times per call, and
# almost all are plain dicts, lists and scalars: check those by exact type
# without building a path; anything else takes the full check, which names the
# offending part (and accepts subclasses and other mappings, as before).
_PLAIN = frozenset({str, int, bool, type(None)})


def _plainly_valid(value: Any) -> bool:
    """True when ``value`` is built of exact plain types only and is valid; False: check fully."""
    kind = type(value)
    if kind in _PLAIN:
        return True
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or (type(item) not in _PLAIN and not _plainly_valid(item)):
                return False
        return True
    if kind is list or kind is tuple:
        return all(type(item) in _PLAIN or _plainly_valid(item) for item in value)
    if kind is float:
        return math.isfinite(value)
    return False


def _check(value: Any, path: str) -> None:
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            msg = f"{path} is {value!r}; only finite numbers are JSON-encodable"
            raise TypeError(msg)
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                msg = f"{path} has a key {key!r} of type {type(key).__name__}; keys must be str"
                raise TypeError(msg)
            _check(item, f"{path}.{key}")
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check(item, f"{path}[{index}]")
        return
    msg = f"{path} is a {type(value).__name__}, which is not JSON-encodable"
    raise TypeError(msg)


# One encoder for every call: json.dumps with these options builds a new one each time.
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical_json(value: Any) -> str:
    """Return the canonical JSON text of ``value``; ``TypeError`` if it has none."""
    check_json_value(value)
    return _ENCODER.encode(value)


def _sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def redact_arguments(arguments: Mapping[str, Any], redact: Iterable[str]) -> dict[str, Any]:
    """Return a copy of ``arguments`` with every redacted value replaced by :data:`REDACTED`."""
    names = frozenset(redact)
    return {name: (REDACTED if name in names else value) for name, value in arguments.items()}


def request_fingerprint(
    contract_name: str,
    contract_version: int,
    arguments: Mapping[str, Any],
    provider_key: str | None,
    redact: Iterable[str] = (),
) -> str:
    """Return the sha256 fingerprint of one logical request.

    Two calls have the same fingerprint exactly when they name the same contract
    and version, pass equal arguments and forward the same provider key. A
    redacted argument takes part through the hash of its canonical JSON, so a
    changed secret still changes the fingerprint while the secret itself appears
    nowhere in what is stored.
    """
    names = frozenset(redact)
    hashed = {
        name: ({"sha256": _sha256_hex(canonical_json(value))} if name in names else value)
        for name, value in arguments.items()
    }
    document = {
        "arguments": hashed,
        "contract": contract_name,
        "provider_key": provider_key,
        "version": contract_version,
    }
    return _sha256_hex(canonical_json(document))
