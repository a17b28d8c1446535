"""What an event commits to of its operation's row, so that ``verify`` can check the row.

The first event of every write carries ``commits``: the operation fields that
write stored, small ones as they are and large ones as a digest. The chain
hashes them with the event (:mod:`effectguard.ledger.chain`), and ``verify``
compares them with the row (:func:`effectguard.ledger.chain.check_row`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from effectguard.fingerprint import canonical_json

__all__ = ["COMMITTED", "commitments", "digest"]


#: The operation fields a write commits to, in the event it appends first.
COMMITTED = (
    "fingerprint",
    "provider_key",
    "attempts",
    "attempt_budget",
    "arguments",
    "output",
    "provider_operation_id",
    "lease",
)
_AS_STORED = ("provider_key", "attempts", "attempt_budget", "provider_operation_id")
# Digests are cut to 64 bits: every event carries some, and the chain is tamper-evidence
# against edits made without effectguard, not a defence against forged collisions.
_DIGEST_HEX = 16


def digest(text: str | None) -> str | None:
    """Return a digest (16 hex digits of SHA-256) of ``text`` exactly as stored, None for None."""
    if text is None:
        return None
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:_DIGEST_HEX]


def commitments(columns: Mapping[str, Any]) -> dict[str, Any]:
    """Return what a write commits to, from the operation columns it stores, by name, as stored.

    Small values are kept as they are; the fingerprint, the arguments, the
    output and the lease (token and owner) as a :func:`digest` of their stored
    text. Only the columns given are committed: a claim gives them all, a
    transition those it changes.
    """
    found = {name: columns[name] for name in _AS_STORED if name in columns}
    if "fingerprint" in columns:
        found["fingerprint"] = digest(columns["fingerprint"])
    if "arguments" in columns:
        found["arguments"] = digest(columns["arguments"])
    if "output" in columns:
        found["output"] = digest(columns["output"])
    if "lease_token" in columns:
        token = columns["lease_token"]
        found["lease"] = (
            None if token is None else digest(canonical_json([token, columns["lease_owner"]]))
        )
    return found
