"""Ledger backends, the protocol they implement, and :func:`open_ledger` to pick one."""

from __future__ import annotations

import os
from typing import Any

from effectguard.errors import ConfigurationError
from effectguard.ledger.protocol import EffectLedger

__all__ = ["EffectLedger", "open_ledger"]

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_DRIVERS = frozenset({"psycopg", "psycopg_pool"})


def open_ledger(target: str | os.PathLike[str] | EffectLedger, **options: Any) -> EffectLedger:
    """Return the ledger ``target`` names.

    A ``postgresql://`` (or ``postgres://``) URL opens a PostgreSQL ledger
    (install ``effectguard[postgres]``; ``?schema=name`` picks its schema); any
    other string or path opens a SQLite ledger file; a ledger object is returned
    as it is. ``options`` go to the backend's constructor (``create=False``
    makes a missing ledger an error instead of creating it).
    """
    if isinstance(target, EffectLedger):
        return target
    if isinstance(target, str) and target.startswith(_POSTGRES_SCHEMES):
        # Imported only here, so that SQLite users never need psycopg.
        try:
            from effectguard.ledger.postgres import PostgresEffectLedger  # noqa: PLC0415 - a backend is imported only when chosen
        except ModuleNotFoundError as exc:
            if exc.name not in _DRIVERS:
                raise
            msg = f"a PostgreSQL ledger needs psycopg: pip install 'effectguard[postgres]' ({exc})"
            raise ConfigurationError(msg) from exc
        return PostgresEffectLedger(target, **options)
    if isinstance(target, (str, os.PathLike)):
        from effectguard.ledger.sqlite import SQLiteEffectLedger  # noqa: PLC0415 - a backend is imported only when chosen

        return SQLiteEffectLedger(target, **options)
    msg = f"a ledger is a path, a postgresql:// URL or a ledger object, not {type(target).__name__}"
    raise TypeError(msg)
