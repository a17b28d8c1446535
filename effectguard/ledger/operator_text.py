"""Keeping an operation's redacted values out of what an operator writes about it.

An operator resolving an operation may paste a provider's message into the
reason (``customer confirmed card 4242 4242 4242 4242, cvv 123``). The ledger
never held the redacted values, only the request fingerprint, which covers
them by hash; so the operator's text is checked against that fingerprint: each
assignment of candidate tokens of the text to the redacted arguments is hashed
exactly as the request was, and the tokens of a matching assignment are masked.

The limits, by construction: every redacted argument of the operation must
appear in the text, each as one token (a word, a run of letters and digits,
or digits grouped by spaces or dashes), as the ``str`` or ``int`` it was
passed as; a redacted dict or list is never recognised. Past
:data:`MAX_ASSIGNMENTS` assignments (many redacted arguments, a long text) no
check is made. A text that quotes only some of the redacted values (the CVV
alone) cannot be recognised, since no fingerprint covers it alone.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from typing import Any

from effectguard.fingerprint import REDACTED, request_fingerprint
from effectguard.model import OperationRecord

__all__ = ["MAX_ASSIGNMENTS", "hide_redacted"]

#: Fingerprints tried at most per resolution (about a tenth of a second of hashing).
MAX_ASSIGNMENTS = 20_000
#: As :data:`effectguard.executor.redaction.MIN_SUBSTRING`.
_MIN_SUBSTRING = 6

_TOKENS = (
    re.compile(r"[^\s\"'`,;:!?()\[\]{}<>]+"),  # a word, punctuation around it removed
    re.compile(r"[^\W_]+"),  # a run of letters and digits
    re.compile(r"\d(?:[ -]?\d)+"),  # digits, maybe grouped by spaces or dashes
)


def hide_redacted(
    record: OperationRecord, audit: Mapping[str, Any], output: Any = None
) -> tuple[dict[str, Any], Any]:
    """``audit`` and ``output`` with every token that is a redacted value of ``record`` masked.

    See the module's docstring for what can be recognised.
    """
    names = sorted(name for name, value in record.arguments.items() if value == REDACTED)
    if not names:
        return dict(audit), output
    spellings: dict[Any, set[str]] = {}
    for text in _strings(list(audit.values()), output):
        _candidates(text, spellings)
    for number in _integers(output):
        spellings.setdefault(number, set()).add(str(number))
    values = list(spellings)
    if not values or len(values) ** len(names) > MAX_ASSIGNMENTS:
        return dict(audit), output
    found: set[str] = set()
    for assignment in itertools.product(values, repeat=len(names)):
        arguments = {**record.arguments, **dict(zip(names, assignment, strict=True))}
        fingerprint = request_fingerprint(
            record.contract, record.contract_version, arguments, record.provider_key, names
        )
        if fingerprint == record.fingerprint:
            for value in assignment:
                found |= spellings[value]
            break
    if not found:
        return dict(audit), output
    ordered = sorted(found, key=len, reverse=True)
    return {key: _mask(value, ordered) for key, value in audit.items()}, _mask(output, ordered)


def _candidates(text: str, spellings: dict[Any, set[str]]) -> None:
    for pattern in _TOKENS:
        for match in pattern.finditer(text):
            spelled = match.group().rstrip(".")
            value = re.sub(r"[ -]", "", spelled) if pattern is _TOKENS[2] else spelled
            if not value:
                continue
            spellings.setdefault(value, set()).add(spelled)
            if value.isdigit() and (value == "0" or not value.startswith("0")):
                spellings.setdefault(int(value), set()).add(spelled)


def _strings(*values: Any) -> Iterable[str]:
    for value in values:
        if isinstance(value, str):
            yield value
        elif isinstance(value, Mapping):
            yield from _strings(*value.keys(), *value.values())
        elif isinstance(value, (list, tuple)):
            yield from _strings(*value)


def _integers(value: Any) -> Iterable[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _integers(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _integers(item)


def _mask(value: Any, found: list[str]) -> Any:
    if isinstance(value, str):
        # A short value (a CVV) is masked as a whole token only, as the executor masks it.
        parts = (
            re.escape(s) if len(s) >= _MIN_SUBSTRING else rf"(?<![^\W_]){re.escape(s)}(?![^\W_])"
            for s in found
        )
        return re.sub("|".join(parts), REDACTED, value)
    if isinstance(value, Mapping):
        return {_mask(key, found): _mask(item, found) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_mask(item, found) for item in value]
    if isinstance(value, int) and not isinstance(value, bool) and str(value) in found:
        return REDACTED
    return value
