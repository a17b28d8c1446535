"""The PostgreSQL ledger: the SQLite ledger's guarantees, shared by workers on many hosts.

Importing this package imports psycopg (``pip install 'effectguard[postgres]'``).
:mod:`~effectguard.ledger.postgres.ledger` is the backend,
:mod:`~effectguard.ledger.postgres.sql` its statements and migrations,
:mod:`~effectguard.ledger.postgres.rows` its row mapping,
:mod:`~effectguard.ledger.postgres.connections` the one module that talks to
the driver, and :mod:`~effectguard.ledger.postgres.recent` the per-thread view
a write starts from.
"""

from effectguard.ledger.postgres.ledger import SCHEMA_VERSION, PostgresEffectLedger

__all__ = ["SCHEMA_VERSION", "PostgresEffectLedger"]
