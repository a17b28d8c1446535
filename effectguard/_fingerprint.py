"""Canonical JSON and request fingerprints.

Canonical JSON is the one text form every stored or hashed value takes: object
keys sorted, no insignificant whitespace, UTF-8, finite numbers only. Only
``dict`` (with ``str`` keys), ``list``, ``tuple``, ``str``, ``int``, ``float``,
``bool`` and ``None`` are accepted; anything else is a :class:`TypeError`, raised
before anything is recorded, so two different requests can never share a text
form by accident (``{1: "a"}`` and ``{"1": "a"}`` would under plain ``json``).
So are a string with a lone surrogate (such as U+D800, which has no UTF-8 form)
and a value nested more than :data:`MAX_JSON_DEPTH` levels deep (which would
exhaust the interpreter's recursion limit when encoded or decoded).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from effectguard.errors import InvalidRequestError

__all__ = [
    "MAX_JSON_DEPTH",
    "REDACTED",
    "arguments_json",
    "canonical_json",
    "check_json_value",
    "check_operation_id",
    "checked_json",
    "compact_encoder",
    "has_utf8",
    "operation_id_problem",
    "read_json",
    "redact_arguments",
    "request_fingerprint",
    "request_text",
]

#: What a redacted argument's value is replaced by wherever it is stored.
REDACTED = "[redacted]"

#: How deeply lists and objects may nest in a stored or hashed value. ``json``
#: encodes and decodes nesting by recursion, counted against the interpreter's
#: recursion limit (1,000 by default, shared with the caller's own stack), so a
#: deeper value would fail with ``RecursionError`` somewhere between the call and
#: a later replay; refusing it up front keeps that failure before anything is recorded.
MAX_JSON_DEPTH = 200

# The documents effectguard builds around a caller's value (a fingerprint's, an
# event's evidence) nest it a few levels deeper; callers' values are checked
# against MAX_JSON_DEPTH on the way in, so those documents never hit this limit.
_ENVELOPE_DEPTH = MAX_JSON_DEPTH + 16


def check_json_value(value: Any, path: str = "$", *, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raise ``TypeError`` naming the first part of ``value`` that is not canonical JSON.

    That includes a string (value or key) holding a lone surrogate and lists or
    objects nested more than ``max_depth`` levels deep.
    """
    if type(value) is dict and max_depth > 0:
        # _plainly_valid of a dict (arguments, evidence: most checks), its first level inline.
        for key, item in value.items():
            if type(key) is not str or not key.isascii():
                break
            kind = type(item)
            if kind is str:
                if not item.isascii():
                    break
            elif kind not in _PLAIN and not _plainly_valid(item, max_depth - 1):
                break
        else:
            return
    elif _plainly_valid(value, max_depth):
        return
    _check(value, path, max_depth, max_depth)


def operation_id_problem(operation_id: object) -> str | None:
    """Why ``operation_id`` cannot name an operation, or None when it can.

    An operation id is a ``str`` with at least one non-whitespace character, no
    NUL character (PostgreSQL cannot store one, C tools cut the text there) and
    no lone surrogate (it has no UTF-8 form, so no ledger can store it).
    """
    if not isinstance(operation_id, str):
        return f"must be a str, not {type(operation_id).__name__}"
    if not operation_id.strip():
        return f"must contain a non-whitespace character, not {operation_id!r}"
    if "\x00" in operation_id:
        return f"must not contain a NUL character (\\x00): {operation_id!r}"
    if not operation_id.isascii() and not has_utf8(operation_id):
        return f"must not contain a lone surrogate (it has no UTF-8 form): {operation_id!r}"
    return None


def check_operation_id(operation_id: object, what: str = "the operation id") -> str:
    """Return ``operation_id`` if it can name an operation; :class:`InvalidRequestError` if not.

    The message names ``what`` and the problem (see :func:`operation_id_problem`).
    """
    problem = operation_id_problem(operation_id)
    if problem is not None:
        msg = f"{what} {problem}; use printable text (nothing was recorded or sent)"
        raise InvalidRequestError(msg)
    return operation_id  # type: ignore[return-value]  # a str: operation_id_problem checked it


def has_utf8(text: str) -> bool:
    """True when ``text`` has a UTF-8 form (it holds no lone surrogate)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# Every stored or hashed value passes through here several times per call, and
# almost all are plain dicts, lists and scalars: check those by exact type
# without building a path; anything else takes the full check, which names the
# offending part (and accepts subclasses and other mappings, as before). A str
# takes the full check only when it is not ASCII, which is rare and cheap to test.
_PLAIN = frozenset({int, bool, type(None)})


def _plainly_valid(value: Any, depth: int) -> bool:
    """True when ``value`` is built of exact plain types only and is valid; False: check fully."""
    kind = type(value)
    if kind in _PLAIN:
        return True
    if kind is str:
        return bool(value.isascii())
    if kind is float:
        return math.isfinite(value)
    return depth > 0 and _plain_container(value, kind, depth - 1)


def _plain_container(value: Any, kind: type, depth: int) -> bool:
    """:func:`_plainly_valid` for an exact dict, list or tuple whose items are ``depth`` deep."""
    if kind is dict:
        for key in value:
            if type(key) is not str or not key.isascii():
                return False
        return _plain_items(value.values(), depth)
    if kind is list or kind is tuple:
        return _plain_items(value, depth)
    return False


def _plain_items(items: Iterable[Any], depth: int) -> bool:
    """:func:`_plainly_valid` of every item; an ASCII str, the commonest, checked in place."""
    # A loop, not all(<generator>): a generator would add a stack frame per level.
    for item in items:
        kind = type(item)
        if kind is str:
            if not item.isascii():
                return False
        elif kind not in _PLAIN and not _plainly_valid(item, depth):
            return False
    return True


def _check(value: Any, path: str, depth: int, limit: int) -> None:  # noqa: C901 - one branch per JSON type
    if value is None or isinstance(value, (bool, int)):
        return
    if isinstance(value, str):
        if not has_utf8(value):
            msg = f"{_short(path)} is a string with a lone surrogate, which has no UTF-8 form"
            raise TypeError(msg)
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            msg = f"{path} is {value!r}; only finite numbers are JSON-encodable"
            raise TypeError(msg)
        return
    if isinstance(value, (Mapping, list, tuple)) and depth <= 0:
        msg = (
            f"{_short(path)} is nested more than {limit} levels deep; "
            "flatten the value or store a reference to it"
        )
        raise TypeError(msg)
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                msg = f"{path} has a key {key!r} of type {type(key).__name__}; keys must be str"
                raise TypeError(msg)
            if not has_utf8(key):
                msg = f"{_short(path)} has a key {key!r} with a lone surrogate (no UTF-8 form)"
                raise TypeError(msg)
            _check(item, f"{path}.{key}", depth - 1, limit)
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check(item, f"{path}[{index}]", depth - 1, limit)
        return
    msg = f"{path} is a {type(value).__name__}, which is not JSON-encodable"
    raise TypeError(msg)


def _short(path: str, limit: int = 80) -> str:
    """``path``, its middle elided when it is long (a deeply nested value's path is)."""
    if len(path) <= limit:
        return path
    return f"{path[: limit // 2]}…{path[-limit // 2 :]}"


def compact_encoder(*, sort_keys: bool, allow_nan: bool) -> Callable[[Any], str]:
    """Return ``json.JSONEncoder(...).encode`` with no whitespace and ``ensure_ascii=False``.

    The same text as that method gives, for values without reference cycles:
    the encoder's cycle check is left out, so a cyclic value exhausts the
    recursion limit instead (effectguard encodes only values that passed
    :func:`check_json_value`, whose depth limit a cycle cannot pass, or values
    it built itself). Built once: ``encode`` builds its C encoder, and a
    closure, on every call, which was a tenth of a replay.
    """
    encoder = json.JSONEncoder(
        sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False, allow_nan=allow_nan
    )
    make: Any = getattr(json.encoder, "c_make_encoder", None)
    quote = getattr(json.encoder, "c_encode_basestring", None)
    try:
        # json.encoder's own call, positionally: markers (none), default, quoting, indent,
        # the two separators, sort_keys, skipkeys, allow_nan.
        skipkeys = False
        chunks = make(None, encoder.default, quote, None, ":", ",", sort_keys, skipkeys, allow_nan)
        probe = {"b": [1, -2.5, None, True, "é\n\u2028"], "a": {"z": 0, "y": ""}}
        if "".join(chunks(probe, 0)) != encoder.encode(probe):
            return encoder.encode  # not the C encoder this was written against
    except TypeError:  # no C accelerator, or one whose signature changed
        return encoder.encode
    join = "".join

    def encode(value: Any) -> str:
        return join(chunks(value, 0))

    return encode


_ENCODE = compact_encoder(sort_keys=True, allow_nan=False)


#: :func:`canonical_json` without its check, for a value already checked or built here
#: from checked parts: the same text, one walk of the value fewer.
checked_json: Callable[[Any], str] = _ENCODE


def canonical_json(value: Any) -> str:
    """Return the canonical JSON text of ``value``; ``TypeError`` if it has none."""
    check_json_value(value, max_depth=_ENVELOPE_DEPTH)
    return _ENCODE(value)


# The C scanner json.loads ends in, called directly: what the ledger reads back is
# canonical JSON it wrote itself, so the wrapper's checks (bytes, a BOM, whitespace
# around the value) only ever pass. Anything they would catch takes json.loads.
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set by its __init__


def read_json(text: str) -> Any:
    """Return ``json.loads(text)``: the same value, and the same error for text that is not JSON.

    Faster for the plain JSON text the ledger stores, which is read on every
    record built.
    """
    try:
        value, end = _SCAN(text, 0)
    except (StopIteration, ValueError, TypeError):
        return json.loads(text)
    if end != len(text):
        return json.loads(text)
    return value


# A JSON string as the canonical encoder writes it (ensure_ascii=False).
_quoted: Callable[[str], str] = (
    getattr(json.encoder, "c_encode_basestring", None) or json.encoder.py_encode_basestring
)


def arguments_json(arguments: dict[str, Any]) -> str:
    """The canonical JSON of a call's checked ``arguments``, a plain dict.

    ``arguments`` must have passed :func:`check_json_value`. This is what is
    stored when nothing is redacted, and what the fingerprint hashes.
    """
    return _ENCODE(arguments)


def request_text(
    contract_name: str, contract_version: int, arguments_text: str, provider_key: str | None
) -> str:
    """The document a request fingerprint hashes, written around the arguments' canonical JSON.

    The same text, byte for byte, as ``canonical_json`` gives the document
    :func:`request_fingerprint` builds for unredacted arguments; so a ledger's
    stored arguments, contract, version and key are enough to recompute it.
    """
    key = "null" if provider_key is None else _quoted(provider_key)
    return (
        f'{{"arguments":{arguments_text},"contract":{_quoted(contract_name)},'
        f'"provider_key":{key},"version":{contract_version:d}}}'
    )


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
    *,
    checked: bool = False,
) -> str:
    """Return the sha256 fingerprint of one logical request.

    Two calls have the same fingerprint exactly when they name the same contract
    and version, pass equal arguments and forward the same provider key. A
    redacted argument takes part through the hash of its canonical JSON, so a
    changed secret still changes the fingerprint while the secret itself appears
    nowhere in what is stored. ``checked=True`` says ``arguments`` already
    passed :func:`check_json_value`: they are not walked again (the result and
    any error are the same).
    """
    names = frozenset(redact)
    # Encoded, never kept: a plain dict with nothing to redact is encoded as it is.
    hashed = (
        arguments
        if not names and type(arguments) is dict
        else {
            name: ({"sha256": _sha256_hex(canonical_json(value))} if name in names else value)
            for name, value in arguments.items()
        }
    )
    document = {
        "arguments": hashed,
        "contract": contract_name,
        "provider_key": provider_key,
        "version": contract_version,
    }
    if checked:
        try:
            return _sha256_hex(_ENCODE(document))
        except (TypeError, ValueError):  # a key or name with no UTF-8 form: say which, below
            pass
    return _sha256_hex(canonical_json(document))
