"""Between SQLite rows and ledger records: mapping, chain hashing, the rows a write produces.

Driver-free: the SQLite ledger executes what these functions build, and so
does anything that must write rows exactly as the ledger would (the benchmark's
bulk builder), so there is one definition of a valid row and a valid chain.
Times are whole microseconds since the epoch (``*_us`` columns).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

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
)

__all__ = [
    "COLUMNS",
    "COLUMN_NAMES",
    "EVENT_COLUMNS",
    "EventRow",
    "Version",
    "changed_columns",
    "created",
    "event",
    "event_rows",
    "record",
    "transitioned",
    "version",
]

#: The operations table's columns, in the order every row tuple uses.
COLUMN_NAMES = (
    "operation_id",
    "contract",
    "contract_version",
    "fingerprint",
    "provider_key",
    "status",
    "attempts",
    "attempt_budget",
    "arguments",
    "output",
    "provider_operation_id",
    "reason",
    "evidence",
    "lease_token",
    "lease_owner",
    "lease_expires_us",
    "overlap",
    "created_us",
    "updated_us",
    "first_dispatched_us",
    "event_count",
    "event_head",
)
#: ``COLUMN_NAMES`` as a SQL column list.
COLUMNS = ", ".join(COLUMN_NAMES)
#: The events table's columns, in the order every event row tuple uses.
EVENT_COLUMNS = "operation_id, seq, type, from_status, to_status, attempt, at_us, evidence, hash"

#: One events-table row, in ``EVENT_COLUMNS`` order.
EventRow = tuple[str, int, str, str | None, str, int, int, str | None, bytes]


# Rows are read and written on every call; these lookups skip Enum.__call__ and
# reparsing the one lease owner a process writes again and again.
_STATUSES = {status.value: status for status in EffectStatus}


def _status(text: str) -> EffectStatus:
    # An unknown name still raises EffectStatus's own ValueError.
    return _STATUSES.get(text) or EffectStatus(text)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


@functools.lru_cache(maxsize=256)
def _owner(text: str) -> LeaseOwner:
    return LeaseOwner.from_json(json.loads(text))


@functools.lru_cache(maxsize=256)
def _owner_text(owner: LeaseOwner) -> str:
    return canonical_json(owner.to_json())


class Version(NamedTuple):
    """What a fenced write checks: the row's status, lease and event count."""

    status: EffectStatus
    lease_token: str | None
    lease_live: bool
    event_count: int


def version(row: Sequence[Any], now_us: int) -> Version:
    """Return what a fenced write checks of ``row`` (``COLUMN_NAMES`` order) at ``now_us``."""
    expires = row[15]
    return Version(
        _status(row[5]),
        row[13],
        row[13] is not None and expires is not None and expires > now_us,
        row[20],
    )


def record(row: Sequence[Any], now_us: int) -> OperationRecord:
    """Return the operation in ``row`` (``COLUMN_NAMES`` order), its lease judged at ``now_us``."""
    owner = row[14]
    expires = row[15]
    return OperationRecord(
        operation_id=row[0],
        contract=row[1],
        contract_version=row[2],
        fingerprint=row[3],
        provider_key=row[4],
        status=_status(row[5]),
        attempts=row[6],
        attempt_budget=row[7],
        arguments=json.loads(row[8]),
        output_json=row[9],
        provider_operation_id=row[10],
        reason=row[11],
        evidence=_loads(row[12]) or {},
        lease_token=row[13],
        lease_owner=None if owner is None else _owner(owner),
        lease_expires_at=None if expires is None else from_micros(expires),
        lease_live=row[13] is not None and expires is not None and expires > now_us,
        overlap=tuple(OverlapHolder.from_json(item) for item in _loads(row[16]) or ()),
        created_at=from_micros(row[17]),
        updated_at=from_micros(row[18]),
        first_dispatched_at=from_micros(row[19]),
        event_count=row[20],
        event_head=bytes(row[21]),
    )


def event(row: Sequence[Any]) -> EffectEvent:
    """Return the event in ``row`` (``EVENT_COLUMNS`` order)."""
    return EffectEvent(
        operation_id=row[0],
        seq=row[1],
        type=EventType(row[2]),
        from_status=None if row[3] is None else EffectStatus(row[3]),
        to_status=EffectStatus(row[4]),
        attempt=row[5],
        at=from_micros(row[6]),
        evidence=_loads(row[7]) or {},
        hash=bytes(row[8]),
    )


def event_rows(
    operation_id: str,
    events: Sequence[EventDraft],
    count: int,
    head: bytes | None,
    now_us: int,
) -> tuple[list[EventRow], int, bytes | None]:
    """Hash ``events`` onto the chain of ``count`` events ending at ``head``, all dated ``now_us``.

    Returns their rows (``EVENT_COLUMNS`` order), the new event count and the new chain head.
    """
    chained, count, head = chain_events(operation_id, events, count, head, now_us)
    rows: list[EventRow] = [
        (operation_id, seq, kind, from_, to, attempt, now_us, evidence, digest)
        for seq, kind, from_, to, attempt, evidence, digest in chained
    ]
    return rows, count, head


def created(
    operation: NewOperation, events: Sequence[EventDraft], now_us: int
) -> tuple[tuple[Any, ...], list[EventRow]]:
    """Return the row of ``operation`` as first claimed at ``now_us``, and its events' rows."""
    rows, count, head = event_rows(operation.operation_id, events, 0, None, now_us)
    lease = operation.lease
    values = (
        operation.operation_id,
        operation.contract,
        operation.contract_version,
        operation.fingerprint,
        operation.provider_key,
        EffectStatus.DISPATCHED.value,
        1,
        operation.attempt_budget,
        canonical_json(operation.arguments),
        None,
        None,
        None,
        None,
        lease.token,
        _owner_text(lease.owner),
        now_us + round(lease.seconds * 1_000_000),
        None,
        now_us,
        now_us,
        now_us,
        count,
        head or b"",
    )
    return values, rows


def transitioned(
    row: Sequence[Any], changes: Changes, events: Sequence[EventDraft], now_us: int
) -> tuple[dict[str, Any], list[EventRow]]:
    """Return ``row`` (``COLUMN_NAMES`` order) with ``changes`` and ``events`` applied.

    Both are dated ``now_us``. The result maps every column name to its new
    value, in ``COLUMN_NAMES`` order; the event rows extend the chain from the
    head kept on ``row``.
    """
    values = dict(zip(COLUMN_NAMES, row, strict=True))
    values.update(changed_columns(changes, now_us))
    rows, count, head = event_rows(
        values["operation_id"],
        events,
        values["event_count"],
        bytes(values["event_head"]) or None,
        now_us,
    )
    values.update(updated_us=now_us, event_count=count, event_head=head or b"")
    return values, rows


def changed_columns(changes: Changes, now_us: int) -> Mapping[str, Any]:
    """Return the columns ``changes`` sets, by name; a new lease runs from ``now_us``."""
    columns: dict[str, Any] = {"status": changes.status.value}
    if changes.lease is not UNSET:
        lease: Lease | None = changes.lease
        if lease is None:
            columns.update(lease_token=None, lease_owner=None, lease_expires_us=None)
        else:
            columns.update(
                lease_token=lease.token,
                lease_owner=_owner_text(lease.owner),
                lease_expires_us=now_us + round(lease.seconds * 1_000_000),
            )
    simple = {
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
