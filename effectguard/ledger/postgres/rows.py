"""The PostgreSQL ledger's statement parameters, built from the shared row schema.

Driver-free. Rows themselves (columns, mapping, changed columns) are
:data:`effectguard.ledger.schema.POSTGRES`; this module only shapes them into
the named parameters of :mod:`effectguard.ledger.postgres.sql`'s statements,
whose events go in as one JSON parameter, and converts times.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from effectguard.fingerprint import compact_encoder
from effectguard.ledger import anchor, chain
from effectguard.ledger.protocol import EventDraft, NewOperation
from effectguard.ledger.schema import POSTGRES

__all__ = ["after", "chain_parameters", "created", "moment", "utc"]

_MICROSECOND = timedelta(microseconds=1)
# One encoder for every write: json.dumps with options builds a new one per call.
_EVENTS_JSON = compact_encoder(sort_keys=False, allow_nan=True)
# Where an event row holds its hash.
_HASH = POSTGRES.event_columns.index("hash")


def utc(value: datetime) -> datetime:
    """Return ``value`` in UTC (the same instant)."""
    return value if value.tzinfo is UTC else value.astimezone(UTC)


def moment(epoch_seconds: float) -> datetime:
    """Return the UTC instant ``epoch_seconds`` names, rounded to the microsecond like SQLite's."""
    return chain.from_micros(round(epoch_seconds * 1_000_000))


def after(start: datetime, seconds: float) -> datetime:
    """Return ``seconds`` after ``start``, rounded to the microsecond like SQLite's."""
    return start + round(seconds * 1_000_000) * _MICROSECOND


def _events(event_rows: Sequence[Sequence[Any]]) -> str:
    """The ``events`` parameter that inserts ``event_rows``: one JSON array of objects.

    One text parameter, not one array per column: psycopg picks a dumper for
    every list on every execution, which cost more than the JSON. Texts stay
    JSON strings (the server decodes them to the exact text hashed) and the
    hash goes as hex.
    """
    # The keys are the ones effectguard.ledger.postgres.sql's statements read; the
    # time is left out (one parameter, ``at``, dates all of a statement's events).
    documents = [
        {
            "s": seq,
            "t": kind,
            "f": from_,
            "o": to,
            "a": attempt,
            "v": evidence,
            "h": digest.hex(),
            "c": commits,
        }
        for _, seq, kind, from_, to, attempt, _, evidence, digest, commits in event_rows
    ]
    return _EVENTS_JSON(documents)


def chain_parameters(
    operation_id: str,
    events: Sequence[EventDraft],
    count: int,
    head: bytes,
    at: datetime,
    commits: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Hash ``events`` onto the chain of ``count`` events ending at ``head``, all dated ``at``.

    The first event carries ``commits``. Returns the statement parameters that
    insert them (``e_*`` arrays), with ``at``, ``new_count`` and ``new_head``.
    """
    event_rows, count, previous = POSTGRES.appended(
        operation_id, events, count, head or None, chain.to_micros(at), commits
    )
    parameters: dict[str, Any] = {"events": _events(event_rows)}
    parameters.update(at=at, new_count=count, new_head=previous or b"")
    return parameters


def created(operation: NewOperation, events: Sequence[EventDraft], at: datetime) -> dict[str, Any]:
    """Return ``operation`` as first claimed at ``at``: every column, by name, and its events.

    The events are the ``events`` parameter of :func:`chain_parameters`, with ``at``.
    """
    values, event_rows = POSTGRES.created(operation, events, chain.to_micros(at))
    parameters = dict(zip(POSTGRES.operation_columns, values, strict=True))
    parameters.update(events=_events(event_rows), at=at)
    # The anchor commits to the claim's first event (see effectguard.ledger.anchor).
    claim_hash = bytes(event_rows[0][_HASH]) if event_rows else b""
    parameters.update(anchor_item=anchor.item(operation.operation_id, claim_hash))
    return parameters
