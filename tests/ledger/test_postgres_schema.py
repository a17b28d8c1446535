"""The PostgreSQL ledger's schema, configuration and connections, in one process."""

from __future__ import annotations

import os
import uuid
from dataclasses import replace
from urllib.parse import urlsplit, urlunsplit

import pytest
from postgres_support import import_psycopg, with_schema

from effectguard import ConfigurationError, EffectStatus, LedgerUnavailableError, open_ledger
from effectguard._model import LeaseOwner
from effectguard.errors import LedgerNotFoundError, LedgerSchemaError
from effectguard.ledger import Lease, NewOperation
from effectguard.ledger import _chain as chain

psycopg = import_psycopg()

from effectguard.ledger import postgres as pg_ledger  # noqa: E402 - needs psycopg
from effectguard.ledger.postgres import (  # noqa: E402 - needs psycopg, imported just above
    SCHEMA_VERSION,
    PostgresEffectLedger,
    split_target,
)

OWNER = LeaseOwner("host-a.example", "boot", "pid:[1]", 1, "1")
# Nothing listens on port 1: connecting fails at once.
UNREACHABLE = "postgresql://effectguard:s3cret-pw@127.0.0.1:1/ledger"


def operation(operation_id: str = "op-1") -> NewOperation:
    return NewOperation(
        operation_id, "capture", 1, "f" * 64, None, {"n": 1}, 3, Lease("t", OWNER, 30)
    )


def query(url: str, statement: str) -> list[tuple[object, ...]]:
    """Run one statement on the test server, outside any ledger."""
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(statement)
        return cursor.fetchall() if cursor.description else []


def unchain_to_version_2(url: str, ledger: PostgresEffectLedger, operation_id: str) -> None:
    """Turn ``ledger`` back into a version-2 one: no anchor, events hashed without commitments."""
    schema = ledger.schema
    linked = chain.relink(
        operation_id, [replace(event, commits={}) for event in ledger.events(operation_id)]
    )
    with psycopg.connect(url, autocommit=True) as conn:
        for event in linked:
            conn.execute(
                f'UPDATE "{schema}".events SET hash = %s WHERE operation_id = %s AND seq = %s',  # noqa: S608 - schema and table names are the test's own, never input
                (event.hash, operation_id, event.seq),
            )
        conn.execute(
            f'UPDATE "{schema}".operations SET event_head = %s WHERE operation_id = %s',  # noqa: S608 - schema and table names are the test's own, never input
            (linked[-1].hash, operation_id),
        )
        conn.execute(f'DROP TABLE "{schema}".claims, "{schema}".claims_head')
        conn.execute(f'DROP TABLE "{schema}".tombstones')
        conn.execute(f'DROP FUNCTION "{schema}".refuse_tombstoned() CASCADE')
        conn.execute(f'ALTER TABLE "{schema}".events DROP COLUMN commits')
        conn.execute(f'DELETE FROM "{schema}".effectguard_migrations WHERE version > 2')  # noqa: S608 - schema and table names are the test's own, never input


def versions(url: str, schema: str) -> list[int]:
    rows = query(url, f'SELECT version FROM "{schema}".effectguard_migrations ORDER BY version')  # noqa: S608 - schema and table names are the test's own, never input
    return [int(version) for (version,) in rows]


def test_a_fresh_ledger_is_created_in_its_own_schema(postgres_url, postgres_schemas):
    """Opening an empty schema creates it with every migration applied once."""
    schema = postgres_schemas()
    with PostgresEffectLedger(postgres_url, schema=schema) as ledger:
        assert ledger.schema == schema
        ledger.claim(operation())
    assert versions(postgres_url, schema) == list(range(1, SCHEMA_VERSION + 1))
    tables = query(
        postgres_url,
        f"SELECT tablename FROM pg_tables WHERE schemaname = '{schema}' ORDER BY 1",  # noqa: S608 - schema and table names are the test's own, never input
    )
    assert tables == [
        ("claims",),
        ("claims_head",),
        ("effectguard_migrations",),
        ("events",),
        ("operations",),
        ("tombstones",),
    ]


def test_the_schema_comes_from_the_argument_or_the_url_else_effectguard():
    """The schema is ``schema=``, else the URL's ``?schema=`` (taken out), else effectguard."""
    assert split_target(UNREACHABLE, None) == (UNREACHABLE, "effectguard")
    assert split_target(UNREACHABLE, "billing") == (UNREACHABLE, "billing")
    url = f"{UNREACHABLE}?sslmode=disable&schema=billing&application_name=a%20b"
    assert split_target(url, None) == (
        f"{UNREACHABLE}?sslmode=disable&application_name=a%20b",
        "billing",
    )


def test_an_older_ledger_is_migrated_forward_keeping_its_data(postgres_url, postgres_target):
    """A ledger at schema version 1 gains the later migrations and keeps its operations."""
    with PostgresEffectLedger(postgres_target) as ledger:
        ledger.claim(operation())
        schema = ledger.schema
        unchain_to_version_2(postgres_url, ledger, "op-1")
    for index in ("operations_by_status", "operations_by_contract", "operations_by_update"):
        query(postgres_url, f'DROP INDEX "{schema}".{index}')
    query(postgres_url, f'DELETE FROM "{schema}".effectguard_migrations WHERE version > 1')  # noqa: S608 - schema and table names are the test's own, never input
    with PostgresEffectLedger(postgres_target) as ledger:
        assert ledger.get("op-1").status is EffectStatus.DISPATCHED
        report = ledger.verify()
        assert report.ok
        # Anchored at migration; its events predate row commitments, so its fields are not.
        assert (report.anchored, report.operations_uncovered) == (1, 1)
    assert versions(postgres_url, schema) == list(range(1, SCHEMA_VERSION + 1))
    indexes = query(
        postgres_url,
        f"SELECT count(*) FROM pg_indexes WHERE schemaname = '{schema}'"  # noqa: S608 - schema and table names are the test's own, never input
        " AND indexname LIKE 'operations_by_%'",
    )
    assert indexes == [(3,)]


def test_a_newer_ledger_is_refused_and_left_untouched(postgres_url, postgres_target):
    """A ledger written by a newer effectguard is refused with LedgerSchemaError, unchanged."""
    with PostgresEffectLedger(postgres_target) as ledger:
        ledger.claim(operation())
        schema = ledger.schema
    newer = SCHEMA_VERSION + 1
    query(postgres_url, f'INSERT INTO "{schema}".effectguard_migrations (version) VALUES ({newer})')  # noqa: S608 - schema and table names are the test's own, never input
    with pytest.raises(LedgerSchemaError, match=f"schema version {newer}, newer than"):
        PostgresEffectLedger(postgres_target)
    assert versions(postgres_url, schema) == [*range(1, SCHEMA_VERSION + 1), newer]
    rows = query(postgres_url, f'SELECT operation_id, status FROM "{schema}".operations')  # noqa: S608 - schema and table names are the test's own, never input
    assert rows == [("op-1", "DISPATCHED")]


def test_a_schema_holding_other_tables_is_refused(postgres_url, postgres_schemas):
    """A schema with an ``operations`` table that is not a ledger is refused and not touched."""
    schema = postgres_schemas()
    query(postgres_url, f'CREATE SCHEMA "{schema}"; CREATE TABLE "{schema}".operations (x int)')
    with pytest.raises(LedgerSchemaError, match="not an effectguard ledger"):
        PostgresEffectLedger(postgres_url, schema=schema)
    tables = query(
        postgres_url,
        f"SELECT tablename FROM pg_tables WHERE schemaname = '{schema}'",  # noqa: S608 - schema and table names are the test's own, never input
    )
    assert tables == [("operations",)]


def test_create_false_refuses_a_missing_ledger_and_creates_nothing(postgres_url, postgres_schemas):
    """With ``create=False`` a missing ledger is LedgerNotFoundError and no schema appears."""
    schema = postgres_schemas()
    with pytest.raises(LedgerNotFoundError, match="reads never create one"):
        open_ledger(with_schema(postgres_url, schema), create=False)
    found = query(postgres_url, f"SELECT 1 FROM pg_namespace WHERE nspname = '{schema}'")  # noqa: S608 - schema and table names are the test's own, never input
    assert found == []


def test_create_false_opens_an_existing_ledger(postgres_target):
    """``create=False`` opens a ledger that exists."""
    PostgresEffectLedger(postgres_target).close()
    with PostgresEffectLedger(postgres_target, create=False) as ledger:
        assert ledger.list_operations() == []


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_open_ledger_picks_postgres_for_a_url(postgres_target, scheme):
    """``open_ledger`` opens a PostgreSQL ledger for ``postgresql://`` and ``postgres://`` URLs."""
    target = postgres_target.replace("postgresql://", f"{scheme}://", 1)
    with open_ledger(target) as ledger:
        assert isinstance(ledger, PostgresEffectLedger)
        assert ledger.schema == split_target(postgres_target, None)[1]


def test_other_url_parameters_still_reach_the_server(postgres_url, postgres_schemas):
    """Only ``schema`` is taken out of the URL; libpq gets every other parameter as written."""
    application = f"eg_app_{uuid.uuid4().hex[:8]}"
    separator = "&" if "?" in postgres_url else "?"
    url = with_schema(f"{postgres_url}{separator}application_name={application}", "x")
    url = url.replace("schema=x", f"schema={postgres_schemas()}")
    with PostgresEffectLedger(url) as ledger:
        ledger.get("op-1")
        seen = query(
            postgres_url,
            f"SELECT count(*) FROM pg_stat_activity WHERE application_name = '{application}'",  # noqa: S608 - schema and table names are the test's own, never input
        )
    assert seen[0][0] >= 1


def test_sessions_commit_durably_even_when_the_server_default_is_off(postgres_url, postgres_target):
    """A ledger session turns ``synchronous_commit=off`` back on: a claim must survive a crash."""
    off = f"{postgres_target}&options=-c%20synchronous_commit%3Doff"
    with psycopg.connect(split_target(off, None)[0]) as plain:
        assert plain.execute("SHOW synchronous_commit").fetchone() == ("off",)
    with PostgresEffectLedger(off) as ledger:
        setting = ledger._db.run(lambda conn: conn.execute("SHOW synchronous_commit").fetchone())
    assert setting == ("on",)


@pytest.mark.parametrize("prepared", [True, False])
def test_prepared_statements_can_be_turned_off_for_poolers(postgres_target, prepared):
    """With ``prepared_statements=False`` no statement is ever prepared on the server."""
    with PostgresEffectLedger(postgres_target, pool_size=1, prepared_statements=prepared) as ledger:
        for _ in range(8):
            ledger.get("op-1")
        count = ledger._db.run(
            lambda conn: conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
        )
    assert (count[0] > 0) is prepared


def test_the_server_clock_dates_writes_without_a_now(postgres_url, postgres_target):
    """Without ``now`` or ``clock=``, times come from the database server's clock."""
    with PostgresEffectLedger(postgres_target) as ledger:
        before = query(postgres_url, "SELECT clock_timestamp()")[0][0]
        record, _ = ledger.claim(operation())
        after = query(postgres_url, "SELECT clock_timestamp()")[0][0]
    assert before <= record.created_at <= after


def test_verify_streams_a_ledger_in_batches(postgres_target, monkeypatch):
    """Verify reads chains in batches, so a ledger larger than memory still verifies whole."""
    monkeypatch.setattr(pg_ledger, "_VERIFY_BATCH", 2)
    with PostgresEffectLedger(postgres_target) as ledger:
        for index in range(5):
            ledger.claim(operation(f"op-{index}"))
        report = ledger.verify()
        assert report.ok
        assert (report.operations_checked, report.events_checked) == (5, 5)
        with psycopg.connect(split_target(postgres_target, None)[0]) as conn:
            conn.execute(
                f'DELETE FROM "{ledger.schema}".events WHERE operation_id = %s AND seq = 1',  # noqa: S608 - schema and table names are the test's own, never input
                ("op-3",),
            )
            conn.commit()
        problems = ledger.verify().problems
    assert {problem.operation_id for problem in problems} == {"op-3"}


def test_a_forked_child_opens_its_own_connections(postgres_url, postgres_schemas):
    """A child process never uses or closes the connections it inherited from its parent."""
    application = f"eg_fork_{uuid.uuid4().hex[:8]}"
    separator = "&" if "?" in postgres_url else "?"
    target = with_schema(f"{postgres_url}{separator}application_name={application}", "x")
    target = target.replace("schema=x", f"schema={postgres_schemas()}")
    sessions = (
        "SELECT pid FROM pg_stat_activity"  # noqa: S608 - schema and table names are the test's own, never input
        f" WHERE application_name = '{application}' ORDER BY pid"
    )
    with PostgresEffectLedger(target) as ledger:
        ledger.claim(operation())
        parents = set(query(postgres_url, sessions))
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through its exit status
            ok = ledger.get("op-1") is not None
            ledger.close()
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert parents <= set(query(postgres_url, sessions))
        assert ledger.get("op-1").status is EffectStatus.DISPATCHED


def test_a_password_never_appears_in_errors_or_repr(postgres_url, postgres_target):
    """The URL's password is left out of the ledger's repr and its error messages."""
    with pytest.raises(LedgerUnavailableError, match=r"127\.0\.0\.1:1") as raised:
        PostgresEffectLedger(UNREACHABLE, timeout=1)
    assert "s3cret-pw" not in str(raised.value)
    parts = urlsplit(postgres_target)
    if parts.password or parts.username is None:
        pytest.skip("the test server URL carries a password, or no user to add one to")
    # Trust authentication ignores a password it did not ask for, so the ledger opens.
    netloc = parts.netloc.replace(f"{parts.username}@", f"{parts.username}:s3cret-pw@", 1)
    with PostgresEffectLedger(urlunsplit(parts._replace(netloc=netloc))) as ledger:
        assert "s3cret-pw" not in repr(ledger)


# -- without a server ------------------------------------------------------------------------

BAD_SCHEMAS = ["", "Upper", "1st", "pg_catalog", "a-b", 'x"; DROP TABLE t; --', "a" * 64, "é"]


@pytest.mark.parametrize("schema", BAD_SCHEMAS)
def test_bad_schema_names_are_refused_before_connecting(schema):
    """A schema that is not a plain lowercase identifier is a ConfigurationError, no connection."""
    with pytest.raises(ConfigurationError, match="lowercase SQL identifier"):
        PostgresEffectLedger(UNREACHABLE, schema=schema)


def test_a_schema_named_twice_differently_is_refused():
    """Naming one schema in the URL and another as an argument is a ConfigurationError."""
    with pytest.raises(ConfigurationError, match="names schema 'a'"):
        PostgresEffectLedger(f"{UNREACHABLE}?schema=a", schema="b")
    with pytest.raises(ConfigurationError, match="more than once"):
        PostgresEffectLedger(f"{UNREACHABLE}?schema=a&schema=a")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"pool_size": 0}, "pool_size"),
        ({"pool_size": True}, "pool_size"),
        ({"timeout": 0}, "timeout"),
    ],
)
def test_invalid_options_are_refused_before_connecting(options, message):
    """Nonsensical pool settings are a ConfigurationError naming the option."""
    with pytest.raises(ConfigurationError, match=message):
        PostgresEffectLedger(UNREACHABLE, **options)


def test_a_malformed_url_is_a_configuration_error():
    """A URL libpq cannot parse is a one-line ConfigurationError."""
    with pytest.raises(ConfigurationError, match="invalid PostgreSQL URL"):
        PostgresEffectLedger("postgresql://[unclosed/db")


def test_an_unreachable_server_is_a_clear_ledger_unavailable_error():
    """A server that cannot be reached is LedgerUnavailableError naming where, at once."""
    with pytest.raises(LedgerUnavailableError, match=r"cannot connect to ledger postgresql://"):
        open_ledger(UNREACHABLE, timeout=1)
