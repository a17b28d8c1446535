"""Where a bench run keeps its ledgers and its hand-written baseline, per backend.

A :class:`Site` makes fresh ledgers by name, the raw store the baselines
write to with the same durability, and bulk-loads large ledgers through the
ledger's own ``bulk_load``; it removes everything it made when closed. The
PostgreSQL site is imported only when asked for, so a SQLite bench never
needs psycopg.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from benchmarks._config import BenchError
from effectguard import EffectLedger
from effectguard.ledger._rows import Loadable

__all__ = ["RawStore", "Site", "open_site"]


class RawStore(Protocol):
    """The baseline: the same durable work as a guarded call, written by hand."""

    def record(self, operation_id: str, arguments: str, output: str) -> None:
        """Insert the call's row and commit, then store its output and commit: two commits."""
        ...

    def read(self, operation_id: str) -> Any:
        """Read one row by its primary key and decode its output."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...


class Site(Protocol):
    """Ledgers and a raw store on one backend, all removed by :meth:`close`."""

    backend: str

    def ledger(self, name: str) -> EffectLedger:
        """Open ledger ``name``, creating it empty the first time."""
        ...

    def target(self, name: str) -> str:
        """What ``open_ledger`` in another process takes to open ledger ``name``."""
        ...

    def raw(self) -> RawStore:
        """Open the baseline's store (created empty the first time)."""
        ...

    def bulk_load(self, name: str, histories: Loadable) -> None:
        """Write ``histories`` into the new, empty ledger ``name`` with its ``bulk_load``."""
        ...

    def ledger_bytes(self, name: str) -> int:
        """Bytes ledger ``name`` occupies (tables and indexes), with its handles closed."""
        ...

    def environment(self) -> dict[str, Any]:
        """The backend's version and durability settings, for the report."""
        ...

    def close(self) -> None:
        """Remove every ledger and store this site made."""
        ...


def open_site(backend: str, db: str | None) -> Site:
    """Return the site for ``backend``: ``db`` is a directory (SQLite) or a database URL."""
    if backend == "postgres":
        try:
            from benchmarks._postgres_site import PostgresSite  # noqa: PLC0415 - psycopg
        except ModuleNotFoundError as exc:
            msg = f"the PostgreSQL bench needs psycopg: pip install 'effectguard[postgres]' ({exc})"
            raise BenchError(msg) from exc
        if db is None:
            msg = "--backend postgres needs --db postgresql://USER@HOST:PORT/DBNAME"
            raise BenchError(msg)
        return PostgresSite(db)
    from benchmarks._sqlite_site import SQLiteSite  # noqa: PLC0415 - a backend's site is imported only when chosen

    return SQLiteSite(None if db is None else Path(db))
