"""Keeping redacted argument values out of text that user code produced.

``redact=`` promises that a value is never stored. Exception messages, probe
evidence and outputs come from user code and may quote the value (``card 4242…
declined``), so every such text is scrubbed before the ledger or an observer
sees it: :func:`scrub_write` is applied to every row change and event the
executor writes, which covers the logs and observers too, since they only ever
see what was written.

What is masked, for each redacted argument (and each scalar inside a redacted
dict or list):

- a value of :data:`MIN_SUBSTRING` characters or more, wherever it occurs in a
  string, also inside a longer word; an all-digit one (a card number, as ``str``
  or ``int``) also when its digits are grouped by spaces or dashes
  (``4242 4242 4242 4242``);
- a shorter value (a 3-digit CVV) only as a whole token, not next to a letter or
  digit: masking every ``123`` inside ``order 91234`` would mangle unrelated text
  and, for a one-character value, everything;
- a JSON number equal to a redacted number, as a number.

Not masked: other spellings of the value (lower-cased, reformatted, a last-4
suffix, base64 or other encodings), ``None`` and booleans (never secret, and
masking ``True`` everywhere would only destroy text).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from effectguard._fingerprint import REDACTED, canonical_json, has_utf8
from effectguard.ledger._protocol import UNSET, Changes, EventDraft

__all__ = ["MASK", "MIN_SUBSTRING", "mend", "scrub", "scrub_write", "secrets_of"]

#: What a redacted value is replaced with: the marker stored for redacted arguments.
MASK = REDACTED

#: Values at least this long are masked wherever they occur; shorter ones as whole tokens only.
MIN_SUBSTRING = 6


def secrets_of(arguments: Mapping[str, Any], redact: Collection[str]) -> tuple[str, ...]:
    """The text forms of the redacted values in ``arguments``, longest first.

    A redacted dict or list contributes each scalar inside it. Longest first,
    so that a value containing another is masked whole.
    """
    found: set[str] = set()
    for name in redact:
        if name in arguments:
            _collect(arguments[name], found)
    found.discard("")
    return tuple(sorted(found, key=lambda text: (-len(text), text)))


def _collect(value: Any, found: set[str]) -> None:
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, Mapping):
        for item in value.values():
            _collect(item, found)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            _collect(item, found)
    elif isinstance(value, bytes):
        found.add(value.decode("utf-8", "replace"))
    else:
        found.add(str(value))


@functools.lru_cache(maxsize=256)
def _pattern(secrets: tuple[str, ...]) -> re.Pattern[str]:
    """One regex matching every secret as the module docstring says."""
    parts = []
    for secret in secrets:  # already longest first: the alternation prefers the longest
        if len(secret) < MIN_SUBSTRING:
            parts.append(rf"(?<![^\W_]){re.escape(secret)}(?![^\W_])")
        elif secret.isdigit():
            parts.append("[ -]?".join(re.escape(digit) for digit in secret))
        else:
            parts.append(re.escape(secret))
    return re.compile("|".join(parts))


def scrub(value: Any, secrets: tuple[str, ...]) -> Any:
    """Return ``value`` with every secret in its strings (keys too, nested) replaced by MASK."""
    if not secrets:
        return value
    if isinstance(value, str):
        return _pattern(secrets).sub(MASK, value)
    if isinstance(value, Mapping):
        return {scrub(key, secrets): scrub(item, secrets) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub(item, secrets) for item in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and str(value) in secrets:
        return MASK  # a redacted number quoted as a number
    return value


def scrub_write(
    secrets: tuple[str, ...], changes: Changes, events: Sequence[EventDraft]
) -> tuple[Changes, tuple[EventDraft, ...]]:
    """``changes`` and ``events`` with every secret masked in their reason, evidence and output.

    Reasons and evidence are also :func:`mend`-ed, so that no text a handler or
    probe produced can make the write itself fail.

    The stored output is masked too: ``redact=`` means never stored, and every
    caller, the live one included, receives the stored output.
    """
    whole = _whole(changes.reason) and _whole(changes.evidence)
    if not secrets and whole and all(_whole(event.evidence) for event in events):
        return changes, tuple(events)  # nothing to mask or mend: the common write
    updates: dict[str, Any] = {}
    if isinstance(changes.reason, str):
        updates["reason"] = mend(scrub(changes.reason, secrets))
    if changes.evidence is not UNSET:
        updates["evidence"] = mend(scrub(changes.evidence, secrets))
    if secrets and isinstance(changes.output_json, str):
        output = scrub(json.loads(changes.output_json), secrets)
        updates["output_json"] = canonical_json(output)
    scrubbed = tuple(
        dataclasses.replace(event, evidence=mend(scrub(event.evidence, secrets)))
        for event in events
    )
    return dataclasses.replace(changes, **updates), scrubbed


def _whole(value: Any) -> bool:
    """True when :func:`mend` would leave every string of ``value`` as it is (UNSET: nothing)."""
    if isinstance(value, str):
        return has_utf8(value)
    if isinstance(value, Mapping):
        return all(_whole(key) and _whole(item) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return all(_whole(item) for item in value)
    return True


def mend(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings written as a backslash escape.

    An exception's message can hold one (text decoded from bytes with
    ``surrogateescape``); UTF-8 cannot, so recording the outcome would fail after
    the handler ran and leave the row DISPATCHED. Only reasons and evidence are
    mended: an output is the provider's data, stored exactly or not at all.
    """
    if isinstance(value, str):
        if has_utf8(value):
            return value
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, Mapping):
        return {mend(key): mend(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [mend(item) for item in value]
    return value
