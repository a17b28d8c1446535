"""The PostgreSQL ledger's SQL: where it lives, its migrations and its statements.

Pure text, no driver: :mod:`effectguard.ledger.postgres` executes it. Every
statement names its tables qualified by the ledger's schema, which is
validated as a plain lowercase identifier before it is ever put in SQL.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit, urlunsplit

from effectguard.errors import ConfigurationError
from effectguard.ledger import chain
from effectguard.ledger.postgres.migrations import (
    ANCHOR_MIGRATION,
    ANCHOR_SHARDS,
    MIGRATIONS,
    SCHEMA_VERSION,
)
from effectguard.ledger.schema import EVENT_COLUMNS, Kind
from effectguard.ledger.schema import OPERATION_COLUMNS as _OPERATIONS
from effectguard.ledger.schema import POSTGRES as _ROWS

__all__ = [
    "ANCHOR_MIGRATION",
    "ANCHOR_SHARDS",
    "DEFAULT_SCHEMA",
    "EVENT_SELECT",
    "MIGRATIONS",
    "OPERATION_COLUMNS",
    "SCHEMA_VERSION",
    "Statements",
    "check_schema_name",
    "select_list",
    "split_target",
]

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
