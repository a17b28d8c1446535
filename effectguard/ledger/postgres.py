"""The PostgreSQL ledger: several hosts sharing one set of operations.

:class:`PostgresEffectLedger` claims by ``INSERT … ON CONFLICT`` in one round
trip, fences every transition with a conditional ``UPDATE``, and judges lease
expiry by the database server's clock, so hosts whose clocks disagree still
agree on who holds an operation. Importing this module imports psycopg (the
``postgres`` extra); without it, the ``ImportError`` names the extra.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn, Self, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout
except ModuleNotFoundError as exc:  # pragma: no cover - exercised in a subprocess without psycopg
    _MISSING = (
        f"the PostgreSQL ledger needs {exc.name}, which is not installed: "
        "pip install 'effectguard[postgres]'"
    )
    raise ImportError(_MISSING, name=exc.name) from exc

from effectguard._fingerprint import check_operation_id, compact_encoder
from effectguard._model import (
    EffectEvent,
    EffectStatus,
    OperationRecord,
    VerifyProblem,
    VerifyReport,
)
from effectguard.errors import (
    ConfigurationError,
    FencedWriteError,
    InternalError,
    InvalidRequestError,
    LedgerLockedError,
    LedgerNotFoundError,
    LedgerSchemaError,
    LedgerUnavailableError,
    OperationNotFoundError,
)
from effectguard.ledger import _chain as anchor
from effectguard.ledger import _chain as anchors
from effectguard.ledger import _chain as chain
from effectguard.ledger import _chain as committed
from effectguard.ledger import _retention as retention
from effectguard.ledger import _rows as bulk
from effectguard.ledger._chain import AnchorHead
from effectguard.ledger._protocol import (
    UNSET,
    Changes,
    EventDraft,
    Expect,
    NewOperation,
    check_limit,
    describe_mismatch,
)
from effectguard.ledger._resolution import OperatorResolution
from effectguard.ledger._retention import After, BatchPruning, PrunePass, Tombstone
from effectguard.ledger._rows import EVENT_COLUMNS, POSTGRES, Kind
from effectguard.ledger._rows import OPERATION_COLUMNS as _OPERATIONS
from effectguard.ledger._rows import POSTGRES as _ROWS

__all__ = [
    "ANCHOR_MIGRATION",
    "ANCHOR_SHARDS",
    "DEFAULT_SCHEMA",
    "EVENT_SELECT",
    "MIGRATIONS",
    "OPERATION_COLUMNS",
    "RECENT_SECONDS",
    "SCHEMA_VERSION",
    "TOMBSTONED",
    "Connection",
    "ConnectionLost",
    "Connections",
    "PostgresEffectLedger",
    "PostgresPruning",
    "Recent",
    "Seen",
    "Statements",
    "Tombstoned",
    "after",
    "chain_parameters",
    "check_schema_name",
    "created",
    "describe",
    "moment",
    "select_list",
    "split_target",
    "stone_select",
    "tombstone_problems",
    "utc",
]


# ---- Every statement, for one schema ----

#: Where a ledger's tables live unless ``schema=`` (or ``?schema=`` in the URL) says otherwise.
DEFAULT_SCHEMA = "effectguard"


_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,62}")


_URL_SCHEMES = frozenset({"postgresql", "postgres"})


# ``json`` (not ``jsonb``) keeps the exact text it was given: stored outputs are
# replayed byte for byte and event evidence is hashed as written (jsonb would
# turn 1e20 into 100000000000000000000 and break the chain).
_JSON_COLUMNS = frozenset(
    column.postgres for column in (*_OPERATIONS, *EVENT_COLUMNS) if column.is_json
)


#: The operations table's columns, in the order every statement returns them.
OPERATION_COLUMNS = _ROWS.operation_columns


_EVENT_SELECT = ", ".join(
    f"{name}::text" if name in _JSON_COLUMNS else name for name in _ROWS.event_columns
)


#: Every event column, in row order, JSON columns as text.
EVENT_SELECT = _EVENT_SELECT


_INTEGER_COLUMNS = frozenset({"contract_version", "attempts", "attempt_budget", "event_count"})


_KIND_TYPES = {Kind.TIME: "timestamptz", Kind.BYTES: "bytea"}


#: Each operations column's SQL type, for parameters selected rather than given as VALUES.
COLUMN_TYPES = {
    column.postgres: "json"
    if column.is_json
    else "integer"
    if column.postgres in _INTEGER_COLUMNS
    else _KIND_TYPES.get(column.kind, "text")
    for column in _OPERATIONS
}


#: Columns a transition may set (all but the key), with the cast its parameter needs.
SETTABLE = {name: "::json" if name in _JSON_COLUMNS else "" for name in OPERATION_COLUMNS[1:]}


def check_schema_name(name: object) -> str:
    """Return ``name`` if it is a schema name the ledger accepts, else raise ConfigurationError.

    Accepted: lowercase letters, digits and ``_``, not starting with a digit,
    at most 63 characters, not ``pg_…`` (reserved by PostgreSQL).
    """
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name) or name.startswith("pg_"):
        msg = (
            "a ledger schema must be a lowercase SQL identifier (a-z, 0-9 and _, "
            f"not starting with a digit or pg_, at most 63 characters), not {name!r}"
        )
        raise ConfigurationError(msg)
    return name


def split_target(url: str, schema: str | None) -> tuple[str, str]:
    """Return ``(conninfo, schema)`` for a ledger URL and an optional ``schema`` argument.

    A ``schema`` query parameter in a ``postgresql://`` URL names the schema and
    is removed before the URL reaches libpq; every other part is kept verbatim.
    Naming the schema both ways, differently, is a ConfigurationError.
    """
    conninfo, from_url = url, None
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        msg = f"invalid PostgreSQL URL: {exc}"
        raise ConfigurationError(msg) from exc
    if parts.scheme in _URL_SCHEMES and parts.query:
        kept, found = [], []
        for item in parts.query.split("&"):
            key, _, value = item.partition("=")
            if unquote(key) == "schema":
                found.append(unquote(value))
            else:
                kept.append(item)
        if len(found) > 1:
            msg = "the ledger URL names its schema more than once"
            raise ConfigurationError(msg)
        if found:
            from_url = found[0]
            conninfo = urlunsplit(parts._replace(query="&".join(kept)))
    if schema is not None and from_url is not None and schema != from_url:
        msg = f"the ledger URL names schema {from_url!r} but schema={schema!r} was passed"
        raise ConfigurationError(msg)
    chosen = schema if schema is not None else from_url
    return conninfo, check_schema_name(DEFAULT_SCHEMA if chosen is None else chosen)


def advisory_lock_key(schema: str) -> int:
    """Return the advisory-lock key that serializes migrations of ``schema`` in one database."""
    digest = hashlib.sha256(f"effectguard-ledger:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@functools.cache  # built into every statement of every call; the same text each time
def select_list(alias: str) -> str:
    """Every operation column of table ``alias``, in row order, JSON columns as text."""
    return ", ".join(
        f"{alias}.{name}::text" if name in _JSON_COLUMNS else f"{alias}.{name}"
        for name in OPERATION_COLUMNS
    )


@dataclass(frozen=True)
class Statements:
    """Every statement the ledger runs, for one schema.

    The text of each statement a call runs is worked out once, not per call.
    """

    schema: str
    _transitions: dict[tuple[tuple[str, ...], tuple[str, ...]], str] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @property
    def qualified(self) -> str:
        """The quoted schema name, ready to prefix a table."""
        return f'"{self.schema}"'

    def migration(self, number: int) -> str:
        """Return migration ``number`` (1-based) for this schema."""
        return MIGRATIONS[number - 1].format(s=self.qualified)

    @property
    def inspect(self) -> str:
        """Whether the schema, the version table and any ledger table exist."""
        s = self.qualified
        return (
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = %(schema)s),"
            f" to_regclass('{s}.effectguard_migrations') IS NOT NULL,"
            f" to_regclass('{s}.operations') IS NOT NULL"
            f" OR to_regclass('{s}.events') IS NOT NULL"
        )

    @property
    def version(self) -> str:
        """The highest migration applied."""
        return f"SELECT coalesce(max(version), 0) FROM {self.qualified}.effectguard_migrations"

    @property
    def bootstrap(self) -> str:
        """The table that records which migrations have been applied."""
        return (
            f"CREATE TABLE IF NOT EXISTS {self.qualified}.effectguard_migrations ("
            " version integer PRIMARY KEY,"
            " applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"
        )

    @property
    def record_version(self) -> str:
        """Record one applied migration."""
        return f"INSERT INTO {self.qualified}.effectguard_migrations (version) VALUES (%s)"

    @functools.cached_property
    def select_one(self) -> str:
        """The server's time and the operation (all NULL when there is none): one row always."""
        return (
            f"SELECT statement_timestamp(), {select_list('o')} FROM (SELECT 1) AS one"
            f" LEFT JOIN {self.qualified}.operations AS o ON o.operation_id = %s"
        )

    def select_many(self, where: Iterable[str]) -> str:
        """Operations matching every ``where`` clause, newest first, then the server's time."""
        clauses = list(where)
        condition = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        return (
            f"SELECT {select_list('o')}, statement_timestamp()"
            f" FROM {self.qualified}.operations AS o{condition}"
            " ORDER BY o.updated_at DESC LIMIT %(limit)s"
        )

    @property
    def events(self) -> str:
        """One operation's events in order."""
        return (
            f"SELECT {_EVENT_SELECT} FROM {self.qualified}.events"
            " WHERE operation_id = %s ORDER BY seq"
        )

    @property
    def commitments(self) -> str:
        """One operation's event commitments in order, as text, leaving out events with none."""
        return (
            f"SELECT commits::text FROM {self.qualified}.events"
            " WHERE operation_id = %s AND commits IS NOT NULL ORDER BY seq"
        )

    @functools.cached_property
    def _insert_events(self) -> str:
        # Runs only for the rows the operation's statement returned: none when fenced out.
        # The keys are effectguard.ledger.postgres.rows' (texts as JSON strings, hash as hex).
        return (
            f"INSERT INTO {self.qualified}.events ({', '.join(_ROWS.event_columns)})"
            " SELECT op.operation_id, e.s, e.t, e.f, e.o, e.a, %(at)s, e.v::json,"
            " decode(e.h, 'hex'), e.c::json FROM op, json_to_recordset(%(events)s::json)"
            " AS e(s integer, t text, f text, o text, a integer, v text, h text, c text)"
        )

    @functools.cached_property
    def claim(self) -> str:
        """Insert the operation and its events unless its id is taken; else read the row taken.

        Returns one row: the server's time, whether this statement inserted,
        and the operation's columns (its own row, the row found, or all NULL
        when none is visible to the statement: its time guess was refused,
        or a racing claim committed after the statement began). With
        ``skew`` set, the row is inserted only when ``at`` is within ``skew``
        of the server's clock, so a claim dated from an estimate of that
        clock is never dated by more than ``skew`` wrong.
        """
        s = self.qualified
        names = ", ".join(OPERATION_COLUMNS)
        values = ", ".join(f"%({name})s::{COLUMN_TYPES[name]}" for name in OPERATION_COLUMNS)
        # The head no other claim holds, this connection's own first: a claim waits
        # for another's commit only when every shard is held at once.
        mine = f"mod(pg_backend_pid(), {ANCHOR_SHARDS})"
        free = (
            f"SELECT f.shard FROM {s}.claims_head AS f WHERE EXISTS (SELECT 1 FROM op)"
            f" ORDER BY mod(f.shard + {ANCHOR_SHARDS} - {mine}, {ANCHOR_SHARDS})"
            " LIMIT 1 FOR UPDATE SKIP LOCKED"
        )
        return (
            f"WITH op AS (INSERT INTO {s}.operations AS o ({names}) SELECT {values}"
            " WHERE %(skew)s::interval IS NULL OR statement_timestamp()"
            " BETWEEN %(at)s - %(skew)s::interval AND %(at)s + %(skew)s::interval"
            f" ON CONFLICT (operation_id) DO NOTHING RETURNING {select_list('o')}),"
            f" ev AS ({self._insert_events}),"
            # Only a claim that inserted its row advances the anchor. The head row stays
            # locked until commit, so the next claim on it re-reads it (READ COMMITTED).
            f" head AS (UPDATE {s}.claims_head AS h SET count = h.count + 1,"
            " running = sha256(h.running || %(anchor_item)s)"
            f" WHERE h.shard = coalesce(({free}), {mine}) AND EXISTS (SELECT 1 FROM op)"
            " RETURNING h.shard, h.count, h.running),"
            f" anchor AS (INSERT INTO {s}.claims (shard, seq, operation_id, running)"
            " SELECT head.shard, head.count, %(operation_id)s, head.running FROM head)"
            " SELECT statement_timestamp(), true, op.* FROM op UNION ALL"
            f" SELECT statement_timestamp(), false, {select_list('o')} FROM (SELECT 1) AS one"
            f" LEFT JOIN {s}.operations AS o ON o.operation_id = %(operation_id)s"
            " WHERE NOT EXISTS (SELECT 1 FROM op)"
        )

    def transition(self, columns: Iterable[str], conditions: Iterable[str]) -> str:
        """Set ``columns`` and append events where the row still meets ``conditions``."""
        # A ledger's transitions come in a few shapes (which columns, which fences).
        shape = (tuple(columns), tuple(conditions))
        text = self._transitions.get(shape)
        if text is None:
            text = self._transitions[shape] = self._transition(*shape)
        return text

    def _transition(self, columns: tuple[str, ...], conditions: tuple[str, ...]) -> str:
        assignments = ", ".join(f"{name} = %({name})s{SETTABLE[name]}" for name in columns)
        where = "".join(f" AND {condition}" for condition in conditions)
        return (
            f"WITH op AS (UPDATE {self.qualified}.operations AS o SET {assignments},"
            " updated_at = %(at)s, event_count = %(new_count)s, event_head = %(new_head)s"
            f" WHERE o.operation_id = %(operation_id)s AND o.event_count = %(read_count)s{where}"
            f" RETURNING {select_list('o')}), ev AS ({self._insert_events}) SELECT * FROM op"
        )

    def renew(self, *, server_clock: bool) -> str:
        """Extend the lease held by a token: from the server's time, or from a given one."""
        expires = (
            "statement_timestamp() + %(micros)s * interval '1 microsecond'"
            if server_clock
            else "%(expires)s"
        )
        return (
            f"UPDATE {self.qualified}.operations SET lease_expires_at = {expires}"
            " WHERE operation_id = %(operation_id)s AND lease_token = %(token)s"
        )

    @property
    def copy_operations(self) -> str:
        """Bulk-load operation rows (every column, in order)."""
        names = ", ".join(OPERATION_COLUMNS)
        return f"COPY {self.qualified}.operations ({names}) FROM STDIN"

    @property
    def copy_events(self) -> str:
        """Bulk-load event rows (every column, in order)."""
        return f"COPY {self.qualified}.events ({', '.join(_ROWS.event_columns)}) FROM STDIN"

    @property
    def analyze(self) -> str:
        """Refresh the query planner's statistics of both tables."""
        return f"ANALYZE {self.qualified}.operations, {self.qualified}.events"

    @property
    def verify_heads(self) -> str:
        """Every operation's chain head and committed columns, in operation-id order."""
        columns = ", ".join(
            f"{name}::text" if name in _JSON_COLUMNS else name for name in chain.HEAD_COLUMNS
        )
        return (
            f"SELECT operation_id, event_count, event_head, status, {columns}"
            f" FROM {self.qualified}.operations ORDER BY operation_id"
        )

    @property
    def verify_claims(self) -> str:
        """Every claim by shard and in order, whether its operation exists, its first hash."""
        s = self.qualified
        return (
            "SELECT c.shard, c.seq, c.operation_id, c.running,"
            " o.operation_id IS NOT NULL OR t.operation_id IS NOT NULL,"
            f" coalesce(e.hash, t.first_hash) FROM {s}.claims AS c LEFT JOIN {s}.operations AS o"
            f" ON o.operation_id = c.operation_id LEFT JOIN {s}.events AS e"
            " ON e.operation_id = c.operation_id AND e.seq = 1"
            # A pruned operation's tombstone stands for its row and keeps its first hash.
            f" LEFT JOIN {s}.tombstones AS t ON t.operation_id = c.operation_id"
            " ORDER BY c.shard, c.seq"
        )

    @property
    def unanchored(self) -> str:
        """Operations not in the anchor, with their first event's hash, in id order."""
        s = self.qualified
        # No index on claims.operation_id (it would cost every claim): a set difference.
        return (
            f"SELECT u.operation_id, e.hash FROM (SELECT operation_id FROM {s}.operations"
            f" EXCEPT SELECT operation_id FROM {s}.claims) AS u LEFT JOIN {s}.events AS e"
            " ON e.operation_id = u.operation_id AND e.seq = 1 ORDER BY u.operation_id"
        )

    @property
    def anchor_heads(self) -> str:
        """Every shard's head, in shard order."""
        return f"SELECT shard, count, running FROM {self.qualified}.claims_head ORDER BY shard"

    @property
    def anchor_head(self) -> str:
        """Shard 0's head row, locked (anchoring existing operations, which all go there)."""
        return f"SELECT count, running FROM {self.qualified}.claims_head WHERE shard = 0 FOR UPDATE"

    @property
    def copy_claims(self) -> str:
        """``COPY`` claims into the anchor, as ``(shard, seq, operation_id, running)`` rows."""
        return f"COPY {self.qualified}.claims (shard, seq, operation_id, running) FROM STDIN"

    @property
    def set_anchor_head(self) -> str:
        """Set shard 0's head to its last claim: ``(count, running)``."""
        return f"UPDATE {self.qualified}.claims_head SET count = %s, running = %s WHERE shard = 0"

    @property
    def verify_events(self) -> str:
        """Every event, in the order the chains are checked."""
        return f"SELECT {_EVENT_SELECT} FROM {self.qualified}.events ORDER BY operation_id, seq"


# ---- The tables as data: versioned forward migrations ----

#: The SQLSTATE the trigger raises for an insert under a pruned operation id.
TOMBSTONED = "EGP01"


#: Migration 5 (``{s}`` is the quoted schema): tombstones, and the trigger that keeps
#: a pruned id from ever being inserted again.
_TOMBSTONES = f"""
CREATE TABLE {{s}}.tombstones (
    operation_id text COLLATE "C" PRIMARY KEY,
    contract text NOT NULL,
    contract_version integer NOT NULL,
    fingerprint text NOT NULL,
    status text NOT NULL,
    provider_operation_id text,
    event_count integer NOT NULL,
    event_head bytea NOT NULL,
    first_hash bytea NOT NULL,
    pruned_at timestamptz NOT NULL,
    digest bytea NOT NULL
);
CREATE FUNCTION {{s}}.refuse_tombstoned() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM {{s}}.tombstones WHERE operation_id = NEW.operation_id) THEN
        RAISE EXCEPTION 'operation % was pruned', NEW.operation_id USING ERRCODE = '{TOMBSTONED}';
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER operations_not_tombstoned AFTER INSERT ON {{s}}.operations
    FOR EACH ROW EXECUTE FUNCTION {{s}}.refuse_tombstoned();
"""


#: Forward migrations; ``{s}`` is the quoted schema. Each runs once, in order, under a lock.
MIGRATIONS: tuple[str, ...] = (
    # 1: operations and their hash-chained events. operation_id sorts bytewise
    # (COLLATE "C"), which is the order verify() merges the two tables in.
    """
    CREATE TABLE {s}.operations (
        operation_id text COLLATE "C" PRIMARY KEY,
        contract text NOT NULL,
        contract_version integer NOT NULL,
        fingerprint text NOT NULL,
        provider_key text,
        status text NOT NULL,
        attempts integer NOT NULL,
        attempt_budget integer NOT NULL,
        arguments json NOT NULL,
        output json,
        provider_operation_id text,
        reason text,
        evidence json,
        lease_token text,
        lease_owner json,
        lease_expires_at timestamptz,
        overlap json,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL,
        first_dispatched_at timestamptz NOT NULL,
        event_count integer NOT NULL,
        event_head bytea NOT NULL
    );
    CREATE TABLE {s}.events (
        operation_id text COLLATE "C" NOT NULL,
        seq integer NOT NULL,
        type text NOT NULL,
        from_status text,
        to_status text NOT NULL,
        attempt integer NOT NULL,
        at timestamptz NOT NULL,
        evidence json,
        hash bytea NOT NULL,
        PRIMARY KEY (operation_id, seq)
    );
    """,
    # 2: operator listings by status or contract stay fast on large ledgers.
    """
    CREATE INDEX operations_by_status ON {s}.operations (status, updated_at);
    CREATE INDEX operations_by_contract ON {s}.operations (contract, updated_at);
    CREATE INDEX operations_by_update ON {s}.operations (updated_at);
    """,
    # 3: events commit to the row fields they set; every claim is anchored ledger-wide.
    # claims_head is the one row every claim updates, which orders concurrent claims
    # (existing operations are anchored by the ledger in the same transaction).
    """
    ALTER TABLE {s}.events ADD COLUMN commits json;
    CREATE TABLE {s}.claims (
        seq bigint PRIMARY KEY,
        operation_id text COLLATE "C" NOT NULL,
        running bytea NOT NULL
    );
    CREATE TABLE {s}.claims_head (
        only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
        count bigint NOT NULL,
        running bytea NOT NULL
    );
    INSERT INTO {s}.claims_head (count, running) VALUES (0, '');
    """,
    # 4: the anchor in shards, each its own chain with its own head row. A claim
    # appends to the first head no other claim holds (SKIP LOCKED), so concurrent
    # claims no longer queue on one row lock until each commits. Shard 0 continues
    # the single chain of migration 3.
    """
    ALTER TABLE {s}.claims ADD COLUMN shard smallint NOT NULL DEFAULT 0;
    ALTER TABLE {s}.claims DROP CONSTRAINT claims_pkey, ADD PRIMARY KEY (shard, seq);
    ALTER TABLE {s}.claims ALTER COLUMN shard DROP DEFAULT;
    ALTER TABLE {s}.claims_head ADD COLUMN shard smallint NOT NULL DEFAULT 0;
    ALTER TABLE {s}.claims_head DROP COLUMN only_row;
    ALTER TABLE {s}.claims_head ADD PRIMARY KEY (shard);
    ALTER TABLE {s}.claims_head ALTER COLUMN shard DROP DEFAULT;
    INSERT INTO {s}.claims_head (shard, count, running)
        SELECT shard, 0, '' FROM generate_series(1, 15) AS shard;
    """,
    # 5: tombstones of pruned operations, and the trigger that refuses their ids.
    _TOMBSTONES,
)


#: The migration that created the claims anchor.
ANCHOR_MIGRATION = 3


#: How many chains the anchor is kept in (migration 4 creates their head rows).
ANCHOR_SHARDS = 16


#: The schema version this library writes; older ledgers are migrated forward on open.
SCHEMA_VERSION = len(MIGRATIONS)


# ---- Statement parameters shaped from the schema's rows ----

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


def created(operation: NewOperation, at: datetime) -> dict[str, Any]:
    """Return ``operation`` as first claimed at ``at``: every column, by name, and its event.

    The event is the ``events`` parameter of :func:`chain_parameters`, with ``at``.
    """
    values, event_rows = POSTGRES.created(operation, chain.to_micros(at))
    parameters = dict(zip(POSTGRES.operation_columns, values, strict=True))
    parameters.update(events=_events(event_rows), at=at)
    # The anchor commits to the claim's first event (see effectguard.ledger.anchor).
    claim_hash = bytes(event_rows[0][_HASH]) if event_rows else b""
    parameters.update(anchor_item=anchor.item(operation.operation_id, claim_hash))
    return parameters


# ---- The pool and connections; driver errors translated ----

T = TypeVar("T")


#: A connection as the ledger uses it: autocommit, rows as tuples.
Connection = psycopg.Connection[tuple[Any, ...]]


_LOG = logging.getLogger("effectguard.ledger.postgres")


#: The name of every pool this module opens; psycopg_pool names its worker threads after it.
_POOL_NAME = "effectguard-ledger"


# Set while this thread is inside a call to one of this module's pools.
_IN_POOL = threading.local()


# Pools inherited across fork() belong to the parent: the child keeps them
# referenced so they are never collected, and never uses or closes them.
_INHERITED: list[object] = []


_LIVE: weakref.WeakSet[Connections] = weakref.WeakSet()


class ConnectionLost(LedgerUnavailableError):
    """The connection broke during a call; whether a write in it committed is unknown."""


class Tombstoned(InvalidRequestError):
    """The server refused to insert an operation under a pruned id (its tombstone stands)."""


class _PoolRecords(logging.Filter):
    """Re-logs psycopg_pool's records about this module's pools under effectguard's logger.

    Records about anyone else's pools pass through untouched.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        ours = (
            (record.threadName is not None and record.threadName.startswith(_POOL_NAME))
            or getattr(_IN_POOL, "active", False)
            or _POOL_NAME in args
        )
        if not ours:
            return True
        _LOG.info("connection pool: %s", record.getMessage())
        return False


_POOL_FILTER = _PoolRecords()


logging.getLogger("psycopg.pool").addFilter(_POOL_FILTER)


@contextlib.contextmanager
def _pool_call() -> Iterator[None]:
    """Mark this thread as inside a call to one of this module's pools (nesting allowed)."""
    outer = getattr(_IN_POOL, "active", False)
    _IN_POOL.active = True
    try:
        yield
    finally:
        _IN_POOL.active = outer


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _parse(conninfo: str) -> dict[str, Any]:
    try:
        return conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        msg = f"invalid PostgreSQL URL: {_first_line(exc)}"
        raise ConfigurationError(msg) from exc


def describe(conninfo: str) -> str:
    """Return where ``conninfo`` points, as a URL without its password.

    Raises ConfigurationError when libpq cannot parse it.
    """
    params = _parse(conninfo)
    user = f"{params['user']}@" if params.get("user") else ""
    host = str(params.get("host") or "localhost")
    port = f":{params['port']}" if params.get("port") else ""
    return f"postgresql://{user}{host}{port}/{params.get('dbname') or ''}"


class Connections:
    """This process's connections to one ledger, and the boundary its driver errors stop at."""

    def __init__(
        self,
        conninfo: str,
        *,
        label: str,
        pool_size: int,
        timeout: float,
        prepared_statements: bool = True,
    ) -> None:
        self.label = label
        self.pool_size = pool_size
        self.timeout = timeout
        self._conninfo = conninfo
        self._kwargs: dict[str, Any] = {
            "autocommit": True,
            "fallback_application_name": "effectguard",
        }
        if not prepared_statements:
            # A transaction-pooling PgBouncer before 1.21 cannot carry them between sessions.
            self._kwargs["prepare_threshold"] = None
        if "connect_timeout" not in _parse(conninfo):
            self._kwargs["connect_timeout"] = max(2, round(timeout))
        self._lock = threading.Lock()
        self._pool: ConnectionPool[Connection] | None = None
        self._closed = False
        _LIVE.add(self)

    @contextlib.contextmanager
    def translate(self) -> Iterator[None]:
        """Turn any driver error raised inside into a LedgerUnavailableError (or subclass)."""
        try:
            yield
        except (PoolTimeout, PoolClosed, psycopg.Error) as exc:
            raise self._translated(exc) from exc

    def _translated(self, exc: Exception) -> LedgerUnavailableError | Tombstoned:
        """The ledger's error for driver error ``exc``."""
        if isinstance(exc, PoolTimeout):
            return LedgerUnavailableError(
                f"{self.label} is unavailable: no connection within {self.timeout:g}s"
            )
        if isinstance(exc, PoolClosed):
            return LedgerUnavailableError(f"{self.label} is closed")
        if isinstance(
            exc, (pg_errors.LockNotAvailable, pg_errors.DeadlockDetected, pg_errors.QueryCanceled)
        ):
            return LedgerLockedError(
                f"{self.label} is locked by another writer: {_first_line(exc)}"
            )
        if isinstance(exc, pg_errors.UndefinedTable):
            return LedgerUnavailableError(f"{self.label} has lost its tables: {_first_line(exc)}")
        if isinstance(exc, psycopg.Error) and exc.sqlstate == TOMBSTONED:
            return Tombstoned(_first_line(exc))
        return LedgerUnavailableError(f"{self.label} failed: {_first_line(exc)}")

    @staticmethod
    def _configure(conn: Connection) -> None:
        # Times come back in UTC, and a claim is durable before dispatch even on
        # a server whose default is synchronous_commit=off.
        conn.execute(
            "SET TIME ZONE 'UTC'; SELECT set_config('synchronous_commit', 'on', false)"
            " WHERE current_setting('synchronous_commit') = 'off'"
        )

    @contextlib.contextmanager
    def direct(self) -> Iterator[Connection]:
        """A connection of its own, outside the pool, closed afterwards; errors translated."""
        try:
            conn = psycopg.connect(self._conninfo, **self._kwargs)
        except psycopg.Error as exc:
            msg = f"cannot connect to {self.label}: {_first_line(exc)}"
            raise LedgerUnavailableError(msg) from exc
        try:
            with self.translate():
                self._configure(conn)
                yield conn
        finally:
            conn.close()

    def _pool_here(self) -> ConnectionPool[Connection]:
        if self._closed:
            msg = f"{self.label} is closed"
            raise LedgerUnavailableError(msg)
        pool = self._pool
        if pool is None:
            with self._lock, _pool_call():
                if self._pool is None:
                    self._pool = ConnectionPool(
                        self._conninfo,
                        kwargs=self._kwargs,
                        min_size=1,
                        max_size=self.pool_size,
                        timeout=self.timeout,
                        configure=self._configure,
                        name=_POOL_NAME,
                        open=True,
                    )
                pool = self._pool
        return pool

    def run(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` on a pooled connection; :class:`ConnectionLost` if that connection broke."""
        pool = self._pool_here()
        # Written out, not as context managers: every statement of every call comes through.
        outer = getattr(_IN_POOL, "active", False)
        _IN_POOL.active = True
        conn: Connection | None = None
        try:
            conn = pool.getconn()
            try:
                return work(conn)
            finally:
                pool.putconn(conn)
        except psycopg.OperationalError as exc:
            if conn is not None and conn.broken:
                msg = f"lost the connection to {self.label}: {_first_line(exc)}"
                raise ConnectionLost(msg) from exc
            raise self._translated(exc) from exc
        except (PoolTimeout, PoolClosed, psycopg.Error) as exc:
            raise self._translated(exc) from exc
        finally:
            _IN_POOL.active = outer

    def recover(self) -> None:
        """After a lost connection, replace every idle one that broke with it (a restart)."""
        pool = self._pool
        if pool is not None:
            with contextlib.suppress(psycopg.Error), _pool_call():
                pool.check()

    def read(self, work: Callable[[Connection], T]) -> T:
        """Run ``work``, which is safe to repeat, once more if its connection broke."""
        try:
            return self.run(work)
        except ConnectionLost:
            self.recover()
            return self.run(work)

    def close(self) -> None:
        """Close this process's connections; any later use raises LedgerUnavailableError."""
        self._closed = True
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            with _pool_call():
                pool.close()

    def _after_fork(self) -> None:
        if self._pool is not None:
            _INHERITED.append(self._pool)
        self._pool = None
        self._lock = threading.Lock()


def _forget_parent_pools() -> None:
    for connections in list(_LIVE):
        connections._after_fork()  # noqa: SLF001 - the module's own fork hook


os.register_at_fork(after_in_child=_forget_parent_pools)


# ---- What this thread last saw of an operation, and the server's clock then ----

#: How long what a thread saw stays a usable guess.
RECENT_SECONDS = 1.0


@dataclasses.dataclass(frozen=True, slots=True)
class Seen:
    """One operation as this thread last saw it (None: absent) and the server's time then."""

    operation_id: str
    record: OperationRecord | None
    server_time: datetime
    monotonic: float

    def server_now(self) -> datetime:
        """The server's time now, from its time then and the time elapsed here (whole µs)."""
        return self.server_time + timedelta(seconds=time.monotonic() - self.monotonic)


class Recent:
    """Per thread, the last operation read or written through one ledger."""

    def __init__(self) -> None:
        self._local = threading.local()
        # (server time, monotonic time here then) of the latest statement that reported it.
        self._clock: tuple[datetime, float] | None = None

    def saw(self, operation_id: str, record: OperationRecord | None, server_time: datetime) -> None:
        """Remember a read of ``operation_id`` at the server's ``server_time``."""
        seen = Seen(operation_id, record, server_time, time.monotonic())
        self._local.seen = seen
        self._clock = (server_time, seen.monotonic)

    def clock(self, server_time: datetime) -> None:
        """Remember the server's time as a statement just reported it."""
        self._clock = (server_time, time.monotonic())

    def server_now(self) -> datetime | None:
        """The server's time now, estimated from the last time any thread learned it; None yet."""
        known = self._clock
        if known is None:
            return None
        server_time, then = known
        return server_time + timedelta(seconds=time.monotonic() - then)

    def wrote(self, record: OperationRecord) -> None:
        """Remember the row a write returned, keeping the time of the last read."""
        seen: Seen | None = getattr(self._local, "seen", None)
        if seen is not None and seen.operation_id == record.operation_id:
            self._local.seen = dataclasses.replace(seen, record=record)

    def get(self, operation_id: str) -> Seen | None:
        """What this thread saw of ``operation_id`` less than RECENT_SECONDS ago, if anything."""
        seen: Seen | None = getattr(self._local, "seen", None)
        if seen is None or seen.operation_id != operation_id:
            return None
        if time.monotonic() - seen.monotonic > RECENT_SECONDS:
            return None
        return seen


# ---- Retention's statements: a prune page locked SKIP LOCKED, tombstones ----


_STONE_COLUMNS = (
    "operation_id, contract, contract_version, fingerprint, status, provider_operation_id,"
    " event_count, event_head, first_hash, pruned_at, digest"
)


def stone_select(sql: Statements) -> str:
    """The statement reading one tombstone by operation id."""
    return f"SELECT {_STONE_COLUMNS} FROM {sql.qualified}.tombstones WHERE operation_id = %s"


def _all_stones(sql: Statements) -> str:
    s = sql.qualified
    columns = ", ".join("t." + c.strip() for c in _STONE_COLUMNS.split(","))
    return (
        f"SELECT {columns}, o.operation_id IS NOT NULL FROM {s}.tombstones AS t"
        f" LEFT JOIN {s}.operations AS o ON o.operation_id = t.operation_id"
        " ORDER BY t.operation_id"
    )


def stone(row: Sequence[Any]) -> Tombstone:
    """The tombstone in a row of :func:`stone_select`."""
    values = list(row[:11])
    values[4] = EffectStatus(values[4])
    values[7], values[8], values[10] = bytes(values[7]), bytes(values[8]), bytes(values[10])
    values[9] = values[9].astimezone(UTC)
    return Tombstone(*values)


def tombstone_problems(conn: Connection, sql: Statements) -> list[VerifyProblem]:
    """Every tombstone's problems (edited, or a row back under its id)."""
    problems: list[VerifyProblem] = []
    for row in conn.execute(_all_stones(sql)).fetchall():
        problems.extend(retention.check_tombstone(stone(row), bool(row[11])))
    return problems


class PostgresPruning(BatchPruning["Connection"]):
    """The retention methods of :class:`~effectguard.ledger.postgres.PostgresEffectLedger`.

    :meth:`prune` is :class:`~effectguard.ledger.pruning.BatchPruning`'s; each page
    is one short transaction.
    """

    if TYPE_CHECKING:  # provided by the ledger
        _sql: Statements
        _clock: Callable[[], float] | None

        def _run(self, work: Callable[[Connection], T]) -> T: ...
        def _run_read(self, work: Callable[[Connection], T]) -> T: ...
        def _server_now(self) -> float: ...

    def tombstone(self, operation_id: str) -> Tombstone | None:
        """The tombstone a pruned ``operation_id`` left, or None if it was never pruned."""

        def work(conn: Connection) -> Tombstone | None:
            row = conn.execute(stone_select(self._sql), (operation_id,)).fetchone()
            return None if row is None else stone(row)

        return self._run_read(work)

    def tombstones(self) -> dict[str, Tombstone]:
        """Every tombstone, by operation id."""

        def work(conn: Connection) -> dict[str, Tombstone]:
            return {row[0]: stone(row) for row in conn.execute(_all_stones(self._sql)).fetchall()}

        return self._run_read(work)

    def _prune_now(self) -> float:
        return self._server_now()

    def _prune_page(self, conn: Connection, plan: PrunePass, after: After) -> list[OperationRecord]:
        s = self._sql.qualified
        select = (
            f"SELECT {select_list('o')} FROM {s}.operations AS o"
            " WHERE o.status = ANY(%(statuses)s) AND o.updated_at < %(before)s"
            " AND (%(after_at)s::timestamptz IS NULL"
            " OR (o.updated_at, o.operation_id) > (%(after_at)s, %(after_id)s))"
            " ORDER BY o.updated_at, o.operation_id LIMIT %(limit)s"
        ) + ("" if plan.dry_run else " FOR UPDATE SKIP LOCKED")
        params = {
            "statuses": [status.value for status in plan.statuses],
            "before": plan.cut.before,
            "after_at": None if after is None else after[0],
            "after_id": "" if after is None else after[1],
            "limit": retention.BATCH,
        }
        return [
            POSTGRES.record(row, plan.cut.now) for row in conn.execute(select, params).fetchall()
        ]

    def _prune_transaction(self, work: Callable[[Connection], T], *, write: bool) -> T | None:
        def in_transaction(conn: Connection) -> T:
            with conn.transaction():
                return work(conn)

        return self._run(in_transaction) if write else self._run_read(in_transaction)

    def _prune_records(
        self, conn: Connection, records: Sequence[OperationRecord], plan: PrunePass
    ) -> None:
        s = self._sql.qualified
        ids = [record.operation_id for record in records]
        events: dict[str, list[Any]] = {operation_id: [] for operation_id in ids}
        for row in conn.execute(
            f"SELECT {EVENT_SELECT} FROM {s}.events WHERE operation_id = ANY(%s)"
            " ORDER BY operation_id, seq",
            (ids,),
        ).fetchall():
            events[row[0]].append(POSTGRES.event(row))
        stones = []
        for record in records:
            chain = events[record.operation_id]
            first = bytes(chain[0].hash) if chain else b""
            tomb = retention.tombstone_of(record, first, plan.cut.now)
            stones.append(tomb)
            if plan.archive is not None:
                retention.write_archived(plan.archive, record, chain, tomb)
        with conn.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {s}.tombstones ({_STONE_COLUMNS}) VALUES ({', '.join(['%s'] * 11)})",
                [
                    (
                        t.operation_id,
                        t.contract,
                        t.contract_version,
                        t.fingerprint,
                        t.status.value,
                        t.provider_operation_id,
                        t.event_count,
                        t.event_head,
                        t.first_hash,
                        t.pruned_at,
                        t.digest,
                    )
                    for t in stones
                ],
            )
        conn.execute(f"DELETE FROM {s}.events WHERE operation_id = ANY(%s)", (ids,))
        conn.execute(f"DELETE FROM {s}.operations WHERE operation_id = ANY(%s)", (ids,))


# ---- PostgresEffectLedger ----

# A write that keeps finding its row changed by others gives up after this many reads.
_WRITE_ROUNDS = 16


# Rows fetched per round trip while verify streams the chains.
_VERIFY_BATCH = 2000


# The SQLSTATE of a duplicate key (unique_violation).
_UNIQUE_VIOLATION = "23505"


# How far a claim's estimate of the server's clock may be off before the server refuses it.
_CLAIM_SKEW = timedelta(milliseconds=500)


_SchemaState = tuple[bool, bool, bool, int]


class PostgresEffectLedger(OperatorResolution, PostgresPruning):
    """An :class:`~effectguard.ledger.protocol.EffectLedger` in a PostgreSQL schema.

    ``url`` is a libpq URL or conninfo string; its tables live in ``schema``
    (default ``effectguard``; a ``?schema=`` URL parameter works too), created
    with forward migrations on first open unless ``create=False``, in which case
    a missing ledger is a :class:`LedgerNotFoundError`. A ledger of a newer
    schema, or a schema holding tables that are not a ledger, is refused with
    :class:`LedgerSchemaError` and left as it was. ``pool_size`` caps this
    process's connections; ``timeout`` is how long a call waits for one.
    ``prepared_statements=False`` keeps psycopg from preparing statements on the
    server, for poolers that cannot carry them (PgBouncer in transaction mode
    before 1.21). ``clock`` (epoch seconds) replaces the server's clock when a
    call passes no ``now``.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        pool_size: int = 5,
        timeout: float = 10.0,
        create: bool = True,
        prepared_statements: bool = True,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not isinstance(url, str):
            msg = f"a PostgreSQL ledger needs a URL string, not {type(url).__name__}"
            raise TypeError(msg)
        if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 1:
            msg = f"pool_size must be an int >= 1, not {pool_size!r}"
            raise ConfigurationError(msg)
        if not (
            isinstance(timeout, (int, float))
            and not isinstance(timeout, bool)
            and 0 < timeout <= threading.TIMEOUT_MAX
        ):
            msg = (
                "timeout must be > 0 seconds and at most threading.TIMEOUT_MAX "
                f"({threading.TIMEOUT_MAX:g}), not {timeout!r}"
            )
            raise ConfigurationError(msg)
        conninfo, self.schema = split_target(url, schema)
        self._where = describe(conninfo)
        self.pool_size = pool_size
        self.timeout = float(timeout)
        self._clock = clock
        self._sql = Statements(self.schema)
        self._recent = Recent()
        self._db = Connections(
            conninfo,
            label=f"ledger {self._where} (schema {self.schema})",
            pool_size=pool_size,
            timeout=self.timeout,
            prepared_statements=prepared_statements,
        )
        self._prepare(create=create)

    #: A claim finds an existing row in its one round trip and writes nothing then.
    claims_first = True

    def __repr__(self) -> str:
        return f"PostgresEffectLedger({self._where!r}, schema={self.schema!r})"

    # -- schema ------------------------------------------------------------------------

    def _prepare(self, *, create: bool) -> None:
        """Check the schema holds a ledger this library can use, then migrate it forward."""
        with self._db.direct() as conn:
            state = self._inspect(conn)
            if state[3] == SCHEMA_VERSION:
                return
            self._refuse(state, create=create)
            with conn.transaction():
                # Two processes opening an empty database at once: one migrates,
                # the other waits here, then finds the work done.
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_lock_key(self.schema),))
                state = self._inspect(conn)
                self._refuse(state, create=create)
                schema_exists, _, _, version = state
                if not schema_exists:
                    conn.execute(f"CREATE SCHEMA {self._sql.qualified}")
                conn.execute(self._sql.bootstrap)
                for number in range(version + 1, SCHEMA_VERSION + 1):
                    conn.execute(self._sql.migration(number))
                    conn.execute(self._sql.record_version, (number,))
                if version < ANCHOR_MIGRATION:
                    # Operations claimed before the anchor existed join its shard 0.
                    self._anchor_unanchored(conn)

    def _anchor_unanchored(self, conn: Connection) -> None:
        """Anchor every operation not yet anchored, in id order (migration, bulk load)."""
        head = conn.execute(self._sql.anchor_head).fetchone()
        if head is None:
            msg = f"the claims anchor of schema {self.schema!r} has no head row"
            raise InternalError(msg)
        seq, running = int(head[0]), bytes(head[1])
        claims = []
        for operation_id, first in conn.execute(self._sql.unanchored).fetchall():
            claim_hash = b"" if first is None else bytes(first)
            seq += 1
            running = anchors.advance(running, operation_id, claim_hash)
            claims.append((0, seq, operation_id, running))
        if not claims:
            return
        # One COPY and one head update, not a statement (and a head row version) per claim.
        with conn.cursor() as cursor, cursor.copy(self._sql.copy_claims) as copy:
            for claim in claims:
                copy.write_row(claim)
        conn.execute(self._sql.set_anchor_head, (seq, running))

    def _inspect(self, conn: Connection) -> _SchemaState:
        """Return (schema exists, version table exists, ledger tables exist, version)."""
        row = conn.execute(self._sql.inspect, {"schema": self.schema}).fetchone()
        if row is None:
            msg = "the schema inspection query returned no row"
            raise InternalError(msg)
        schema_exists, versioned, tables = bool(row[0]), bool(row[1]), bool(row[2])
        version = 0
        if versioned:
            found = conn.execute(self._sql.version).fetchone()
            version = int(found[0]) if found is not None else 0
        return schema_exists, versioned, tables, version

    def _refuse(self, state: _SchemaState, *, create: bool) -> None:
        _, versioned, tables, version = state
        where = f"schema {self.schema!r} of {self._where}"
        if tables and not versioned:
            msg = f"{where} holds tables that are not an effectguard ledger"
            raise LedgerSchemaError(msg)
        if version > SCHEMA_VERSION:
            msg = (
                f"the ledger in {where} has schema version {version}, newer than this "
                f"effectguard supports ({SCHEMA_VERSION}); upgrade effectguard"
            )
            raise LedgerSchemaError(msg)
        if not versioned and not create:
            msg = f"no effectguard ledger in {where} (reads never create one)"
            raise LedgerNotFoundError(msg)

    # -- reading -----------------------------------------------------------------------

    def _given(self, now: float | None) -> datetime | None:
        """The ledger's now unless it is the server's: the caller's, else the ``clock``'s."""
        if now is None and self._clock is not None:
            now = self._clock()
        return None if now is None else moment(now)

    def _fetch(
        self, operation_id: str, now: float | None
    ) -> tuple[OperationRecord | None, datetime]:
        """Read the operation and the ledger's now in one round trip."""

        def work(conn: Connection) -> tuple[Any, ...]:
            row = conn.execute(self._sql.select_one, (operation_id,)).fetchone()
            if row is None:
                msg = f"the read of {operation_id!r} returned no row, not even the clock's"
                raise InternalError(msg)
            return row

        row = self._db.read(work)
        server_time = utc(row[0])
        at = self._given(now) or server_time
        record = None if row[1] is None else POSTGRES.record(row[1:], at)
        self._recent.saw(operation_id, record, server_time)
        return record, at

    def _read_back(
        self, operation_id: str, now: float | None
    ) -> tuple[OperationRecord | None, datetime]:
        """Read the row after a write whose answer was lost, trying new connections until timeout.

        A restarting server or a failover breaks more than one connection, so
        one more try is not enough to learn what the lost write did.
        """
        deadline = time.monotonic() + self.timeout
        while True:
            self._db.recover()
            try:
                return self._fetch(operation_id, now)
            except ConnectionLost as again:
                if time.monotonic() >= deadline:
                    msg = (
                        f"lost the connection to {self._where} while writing operation "
                        f"{operation_id!r}, and could not read it back within {self.timeout:g}s "
                        "to learn whether the write committed; the operation stays as the "
                        "ledger has it, and a later call reads it and reconciles"
                    )
                    raise ConnectionLost(msg) from again
            time.sleep(min(0.05, self.timeout / 20))

    def _wrote(
        self, operation_id: str, current: OperationRecord, heads: Sequence[tuple[int, bytes]]
    ) -> bool:
        """True when one of the writes that produced ``heads`` (count, head) is in the chain."""
        if any((current.event_count, current.event_head) == head for head in heads):
            return True
        if not any(current.event_count > count for count, _ in heads):
            return False
        # Others appended after it: the event at its sequence number still carries its hash.
        chain = self.events(operation_id)
        return any(
            0 < count <= len(chain) and chain[count - 1].hash == head for count, head in heads
        )

    def _start(
        self,
        operation_id: str,
        expect: Expect,
        now: float | None,
        known: OperationRecord | None = None,
    ) -> tuple[OperationRecord | None, datetime]:
        """The row and time a transition starts from: a moment-old guess if it passes, or a read.

        The guess is the caller's ``known`` record, else the row this ledger saw last.
        """
        seen = self._recent.get(operation_id)
        if seen is not None and seen.record is not None:
            guess = seen.record
            if known is not None and known.operation_id == operation_id:
                guess = known
            if describe_mismatch(guess, expect, lease_expired=not guess.lease_live) is None:
                return guess, self._given(now) or seen.server_now()
        return self._fetch(operation_id, now)

    # -- primitives --------------------------------------------------------------------

    def claim(
        self, operation: NewOperation, *, now: float | None = None
    ) -> tuple[OperationRecord, bool]:
        """See :meth:`EffectLedger.claim`: one round trip, whether it inserts or finds the row."""
        operation_id = operation.operation_id
        given = self._given(now)
        # The events' times are hashed, so the claim needs the server's time before it
        # is sent: an estimate the statement checks, else (first use) a read.
        skew: timedelta | None = None if given is not None else _CLAIM_SKEW
        if given is None and self._recent.server_now() is None:
            existing, fresh = self._fetch(operation_id, None)
            if existing is not None:
                return existing, False
            skew, given = None, fresh
        lost = False
        for _ in range(_WRITE_ROUNDS):
            try:
                row, moment = self._db.run(functools.partial(self._insert, operation, given, skew))
            except Tombstoned as exc:
                self._refuse_tombstoned(operation, exc)
            except ConnectionLost:
                lost = True
                existing, _ = self._read_back(operation_id, now)
                if existing is not None:
                    # After a lost connection, only this claim's own token proves it committed.
                    return existing, existing.lease_token == operation.lease.token
                continue
            server_time = utc(row[0])
            if row[1]:
                record = POSTGRES.record(row[2:], moment)
                self._recent.saw(operation_id, record, server_time)
                return record, True
            if row[2] is not None:
                record = POSTGRES.record(row[2:], self._given(now) or server_time)
                self._recent.saw(operation_id, record, server_time)
                return record, lost and record.lease_token == operation.lease.token
            # Nothing visible: the estimate was refused (try the server's own time, unchecked,
            # as a read would give it) or a claim that raced this one committed after it began.
            self._recent.clock(server_time)
            skew = None
        msg = f"could not claim operation {operation_id!r}: it keeps changing"
        raise LedgerLockedError(msg)

    def _refuse_tombstoned(self, operation: NewOperation, exc: Tombstoned) -> NoReturn:
        stone = self.tombstone(operation.operation_id)
        if stone is None:
            msg = f"operation {operation.operation_id!r} was refused as pruned but has no tombstone"
            raise InternalError(msg) from exc
        raise retention.refusal(stone, operation.fingerprint) from exc

    def _run(self, work: Callable[[Connection], T]) -> T:
        return self._db.run(work)

    def _run_read(self, work: Callable[[Connection], T]) -> T:
        return self._db.read(work)

    def _server_now(self) -> float:
        if self._clock is not None:
            return self._clock()
        row = self._db.read(lambda conn: conn.execute("SELECT statement_timestamp()").fetchone())
        return float(row[0].timestamp()) if row is not None else time.time()

    def _insert(
        self,
        operation: NewOperation,
        given: datetime | None,
        skew: timedelta | None,
        conn: Connection,
    ) -> tuple[tuple[Any, ...], datetime]:
        """Run the claim statement, dated once a connection is in hand; its row and that date."""
        moment = given or self._recent.server_now()
        if moment is None:
            msg = f"no server time to date the claim of {operation.operation_id!r} with"
            raise InternalError(msg)
        params = created(operation, moment)
        params["skew"] = skew
        row = conn.execute(self._sql.claim, params).fetchone()
        if row is None:
            msg = f"the claim of {operation.operation_id!r} returned no row, not even the clock's"
            raise InternalError(msg)
        return row, moment

    def transition(
        self,
        operation_id: str,
        expect: Expect,
        changes: Changes,
        events: Sequence[EventDraft],
        *,
        now: float | None = None,
        known: OperationRecord | None = None,
    ) -> OperationRecord:
        """See :meth:`EffectLedger.transition`: ``known`` is where the write starts from."""
        conditions = []
        if expect.statuses is not None:
            conditions.append("o.status = ANY(%(statuses)s::text[])")
        if expect.lease_token is None:
            conditions.append("o.lease_token IS NULL")
        elif expect.lease_token is not UNSET:
            conditions.append("o.lease_token = %(expect_token)s")
        if expect.lease_expired:
            conditions.append(
                "(o.lease_token IS NULL OR o.lease_expires_at IS NULL"
                " OR o.lease_expires_at <= %(at)s)"
            )
        # (count, head) of every attempt whose answer was lost: any of them may have committed.
        lost: list[tuple[int, bytes]] = []
        current, moment = self._start(operation_id, expect, now, known)
        for _ in range(_WRITE_ROUNDS):
            if current is None:
                raise OperationNotFoundError(operation_id)
            if lost and self._wrote(operation_id, current, lost):
                return current  # the write whose acknowledgement was lost did commit
            problem = describe_mismatch(current, expect, lease_expired=not current.lease_live)
            if problem is not None:
                msg = f"write to operation {operation_id!r} refused: {problem}"
                raise FencedWriteError(msg)
            columns = POSTGRES.changed_columns(changes, chain.to_micros(moment))
            params = chain_parameters(
                operation_id,
                events,
                current.event_count,
                current.event_head,
                moment,
                committed.commits_of(columns),
            )
            params.update(columns)
            params.update(
                operation_id=operation_id,
                read_count=current.event_count,
                statuses=sorted(status.value for status in expect.statuses or ()),
                expect_token=None if expect.lease_token is UNSET else expect.lease_token,
            )
            statement = self._sql.transition(columns, conditions)

            def work(conn: Connection, statement: str = statement, params: Any = params) -> Any:
                return conn.execute(statement, params).fetchone()

            try:
                row = self._db.run(work)
            except ConnectionLost:
                # Without events there is no chain head to recognise the write by.
                if not events:
                    raise
                lost.append((params["new_count"], params["new_head"]))
                current, moment = self._read_back(operation_id, now)
                continue
            if row is not None:
                record = POSTGRES.record(row, moment)
                self._recent.wrote(record)
                return record
            current, moment = self._fetch(operation_id, now)
        msg = f"could not write operation {operation_id!r}: it keeps changing"
        raise LedgerLockedError(msg)

    def renew(
        self, operation_id: str, lease_token: str, seconds: float, *, now: float | None = None
    ) -> None:
        """See :meth:`EffectLedger.renew`."""
        micros = round(seconds * 1_000_000)
        params: dict[str, Any] = {"operation_id": operation_id, "token": lease_token}
        given = self._given(now)
        if given is None:
            statement = self._sql.renew(server_clock=True)
            params["micros"] = micros
        else:
            statement = self._sql.renew(server_clock=False)
            params["expires"] = after(given, seconds)

        def work(conn: Connection) -> int:
            return conn.execute(statement, params).rowcount

        # Renewing twice with one token is harmless, so a lost connection just retries.
        if self._db.read(work) == 0:
            msg = f"lease on operation {operation_id!r} is no longer held by this writer"
            raise FencedWriteError(msg)

    def get(self, operation_id: str, *, now: float | None = None) -> OperationRecord | None:
        """See :meth:`EffectLedger.get`."""
        check_operation_id(operation_id)
        return self._fetch(operation_id, now)[0]

    def list_operations(
        self,
        *,
        status: EffectStatus | None = None,
        contract: str | None = None,
        limit: int = 100,
    ) -> list[OperationRecord]:
        """See :meth:`EffectLedger.list_operations`."""
        check_limit(limit)
        clauses = []
        params: dict[str, Any] = {"limit": limit}
        if status is not None:
            clauses.append("o.status = %(status)s")
            params["status"] = EffectStatus(status).value
        if contract is not None:
            clauses.append("o.contract = %(contract)s")
            params["contract"] = contract
        statement = self._sql.select_many(clauses)

        def work(conn: Connection) -> list[tuple[Any, ...]]:
            return conn.execute(statement, params).fetchall()

        given = self._given(None)
        return [POSTGRES.record(row[:-1], given or utc(row[-1])) for row in self._db.read(work)]

    def events(self, operation_id: str) -> list[EffectEvent]:
        """See :meth:`EffectLedger.events`."""
        check_operation_id(operation_id)

        def work(conn: Connection) -> list[tuple[Any, ...]]:
            return conn.execute(self._sql.events, (operation_id,)).fetchall()

        return [POSTGRES.event(row) for row in self._db.read(work)]

    def commitments(self, operation_id: str) -> list[Mapping[str, Any]]:
        """See :func:`~effectguard.ledger.protocol.read_commitments`: no event decoded whole."""
        check_operation_id(operation_id)

        def work(conn: Connection) -> list[tuple[Any, ...]]:
            return conn.execute(self._sql.commitments, (operation_id,)).fetchall()

        return [json.loads(text) for (text,) in self._db.read(work)]

    def verify(self, *, anchor: AnchorHead | None = None) -> VerifyReport:
        """See :meth:`EffectLedger.verify`; streams, so memory holds one chain at a time."""
        return self._db.read(lambda conn: self._verify(conn, anchor))

    def anchor_head(self) -> AnchorHead:
        """See :meth:`EffectLedger.anchor_head`."""

        def work(conn: Connection) -> list[tuple[Any, ...]]:
            return conn.execute(self._sql.anchor_heads).fetchall()

        heads = [AnchorHead(0, anchors.START)] * ANCHOR_SHARDS
        for shard, count, running in self._db.read(work):
            heads[shard] = AnchorHead(int(count), bytes(running))
        return anchors.joined(heads)

    def _verify(self, conn: Connection, anchor: AnchorHead | None) -> VerifyReport:
        with (
            conn.transaction(),
            conn.cursor(name="effectguard_verify_heads") as heads,
            conn.cursor(name="effectguard_verify_events") as event_rows,
        ):
            # One snapshot for both streams, so a concurrent write is seen whole or not at all.
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            heads.itersize = event_rows.itersize = _VERIFY_BATCH
            heads.execute(self._sql.verify_heads)
            event_rows.execute(self._sql.verify_events)
            report = chain.verify(heads, map(POSTGRES.read_event, event_rows))
            unanchored = [row[0] for row in conn.execute(self._sql.unanchored)]
            with conn.cursor(name="effectguard_verify_claims") as claims:
                claims.itersize = _VERIFY_BATCH
                claims.execute(self._sql.verify_claims)
                problems, head = anchors.check_shards(claims, unanchored, ANCHOR_SHARDS, anchor)
            stones = tombstone_problems(conn, self._sql)
            return anchors.merged(report, [*problems, *stones], head)

    def bulk_load(self, operations: bulk.Loadable) -> int:
        """Write ``operations`` and their events as given, in one transaction; return how many.

        For building benchmark ledgers and restoring exported ones: it bypasses
        the state machine and writes each record and its events exactly as
        given (``lease_live`` is judged on read, as always), by ``COPY`` on a
        connection of its own. It never writes a chain ``verify()`` would
        reject: a broken chain, or an operation id already stored or given
        twice, raises :class:`InvalidRequestError` and nothing is written.
        Then refreshes the query planner's statistics.
        """
        loaded = 0
        try:
            with self._db.direct() as conn:
                with conn.transaction(), conn.cursor() as cursor:
                    for operation_rows, event_rows in bulk.chunks(POSTGRES, operations):
                        for statement, values in (
                            (self._sql.copy_operations, operation_rows),
                            (self._sql.copy_events, event_rows),
                        ):
                            with cursor.copy(statement) as copy:
                                for row in values:
                                    copy.write_row(row)
                        loaded += len(operation_rows)
                    self._anchor_unanchored(conn)
                conn.execute(self._sql.analyze)
        except LedgerUnavailableError as exc:
            if getattr(exc.__cause__, "sqlstate", None) == _UNIQUE_VIOLATION:
                raise bulk.duplicate_error(f"{self._where} (schema {self.schema})", exc) from exc
            raise
        return loaded

    def close(self) -> None:
        """Close this process's connections; the ledger is unusable afterwards."""
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
