"""Reading a stored operation row back as an :class:`~effectguard.model.OperationRecord`.

Driver-free and backend-neutral: the backends differ only in how a time is
loaded (``load_time``). :mod:`effectguard.ledger.schema` checks, at import,
that its column list is the one :data:`READER_ORDER` names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from effectguard.fingerprint import read_json
from effectguard.ledger.values import STATUSES, Kind, loader, status
from effectguard.model import OperationRecord

__all__ = ["READER_ORDER", "filled", "record_reader"]

#: The columns :func:`record_reader` unpacks, in order, with their kinds (the schema checks them).
READER_ORDER = (
    ("operation_id", Kind.VALUE), ("contract", Kind.VALUE), ("contract_version", Kind.VALUE),
    ("fingerprint", Kind.VALUE), ("provider_key", Kind.VALUE), ("status", Kind.STATUS),
    ("attempts", Kind.VALUE), ("attempt_budget", Kind.VALUE), ("arguments", Kind.DOCUMENT),
    ("output_json", Kind.JSON_TEXT), ("provider_operation_id", Kind.VALUE),
    ("reason", Kind.VALUE), ("evidence", Kind.EVIDENCE), ("lease_token", Kind.VALUE),
    ("lease_owner", Kind.OWNER), ("lease_expires_at", Kind.TIME), ("overlap", Kind.OVERLAP),
    ("created_at", Kind.TIME), ("updated_at", Kind.TIME), ("first_dispatched_at", Kind.TIME),
    ("event_count", Kind.VALUE), ("event_head", Kind.BYTES),
)  # fmt: skip


# Records are filled slot by slot: the frozen dataclass's own __init__ costs a quarter
# more, and listing a thousand operations spends most of its time building records.
_SETTERS = tuple(
    getattr(OperationRecord, field.name).__set__ for field in dataclasses.fields(OperationRecord)
)
_BLANK = object.__new__


def filled(values: Iterable[Any]) -> OperationRecord:
    """Return the record whose fields are ``values``, in field order, exactly as given."""
    record: OperationRecord = _BLANK(OperationRecord)
    for store, value in zip(_SETTERS, values, strict=True):
        store(record, value)
    return record


def record_reader(
    load_time: Callable[[Any], datetime],
) -> Callable[[Sequence[Any], Any], OperationRecord]:
    """Return the row-to-record conversion, spelled out column by column.

    The record has each column's :func:`~effectguard.ledger.values.loader`
    applied, and its lease judged live when the stored expiry is after
    ``now`` (in the same storage form). Written out rather than looped over
    the loaders because listing a thousand operations spends most of its
    time here.
    """
    load_owner = loader(Kind.OWNER, load_time)
    load_overlap = loader(Kind.OVERLAP, load_time)
    if load_owner is None or load_overlap is None:
        msg = "a lease owner and an overlap are always converted when read"
        raise TypeError(msg)
    loads = read_json

    def read(row: Sequence[Any], now: Any) -> OperationRecord:
        (
            operation_id, contract, contract_version, fingerprint, provider_key, stored_status,
            attempts, attempt_budget, arguments, output_json, provider_operation_id, reason,
            evidence, lease_token, lease_owner, lease_expires, overlap, created, updated,
            first_dispatched, event_count, event_head,
        ) = row  # fmt: skip
        created_at = load_time(created)
        return filled(
            (
                operation_id,
                contract,
                contract_version,
                fingerprint,
                provider_key,
                STATUSES.get(stored_status) or status(stored_status),
                attempts,
                attempt_budget,
                loads(arguments),
                output_json,
                provider_operation_id,
                reason,
                (None if evidence is None else loads(evidence)) or {},
                lease_token,
                None if lease_owner is None else load_owner(lease_owner),
                None if lease_expires is None else load_time(lease_expires),
                lease_token is not None and lease_expires is not None and lease_expires > now,
                () if overlap is None else load_overlap(overlap),
                created_at,
                created_at if updated == created else load_time(updated),
                created_at if first_dispatched == created else load_time(first_dispatched),
                event_count,
                bytes(event_head),
            )
        )

    return read
