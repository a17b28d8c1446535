"""The SQLite ledger: one file, durable on one host, shared by its threads and processes.

:mod:`~effectguard.ledger.sqlite.ledger` is the backend (its rows are
:data:`effectguard.ledger.schema.SQLITE`), and
:mod:`~effectguard.ledger.sqlite.files` creates and opens SQLite files the
way both the ledger and the runtime's checkpoint store need them.
"""

from effectguard.ledger.sqlite.ledger import SCHEMA_VERSION, SQLiteEffectLedger

__all__ = ["SCHEMA_VERSION", "SQLiteEffectLedger"]
