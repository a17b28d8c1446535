"""Each fact of the ledger has one home: the row schema, the event chain, and bulk_load on it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from _ledger_samples import TOKEN_A, event, operation

from effectguard import EffectLedger, EffectStatus, InvalidRequestError, SQLiteEffectLedger
from effectguard._model import EffectEvent, OperationRecord
from effectguard.ledger import Changes, Expect
from effectguard.ledger import _chain as chain
from effectguard.ledger import _rows as schema


def _stored_columns(backend: str, target: str) -> dict[str, tuple[str, ...]]:
    """The columns of both tables as the database itself lists them, in order."""
    tables = ("operations", "events")
    if backend == "sqlite":
        conn = sqlite3.connect(target)
        try:
            return {
                table: tuple(row[1] for row in conn.execute(f"PRAGMA table_info({table})"))
                for table in tables
            }
        finally:
            conn.close()
    import psycopg  # noqa: PLC0415 - only the PostgreSQL run needs it

    from effectguard.ledger.postgres import split_target  # noqa: PLC0415 - needs psycopg

    conninfo, name = split_target(target, None)
    with psycopg.connect(conninfo) as conn:
        return {
            table: tuple(
                row[0]
                for row in conn.execute(
                    "SELECT column_name FROM information_schema.columns"
                    " WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                    (name, table),
                )
            )
            for table in tables
        }


def test_both_backends_store_the_schema_modules_columns(ledger, backend, ledger_target):
    """Each backend's tables have exactly the schema module's columns, in its order."""
    ledger.claim(operation())
    rows = schema.SQLITE if backend == "sqlite" else schema.POSTGRES
    assert rows.operation_columns == tuple(
        column.name_in(backend) for column in schema.OPERATION_COLUMNS
    )
    assert _stored_columns(backend, ledger_target) == {
        "operations": rows.operation_columns,
        "events": rows.event_columns,
    }


def test_the_postgres_statements_take_their_columns_from_the_schema_module():
    """The PostgreSQL SQL builds its column lists from the schema module, not a copy."""
    sql = pytest.importorskip("effectguard.ledger.postgres")
    assert sql.OPERATION_COLUMNS is schema.POSTGRES.operation_columns
    assert set(sql.SETTABLE) == set(schema.POSTGRES.operation_columns[1:])


def test_a_record_survives_the_row_mapper_both_ways(ledger, backend):
    """row() then record() gives back the record a ledger read, on both storage forms."""
    ledger.claim(operation())
    stored = ledger.transition(
        "invoice:INV-1:capture",
        Expect(lease_token=TOKEN_A),
        Changes(EffectStatus.QUARANTINED, reason="why", evidence={"probe": None}),
        [event(to=EffectStatus.QUARANTINED, evidence={"n": 1})],
    )
    for rows in (schema.SQLITE, schema.POSTGRES):
        now = rows.store_time(chain.to_micros(stored.updated_at))
        assert rows.record(rows.row(stored), now) == stored
        for found in ledger.events(stored.operation_id):
            assert rows.event(rows.event_row(found)) == found


def test_verify_on_both_backends_hashes_through_the_chain_module(ledger, monkeypatch):
    """verify() checks every hash with chain.chain_hash: replacing it breaks every chain."""
    ledger.claim(operation())
    ledger.transition(
        "invoice:INV-1:capture",
        Expect(lease_token=TOKEN_A),
        Changes(EffectStatus.CONFIRMED, lease=None, output_json='{"id":"cap_1"}'),
        [event()],
    )
    assert ledger.verify().ok
    monkeypatch.setattr(chain, "chain_hash", lambda previous, document: b"other")
    problems = ledger.verify().problems
    assert {(p.operation_id, p.seq) for p in problems} == {
        ("invoice:INV-1:capture", 1),
        ("invoice:INV-1:capture", 2),
    }


def test_verify_and_chain_check_agree_on_an_edited_event(ledger, ledger_sql):
    """An edited event: verify() and chain.check over events() report the same break."""
    ledger.claim(operation())
    ledger_sql(
        "UPDATE events SET attempt = 5 WHERE operation_id = ? AND seq = 1", "invoice:INV-1:capture"
    )
    record = ledger.get("invoice:INV-1:capture")
    assert record is not None
    checked = chain.check(
        record.operation_id,
        record.event_count,
        record.event_head,
        ledger.events(record.operation_id),
        record.status.value,
    )
    assert checked == list(ledger.verify().problems)
    assert [(p.operation_id, p.seq) for p in checked] == [("invoice:INV-1:capture", 1)]


# -- bulk_load --------------------------------------------------------------------------------


def _written(ledger: EffectLedger, operation_id: str) -> tuple[OperationRecord, list[EffectEvent]]:
    ledger.claim(operation(operation_id))
    ledger.transition(
        operation_id,
        Expect(lease_token=TOKEN_A),
        Changes(EffectStatus.CONFIRMED, lease=None, output_json='{"id":"cap_1"}'),
        [event()],
    )
    record = ledger.get(operation_id)
    assert record is not None
    return record, ledger.events(operation_id)


@pytest.fixture
def loader(backend: str, tmp_path, request) -> Iterator[Any]:
    """A second, empty ledger of the backend under test, to bulk-load into."""
    if backend == "sqlite":
        target = SQLiteEffectLedger(tmp_path / "restored.db")
    else:
        from effectguard.ledger.postgres import PostgresEffectLedger  # noqa: PLC0415 - needs psycopg

        url = request.getfixturevalue("postgres_url")
        target = PostgresEffectLedger(url, schema=request.getfixturevalue("postgres_schemas")())
    yield target
    target.close()


def test_bulk_load_restores_operations_exactly_as_they_were(ledger, loader):
    """Records and events loaded from another ledger read back identical, and verify."""
    written = [_written(ledger, f"op-{index}") for index in range(3)]
    assert loader.bulk_load(written) == 3
    for record, events in written:
        assert loader.get(record.operation_id) == record
        assert loader.events(record.operation_id) == events
    report = loader.verify()
    assert report.ok
    assert (report.operations_checked, report.events_checked) == (3, 6)
    assert report.anchored == 3


def test_a_bulk_loaded_ledger_keeps_anchoring_claims_and_later_loads(ledger, loader):
    """The anchor a load writes is one a later claim and a later load extend, and verify accepts.

    On PostgreSQL a load anchors its operations with one COPY and one head update;
    the head it leaves must be the one the next claim and the next load build on.
    """
    first = [_written(ledger, f"op-{index}") for index in range(3)]
    assert loader.bulk_load(first) == 3
    loader.claim(operation("op-claimed"))
    second = [_written(ledger, f"op-later-{index}") for index in range(2)]
    assert loader.bulk_load(second) == 2
    report = loader.verify()
    assert report.ok, report.problems
    assert (report.operations_checked, report.anchored) == (6, 6)
    head = loader.anchor_head()
    assert head.count == 6
    assert loader.verify(anchor=head).ok


@pytest.mark.parametrize(
    "break_chain",
    [
        pytest.param(lambda r, e: (r, [replace(e[0], attempt=9), *e[1:]]), id="edited-event"),
        pytest.param(lambda r, e: (r, e[:-1]), id="missing-event"),
        pytest.param(lambda r, e: (replace(r, status=EffectStatus.REJECTED), e), id="status"),
        pytest.param(lambda r, e: (replace(r, operation_id="op-x"), e), id="other-operation"),
        pytest.param(lambda r, e: (r, []), id="no-events"),
    ],
)
def test_bulk_load_never_writes_a_chain_verify_would_reject(ledger, loader, break_chain):
    """A broken chain anywhere in the load refuses all of it, naming the operation."""
    good = _written(ledger, "op-0")
    broken = break_chain(*_written(ledger, "op-1"))
    with pytest.raises(InvalidRequestError, match=f"operation '{broken[0].operation_id}'"):
        loader.bulk_load([good, broken])
    assert loader.list_operations() == []
    assert loader.events("op-0") == []


def test_bulk_load_refuses_an_operation_id_already_stored(ledger, loader):
    """Loading an id the ledger holds (or holds twice) fails whole and changes nothing."""
    first = _written(ledger, "op-0")
    loader.bulk_load([first])
    with pytest.raises(InvalidRequestError, match="already in the ledger"):
        loader.bulk_load([_written(ledger, "op-1"), first])
    assert [record.operation_id for record in loader.list_operations()] == ["op-0"]
    assert loader.events("op-1") == []
