"""Between PostgreSQL rows and ledger records: mapping, chain hashing, changed columns.

Driver-free, so it reads like the SQLite ledger's equivalent: rows come in the
column order of :mod:`effectguard.ledger.postgres.sql`, times as aware datetimes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from effectguard.fingerprint import canonical_json
from effectguard.ledger.protocol import (
    UNSET,
    Changes,
    EventDraft,
    Lease,
    NewOperation,
    chain_events,
)
from effectguard.model import (
    EffectEvent,
    EffectStatus,
    EventType,
    LeaseOwner,
    OperationRecord,
    OverlapHolder,
    from_micros,
    to_micros,
)

__all__ = [
    "after",
    "chain_parameters",
    "changed_columns",
    "created",
    "event",
    "moment",
    "record",
    "utc",
]

_MICROSECOND = timedelta(microseconds=1)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def utc(value: datetime) -> datetime:
    """Return ``value`` in UTC (the same instant)."""
    return value if value.tzinfo is UTC else value.astimezone(UTC)


def moment(epoch_seconds: float) -> datetime:
    """Return the UTC instant ``epoch_seconds`` names, rounded to the microsecond like SQLite's."""
    return from_micros(round(epoch_seconds * 1_000_000))


def after(start: datetime, seconds: float) -> datetime:
    """Return ``seconds`` after ``start``, rounded to the microsecond like SQLite's."""
    return start + round(seconds * 1_000_000) * _MICROSECOND


def record(row: Sequence[Any], now: datetime) -> OperationRecord:
    """Return the operation in ``row``, its lease judged at ``now``."""
    owner = _loads(row[14])
    expires = None if row[15] is None else utc(row[15])
    return OperationRecord(
        operation_id=row[0],
        contract=row[1],
        contract_version=row[2],
        fingerprint=row[3],
        provider_key=row[4],
        status=EffectStatus(row[5]),
        attempts=row[6],
        attempt_budget=row[7],
        arguments=json.loads(row[8]),
        output_json=row[9],
        provider_operation_id=row[10],
        reason=row[11],
        evidence=_loads(row[12]) or {},
        lease_token=row[13],
        lease_owner=None if owner is None else LeaseOwner.from_json(owner),
        lease_expires_at=expires,
        lease_live=row[13] is not None and expires is not None and expires > now,
        overlap=tuple(OverlapHolder.from_json(item) for item in _loads(row[16]) or ()),
        created_at=utc(row[17]),
        updated_at=utc(row[18]),
        first_dispatched_at=utc(row[19]),
        event_count=row[20],
        event_head=bytes(row[21]),
    )


def event(row: Sequence[Any]) -> EffectEvent:
    """Return the event in ``row``."""
    return EffectEvent(
        operation_id=row[0],
        seq=row[1],
        type=EventType(row[2]),
        from_status=None if row[3] is None else EffectStatus(row[3]),
        to_status=EffectStatus(row[4]),
        attempt=row[5],
        at=utc(row[6]),
        evidence=_loads(row[7]) or {},
        hash=bytes(row[8]),
    )


def chain_parameters(
    operation_id: str,
    events: Sequence[EventDraft],
    count: int,
    head: bytes,
    at: datetime,
) -> dict[str, Any]:
    """Hash ``events`` onto the chain of ``count`` events ending at ``head``, all dated ``at``.

    Returns the statement parameters that insert them (``e_*`` arrays), with
    ``at``, ``new_count`` and ``new_head``.
    """
    chained, count, previous = chain_events(
        operation_id, events, count, head or None, to_micros(at)
    )
    names = ("seq", "type", "from", "to", "attempt", "evidence", "hash")
    columns: dict[str, list[Any]] = {name: [] for name in names}
    for values in chained:
        for name, value in zip(names, values, strict=True):
            columns[name].append(value)
    parameters: dict[str, Any] = {f"e_{name}": values for name, values in columns.items()}
    parameters.update(at=at, new_count=count, new_head=previous or b"")
    return parameters


def created(operation: NewOperation, events: Sequence[EventDraft], at: datetime) -> dict[str, Any]:
    """Return ``operation`` as first claimed at ``at``: every column, by name, and its events.

    The events are the ``e_*`` arrays of :func:`chain_parameters`, with ``at``.
    """
    parameters = chain_parameters(operation.operation_id, events, 0, b"", at)
    lease = operation.lease
    parameters.update(
        operation_id=operation.operation_id,
        contract=operation.contract,
        contract_version=operation.contract_version,
        fingerprint=operation.fingerprint,
        provider_key=operation.provider_key,
        status=EffectStatus.DISPATCHED.value,
        attempts=1,
        attempt_budget=operation.attempt_budget,
        arguments=canonical_json(operation.arguments),
        output=None,
        provider_operation_id=None,
        reason=None,
        evidence=None,
        lease_token=lease.token,
        lease_owner=canonical_json(lease.owner.to_json()),
        lease_expires_at=after(at, lease.seconds),
        overlap=None,
        created_at=at,
        updated_at=at,
        first_dispatched_at=at,
        event_count=parameters.pop("new_count"),
        event_head=parameters.pop("new_head"),
    )
    return parameters


def changed_columns(changes: Changes, now: datetime) -> dict[str, Any]:
    """Return the columns ``changes`` sets, by name; a new lease runs from ``now``."""
    columns: dict[str, Any] = {"status": changes.status.value}
    if changes.lease is not UNSET:
        lease: Lease | None = changes.lease
        if lease is None:
            columns.update(lease_token=None, lease_owner=None, lease_expires_at=None)
        else:
            columns.update(
                lease_token=lease.token,
                lease_owner=canonical_json(lease.owner.to_json()),
                lease_expires_at=after(now, lease.seconds),
            )
    simple: Mapping[str, Any] = {
        "attempts": changes.attempts,
        "attempt_budget": changes.attempt_budget,
        "output": changes.output_json,
        "provider_operation_id": changes.provider_operation_id,
        "reason": changes.reason,
    }
    columns.update({name: value for name, value in simple.items() if value is not UNSET})
    if changes.evidence is not UNSET:
        columns["evidence"] = canonical_json(dict(changes.evidence)) if changes.evidence else None
    if changes.overlap is not UNSET:
        holders = [holder.to_json() for holder in changes.overlap]
        columns["overlap"] = canonical_json(holders) if holders else None
    return columns
