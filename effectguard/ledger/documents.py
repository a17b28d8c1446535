"""The document an event's chain hash covers, and the hash itself.

:func:`chain_document` is the document as a dict, which ``verify`` encodes
with the general canonical-JSON encoder; :func:`document_text` writes the
same text, byte for byte, from a fixed template, which is what every write
hashes (issue 15: the general encoder was a measurable part of each call).
Times are whole microseconds since the epoch (:func:`to_micros`,
:func:`from_micros`). :mod:`effectguard.ledger.chain` builds chains from these.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from effectguard.fingerprint import canonical_json
from effectguard.model import EffectEvent, EffectStatus, EventType

__all__ = [
    "GENESIS",
    "chain_document",
    "chain_hash",
    "document_text",
    "event_document",
    "from_micros",
    "to_micros",
]

#: What an operation's first event is linked to, in place of a predecessor's hash.
GENESIS = b"effectguard-event-chain-v1"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def from_micros(micros: int) -> datetime:
    """Return the timezone-aware UTC datetime ``micros`` microseconds after the epoch."""
    # Positionally, as microseconds alone: timedelta carries them into seconds and days
    # exactly (integer arithmetic), and a keyword or a divmod first costs a quarter more.
    return _EPOCH + timedelta(0, 0, micros)


def to_micros(moment: datetime) -> int:
    """Return whole microseconds since the epoch, exactly (no float rounding)."""
    return (moment - _EPOCH) // _MICROSECOND


def chain_document(
    operation_id: str,
    seq: int,
    type_: EventType,
    from_status: EffectStatus | None,
    to_status: EffectStatus,
    attempt: int,
    at_micros: int,
    evidence: Mapping[str, Any],
    commits: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Return the document an event's chain hash is computed over.

    ``commits`` (see :func:`commitments`) is hashed only when there are some,
    so every event written before they existed keeps its hash.
    """
    document = {
        "at": at_micros,
        "attempt": attempt,
        "evidence": dict(evidence),
        "from": None if from_status is None else from_status.value,
        "operation_id": operation_id,
        "seq": seq,
        "to": to_status.value,
        "type": type_.value,
    }
    if commits:
        document["commits"] = dict(commits)
    return document


def event_document(event: EffectEvent) -> dict[str, Any]:
    """Return the document ``event``'s hash covers."""
    return chain_document(
        event.operation_id,
        event.seq,
        event.type,
        event.from_status,
        event.to_status,
        event.attempt,
        to_micros(event.at),
        event.evidence,
        event.commits,
    )


def chain_hash(previous: bytes | None, document: Mapping[str, Any] | str) -> bytes:
    """Return the hash that links the event ``document`` to the hash of the event before it.

    ``previous`` is None for an operation's first event. ``document`` is the
    dict :func:`chain_document` returns, or its canonical JSON text as
    :func:`document_text` writes it (the same bytes, so the same hash).
    Editing, reordering or removing any event changes every hash after it, so
    the head kept on the operation no longer matches.
    """
    text = document if isinstance(document, str) else canonical_json(document)
    digest = hashlib.sha256(previous if previous is not None else GENESIS)
    digest.update(text.encode("utf-8"))
    return digest.digest()


# A JSON string exactly as the canonical encoder writes it (ensure_ascii=False).
_quoted: Any = (
    getattr(json.encoder, "c_encode_basestring", None) or json.encoder.py_encode_basestring
)
_STATUS_TEXT = {status: _quoted(status.value) for status in EffectStatus}
_TYPE_TEXT = {kind: _quoted(kind.value) for kind in EventType}


def document_text(
    operation_id: str,
    seq: int,
    type_: EventType,
    from_status: EffectStatus | None,
    to_status: EffectStatus,
    attempt: int,
    at_micros: int,
    evidence_json: str | None,
    commits_json: str | None = None,
) -> str:
    """Return ``canonical_json(chain_document(...))`` written from a fixed template.

    The same text, byte for byte, as the general encoder gives the dict: the
    keys in sorted order, no whitespace, ``evidence_json`` and
    ``commits_json`` being the canonical JSON of the evidence and the
    commitments (None: none), so a chain written either way verifies either way.
    """
    if type(seq) is not int or type(attempt) is not int or type(at_micros) is not int:
        # bool or an int subclass: the general encoder decides how it is written.
        commits = None if commits_json is None else json.loads(commits_json)
        return canonical_json(
            chain_document(
                operation_id,
                seq,
                type_,
                from_status,
                to_status,
                attempt,
                at_micros,
                json.loads(evidence_json) if evidence_json else {},
                commits,
            )
        )
    source = "null" if from_status is None else _STATUS_TEXT[from_status]
    carried = f'"commits":{commits_json},' if commits_json and commits_json != "{}" else ""
    return (
        f'{{"at":{at_micros},"attempt":{attempt},{carried}"evidence":{evidence_json or "{}"},'
        f'"from":{source},"operation_id":{_quoted(operation_id)},"seq":{seq},'
        f'"to":{_STATUS_TEXT[to_status]},"type":{_TYPE_TEXT[type_]}}}'
    )
