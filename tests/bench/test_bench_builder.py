"""The bench's large ledger is what the executor writes: chains verify, records read back."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from postgres_support import import_psycopg

from benchmarks._big import build
from benchmarks._histories import QUARANTINE_EVERY, _capture, operation_id
from benchmarks._site import Site, open_site
from benchmarks._sqlite_site import SQLiteSite
from effectguard import EffectStatus, EventType
from effectguard._model import EffectEvent
from effectguard.testkit import ManualClock

SIZE = 250


@pytest.fixture
def site(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Site]:
    """An empty site on the backend under test, closed after the test."""
    db = str(tmp_path) if backend == "sqlite" else request.getfixturevalue("postgres_url")
    made = open_site(backend, db)
    yield made
    made.close()


def test_a_bulk_built_ledger_verifies_and_reads_like_one_the_executor_wrote(site: Site):
    """Every chain of a bulk-built ledger verifies, and its records and events read back."""
    build(site, "big", SIZE)
    ledger = site.ledger("big")
    quarantined = SIZE // QUARANTINE_EVERY
    report = ledger.verify()
    assert report.ok, report.problems[:3]
    assert report.operations_checked == SIZE
    assert report.events_checked == (SIZE - quarantined) * 2 + quarantined * 4

    confirmed = ledger.get(operation_id(0))
    assert confirmed is not None
    assert confirmed.status is EffectStatus.CONFIRMED
    assert confirmed.output["invoice_id"] == "INV-00000000"
    assert confirmed.output["status"] == "succeeded"
    assert confirmed.lease_token is None
    assert [event.type for event in ledger.events(operation_id(0))] == [
        EventType.CLAIMED,
        EventType.CONFIRMED,
    ]

    listed = ledger.list_operations(status=EffectStatus.QUARANTINED, limit=100)
    assert [record.operation_id for record in listed] == [operation_id(199), operation_id(99)]
    assert [event.type for event in ledger.events(operation_id(99))][-1] is EventType.QUARANTINED


def _untimed(event: EffectEvent) -> EffectEvent:
    commits = {name: value for name, value in event.commits.items() if name != "lease"}
    return replace(event, at=None, hash=b"", commits=commits)


@pytest.mark.parametrize("index", [7, 199])
def test_a_replica_is_what_the_executor_writes_for_that_operation(site: Site, index: int):
    """A bulk-built operation equals the executor's own run of it, but for its times and hashes."""
    build(site, "big", SIZE)
    direct = site.ledger("direct")
    clock = ManualClock(1_800_000_000.0)
    made, made_events = _capture(
        direct, clock, index, times_out=index % QUARANTINE_EVERY == QUARANTINE_EVERY - 1
    )
    ledger = site.ledger("big")
    loaded = ledger.get(operation_id(index))
    assert loaded is not None
    untimed = ("created_at", "updated_at", "first_dispatched_at", "event_head")
    assert replace(loaded, **dict.fromkeys(untimed)) == replace(made, **dict.fromkeys(untimed))
    # Lease tokens are random per run, so the lease each write committed to differs too.
    assert [_untimed(event) for event in ledger.events(operation_id(index))] == [
        _untimed(event) for event in made_events
    ]


def test_a_bulk_built_ledger_is_a_tamper_evident_one(site: Site, backend: str):
    """verify() still finds an edited event in a bulk-built ledger: the chains are real."""
    build(site, "big", 5)
    ledger = site.ledger("big")
    ledger.close()
    if backend == "sqlite":
        assert isinstance(site, SQLiteSite)
        conn = sqlite3.connect(site.target("big"), isolation_level=None)
        conn.execute(
            "UPDATE events SET attempt = 7 WHERE seq = 2 AND operation_id = ?", (operation_id(2),)
        )
        conn.close()
    else:
        psycopg = import_psycopg()
        target = site.target("big")
        url, _, schema = target.rpartition("?schema=")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                f'UPDATE "{schema}".events SET attempt = 7'  # noqa: S608 - the test's own schema
                " WHERE seq = 2 AND operation_id = %s",
                (operation_id(2),),
            )
    problems = site.ledger("big").verify().problems
    assert {problem.operation_id for problem in problems} == {operation_id(2)}


def test_closing_a_site_removes_everything_it_made(backend: str, tmp_path: Path, request):
    """A closed site leaves no ledger file or schema behind."""
    db = str(tmp_path) if backend == "sqlite" else request.getfixturevalue("postgres_url")
    site = open_site(backend, db)
    site.ledger("one").close()
    site.raw().record("op", "{}", "{}")
    build(site, "big", 3)
    site.close()
    if backend == "sqlite":
        assert list(tmp_path.iterdir()) == []
    else:
        psycopg = import_psycopg()
        with psycopg.connect(db) as conn:
            left = conn.execute(
                "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'ebench\\_%'"
            ).fetchone()
        assert left == (0,)
