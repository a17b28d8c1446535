"""How each kind of ledger column value is stored and read back, per backend.

:class:`Kind` says what a column holds; :func:`loader` and :func:`dumper` turn
a stored value of that kind into a record's and back. The only difference
between the backends is the time: SQLite stores whole microseconds since the
epoch (:func:`same_micros`), PostgreSQL an aware ``timestamptz``
(:func:`as_utc` on the way back). The column lists and the row mapper that
use these are :mod:`effectguard.ledger.schema`.

Driver-free: every value is already what the driver returns or accepts.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from effectguard.fingerprint import canonical_json, read_json
from effectguard.ledger import chain
from effectguard.model import EffectStatus, EventType, LeaseOwner, OverlapHolder

__all__ = ["STATUSES", "Convert", "Kind", "as_utc", "dumper", "loader", "same_micros", "status"]


class Kind(enum.Enum):
    """What a column holds, which decides how its value is stored and read back."""

    VALUE = "value"  # text or integer, stored as it is
    STATUS = "status"  # an EffectStatus (or None), by its value
    EVENT_TYPE = "event_type"  # an EventType, by its value
    DOCUMENT = "document"  # a JSON object, as canonical JSON text
    JSON_TEXT = "json_text"  # JSON text, stored and returned as the very same text
    EVIDENCE = "evidence"  # a JSON object; empty is stored as NULL
    OWNER = "owner"  # a LeaseOwner (or None), as canonical JSON text
    OVERLAP = "overlap"  # a tuple of OverlapHolders; empty is stored as NULL
    TIME = "time"  # an aware datetime (or None): microseconds, or timestamptz
    BYTES = "bytes"  # a hash


# Rows are read and written on every call: these skip Enum.__call__ and the
# reparsing of the one lease owner a process writes again and again.
#: Each EffectStatus by its stored value.
STATUSES = {status.value: status for status in EffectStatus}
_EVENT_TYPES = {kind.value: kind for kind in EventType}


def status(text: str) -> EffectStatus:
    """The :class:`EffectStatus` stored as ``text``."""
    # An unknown name still raises EffectStatus's own ValueError.
    return STATUSES.get(text) or EffectStatus(text)


def _event_type(text: str) -> EventType:
    return _EVENT_TYPES.get(text) or EventType(text)


@functools.lru_cache(maxsize=256)
def _owner(text: str) -> LeaseOwner:
    return LeaseOwner.from_json(read_json(text))


@functools.lru_cache(maxsize=256)
def _owner_text(owner: LeaseOwner) -> str:
    return canonical_json(owner.to_json())


def same_micros(micros: int) -> int:
    """A time stored as it is given: whole microseconds since the epoch (SQLite)."""
    return micros


def as_utc(value: datetime) -> datetime:
    """An aware datetime read back in UTC (PostgreSQL's ``timestamptz``)."""
    return value if value.tzinfo is UTC else value.astimezone(UTC)


#: How one value is converted; None: stored or read as it is.
Convert = Callable[[Any], Any] | None


def loader(kind: Kind, load_time: Callable[[Any], datetime]) -> Convert:
    """How a stored value of ``kind`` becomes a record's (None: as it is)."""
    return {
        Kind.VALUE: None,
        Kind.JSON_TEXT: None,
        Kind.STATUS: lambda text: None if text is None else status(text),
        Kind.EVENT_TYPE: _event_type,
        Kind.DOCUMENT: read_json,
        Kind.EVIDENCE: lambda text: (None if text is None else read_json(text)) or {},
        Kind.OWNER: lambda text: None if text is None else _owner(text),
        Kind.OVERLAP: lambda text: tuple(
            OverlapHolder.from_json(item) for item in (read_json(text) if text else ())
        ),
        Kind.TIME: lambda value: None if value is None else load_time(value),
        Kind.BYTES: bytes,
    }[kind]


def dumper(kind: Kind, store_time: Callable[[int], Any]) -> Convert:
    """How a record's value of ``kind`` is stored (None: as it is); a time may be micros."""
    return {
        Kind.VALUE: None,
        Kind.JSON_TEXT: None,
        Kind.STATUS: lambda status: None if status is None else status.value,
        Kind.EVENT_TYPE: lambda kind: kind.value,
        Kind.DOCUMENT: canonical_json,
        Kind.EVIDENCE: lambda value: canonical_json(dict(value)) if value else None,
        Kind.OWNER: lambda owner: None if owner is None else _owner_text(owner),
        Kind.OVERLAP: lambda holders: (
            canonical_json([holder.to_json() for holder in holders]) if holders else None
        ),
        Kind.TIME: lambda value: (
            value
            if value is None or (type(value) is int and store_time is same_micros)
            else store_time(value if type(value) is int else chain.to_micros(value))
        ),
        Kind.BYTES: bytes,
    }[kind]
