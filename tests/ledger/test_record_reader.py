"""The hand-written row reader builds exactly the record the column-by-column loaders build.

``reader.record_reader`` spells the conversion out (and fills the record slot
by slot) because listing spends most of its time there; the generic loaders in
``values`` are the definition it must agree with, on every backend's rows.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from effectguard import EffectStatus
from effectguard._fingerprint import canonical_json
from effectguard._model import LeaseOwner, OperationRecord, OverlapHolder
from effectguard.ledger._rows import POSTGRES, SQLITE, Rows

OWNER = LeaseOwner(host="h", boot_id="b", pid_namespace="n", pid=7, start_time="1")
CREATED = 1_700_000_000_250_001
LIVE_AT = [field.name for field in dataclasses.fields(OperationRecord)].index("lease_live")
TOKEN = "token-1"  # noqa: S105 - a lease token, not a password


def _record(**changes: object) -> OperationRecord:
    """A record with every column set; the times in whole microseconds."""

    def at(micros: int) -> datetime:
        return datetime.fromtimestamp(micros // 1_000_000, UTC).replace(
            microsecond=micros % 1_000_000
        )

    base = OperationRecord(
        operation_id="pay:ü-1",
        contract="pay",
        contract_version=2,
        fingerprint="f" * 64,
        provider_key="key-1",
        status=EffectStatus.RECONCILING,
        attempts=2,
        attempt_budget=3,
        arguments={"amount": 5, "nested": {"list": [1, "é", None]}},
        output_json=canonical_json({"id": "ch_1"}),
        provider_operation_id="ch_1",
        reason="checking",
        evidence={"handler": "raised", "error": {"type": "Timeout"}},
        lease_token=TOKEN,
        lease_owner=OWNER,
        lease_expires_at=at(CREATED + 30_000_000),
        lease_live=True,
        overlap=(OverlapHolder("token-0", 1, OWNER),),
        created_at=at(CREATED),
        updated_at=at(CREATED + 5),
        first_dispatched_at=at(CREATED + 1),
        event_count=4,
        event_head=b"\x01" * 32,
    )
    return dataclasses.replace(base, **changes)


CASES = {
    "every-column": _record(),
    "times-equal": _record(
        updated_at=_record().created_at, first_dispatched_at=_record().created_at
    ),
    "dispatched-at-update": _record(first_dispatched_at=_record().updated_at),
    "no-lease": _record(
        lease_token=None, lease_owner=None, lease_expires_at=None, lease_live=False
    ),
    "empty": _record(
        status=EffectStatus.CONFIRMED,
        output_json=None,
        provider_key=None,
        provider_operation_id=None,
        reason=None,
        evidence={},
        overlap=(),
        lease_token=None,
        lease_owner=None,
        lease_expires_at=None,
        lease_live=False,
    ),
}


@pytest.mark.parametrize("rows", [SQLITE, POSTGRES], ids=["sqlite", "postgres"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_reader_agrees_with_the_column_loaders(rows: Rows, case: str) -> None:
    """Row in, record out: equal to the loaders' record, field by field, lease judged alike."""
    record = CASES[case]
    row = rows.row(record)
    # At creation, exactly at the lease's expiry (no longer live), and long after.
    expiry = record.lease_expires_at or record.created_at
    for now in (record.created_at, expiry, record.created_at.replace(year=2100)):
        stored_now = rows.store_time(round(now.timestamp() * 1_000_000))
        expires = row[rows.operation_columns.index(rows.name("lease_expires_at"))]
        decoded = rows.decoded(row)
        live = record.lease_token is not None and expires is not None and expires > stored_now
        # Built by the dataclass's own __init__: the reference the slot filling must match.
        expected = OperationRecord(*decoded[:LIVE_AT], live, *decoded[LIVE_AT:])
        assert rows.assembled(decoded, record.lease_token, expires, stored_now) == expected
        read = rows.record(row, stored_now)
        assert dataclasses.astuple(read) == dataclasses.astuple(expected)
        assert read == expected
        assert type(read) is OperationRecord
    if record.lease_expires_at is not None:
        at_expiry = rows.store_time(round(expiry.timestamp() * 1_000_000))
        assert rows.record(row, at_expiry).lease_live is False
    # Read back as it was written (the lease is live at its creation, not in 2100).
    assert rows.record(row, rows.store_time(CREATED)) == record


def test_a_read_record_is_frozen_like_any_other() -> None:
    """Filled slot by slot, the record still refuses assignment."""
    read = SQLITE.record(SQLITE.row(CASES["every-column"]), CREATED)
    with pytest.raises(dataclasses.FrozenInstanceError):
        read.status = EffectStatus.CONFIRMED  # type: ignore[misc]
