"""Keeping redacted argument values out of text that user code produced.

``redact=`` promises that a value is never stored. Exception messages and
probe evidence come from user code and may quote the value (``card 4242…
declined``), so every such text is scrubbed before the ledger or an observer
sees it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

__all__ = ["MASK", "scrub", "secrets_of"]

#: What a redacted value is replaced with.
MASK = "[redacted]"


def secrets_of(arguments: Mapping[str, Any], redact: Collection[str]) -> tuple[str, ...]:
    """The text forms of the redacted values in ``arguments``, longest first.

    Longest first, so that a value containing another is masked whole.
    """
    found = {str(arguments[name]) for name in redact if name in arguments}
    found.discard("")
    return tuple(sorted(found, key=len, reverse=True))


def scrub(value: Any, secrets: tuple[str, ...]) -> Any:
    """Return ``value`` with every secret in its strings (keys too, nested) replaced by MASK."""
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, MASK)
        return value
    if isinstance(value, Mapping):
        return {scrub(key, secrets): scrub(item, secrets) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub(item, secrets) for item in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and str(value) in secrets:
        return MASK  # a redacted number quoted as a number
    return value
