"""The PostgreSQL site: each ledger and the baseline in a schema of its own, dropped at the end."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from typing import Any

import psycopg

from benchmarks._config import BenchError
from effectguard.errors import InternalError
from effectguard.ledger._rows import Loadable
from effectguard.ledger.postgres import PostgresEffectLedger, describe

__all__ = ["PostgresRaw", "PostgresSite"]

# The durability the ledger gives its own sessions (see _postgres_connections).
_DURABLE = (
    "SET TIME ZONE 'UTC'; SELECT set_config('synchronous_commit', 'on', false)"
    " WHERE current_setting('synchronous_commit') = 'off'"
)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class PostgresRaw:
    """The hand-written baseline: a table keyed by operation id, one commit per statement."""

    def __init__(self, url: str, schema: str) -> None:
        self._conn = psycopg.connect(url, autocommit=True)
        self._conn.execute(_DURABLE)
        # SQL is assembled from the bench's own schema name, never from input.
        table = f'"{schema}".calls'
        self._conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        self._conn.execute(
            f'CREATE TABLE IF NOT EXISTS {table} (operation_id text COLLATE "C" PRIMARY KEY,'
            " status text NOT NULL, arguments json NOT NULL, output json,"
            " updated_at timestamptz NOT NULL)"
        )
        self._conn.execute(
            f"CREATE INDEX IF NOT EXISTS calls_by_status ON {table} (status, updated_at)"
        )
        self._insert = (
            f"INSERT INTO {table} (operation_id, status, arguments, updated_at)"  # noqa: S608 - table names are the bench's own constants
            " VALUES (%s, 'DISPATCHED', %s::json, statement_timestamp())"
        )
        self._update = (
            f"UPDATE {table} SET status = 'CONFIRMED', output = %s::json,"  # noqa: S608 - table names are the bench's own constants
            " updated_at = statement_timestamp() WHERE operation_id = %s"
        )
        self._select = f"SELECT status, output::text FROM {table} WHERE operation_id = %s"  # noqa: S608 - table names are the bench's own constants

    def record(self, operation_id: str, arguments: str, output: str) -> None:
        """See :meth:`RawStore.record`."""
        self._conn.execute(self._insert, (operation_id, arguments))
        self._conn.execute(self._update, (output, operation_id))

    def read(self, operation_id: str) -> Any:
        """See :meth:`RawStore.read`."""
        row = self._conn.execute(self._select, (operation_id,)).fetchone()
        if row is None:
            msg = f"the bench lost the row {operation_id!r} it wrote"
            raise InternalError(msg)
        return json.loads(row[1])

    def close(self) -> None:
        """See :meth:`RawStore.close`."""
        self._conn.close()


class PostgresSite:
    """Schemas ``ebench_<pid>_<random>_<name>`` in the database ``url`` names.

    The bench needs the right to create schemas there; every schema it made is
    dropped by :meth:`close`, whatever happened.
    """

    backend = "postgres"

    def __init__(self, url: str) -> None:
        if not url.startswith(("postgresql://", "postgres://")):
            msg = f"--db {url!r} is not a postgresql:// URL"
            raise BenchError(msg)
        self.url = url
        self._where = describe(url)
        try:
            self._admin = psycopg.connect(url, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            msg = f"cannot connect to {self._where}: {_first_line(exc)}"
            raise BenchError(msg) from exc
        self._admin.execute(_DURABLE)
        self._prefix = f"ebench_{os.getpid()}_{secrets.token_hex(3)}"
        self._ledgers: list[PostgresEffectLedger] = []
        self._raws: list[PostgresRaw] = []

    def _schema(self, name: str) -> str:
        return f"{self._prefix}_{name}"

    def ledger(self, name: str) -> PostgresEffectLedger:
        """See :meth:`Site.ledger`."""
        ledger = PostgresEffectLedger(self.url, schema=self._schema(name))
        self._ledgers.append(ledger)
        return ledger

    def target(self, name: str) -> str:
        """See :meth:`Site.target`."""
        return f"{self.url}{'&' if '?' in self.url else '?'}schema={self._schema(name)}"

    def raw(self) -> PostgresRaw:
        """See :meth:`Site.raw`."""
        store = PostgresRaw(self.url, self._schema("raw"))
        self._raws.append(store)
        return store

    def bulk_load(self, name: str, histories: Loadable) -> None:
        """See :meth:`Site.bulk_load`, then VACUUM, as a long-lived ledger would have been."""
        ledger = self.ledger(name)
        try:
            ledger.bulk_load(histories)
        finally:
            ledger.close()
        schema = f'"{self._schema(name)}"'
        self._admin.execute(f"VACUUM {schema}.operations")
        self._admin.execute(f"VACUUM {schema}.events")

    def ledger_bytes(self, name: str) -> int:
        """See :meth:`Site.ledger_bytes`: both tables with their indexes and TOAST."""
        schema = self._schema(name)
        row = self._admin.execute(
            "SELECT pg_total_relation_size(%s::regclass) + pg_total_relation_size(%s::regclass)",
            (f'"{schema}".operations', f'"{schema}".events'),
        ).fetchone()
        if row is None:
            msg = "a SELECT without FROM returned no row"
            raise InternalError(msg)
        return int(row[0])

    def environment(self) -> dict[str, Any]:
        """See :meth:`Site.environment`."""
        settings = {}
        for name in ("server_version", "synchronous_commit", "fsync", "wal_sync_method"):
            row = self._admin.execute(f"SHOW {name}").fetchone()
            settings[name] = None if row is None else row[0]
        return {
            "postgres": settings.pop("server_version"),
            "psycopg": psycopg.__version__,
            "server": self._where,
            **settings,
        }

    def close(self) -> None:
        """See :meth:`Site.close`."""
        for ledger in self._ledgers:
            ledger.close()
        for store in self._raws:
            with contextlib.suppress(psycopg.Error):
                store.close()
        found = self._admin.execute(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)", (self._prefix,)
        ).fetchall()
        for (schema,) in found:
            self._admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        self._admin.close()
