"""The ledger file's format, as data: its application id, its schema, its migrations.

Opening, checking and migrating a file by a format is written once, in
:mod:`effectguard.ledger.sqlite.connection`, for the ledger and the runtime's
checkpoint store alike.
"""

from __future__ import annotations

from effectguard.ledger.sqlite import anchoring, pruning
from effectguard.ledger.sqlite.connection import FileFormat

__all__ = [
    "ANCHOR_MIGRATION",
    "APPLICATION_ID",
    "ATTENTION_STATUSES",
    "FORMAT",
    "MIGRATIONS",
    "NEEDING_ATTENTION",
    "SCHEMA_VERSION",
]

#: ``PRAGMA application_id`` of every effectguard ledger file ("EGLD").
APPLICATION_ID = 0x45474C44

MIGRATIONS: tuple[str, ...] = (
    # 1: operations and their hash-chained events.
    """
    CREATE TABLE operations (
        operation_id TEXT PRIMARY KEY,
        contract TEXT NOT NULL,
        contract_version INTEGER NOT NULL,
        fingerprint TEXT NOT NULL,
        provider_key TEXT,
        status TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        attempt_budget INTEGER NOT NULL,
        arguments TEXT NOT NULL,
        output TEXT,
        provider_operation_id TEXT,
        reason TEXT,
        evidence TEXT,
        lease_token TEXT,
        lease_owner TEXT,
        lease_expires_us INTEGER,
        overlap TEXT,
        created_us INTEGER NOT NULL,
        updated_us INTEGER NOT NULL,
        first_dispatched_us INTEGER NOT NULL,
        event_count INTEGER NOT NULL,
        event_head BLOB NOT NULL
    );
    CREATE TABLE events (
        operation_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        type TEXT NOT NULL,
        from_status TEXT,
        to_status TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        at_us INTEGER NOT NULL,
        evidence TEXT,
        hash BLOB NOT NULL,
        PRIMARY KEY (operation_id, seq)
    ) WITHOUT ROWID;
    """,
    # 2: operator listings by status or contract stay fast on large ledgers.
    """
    CREATE INDEX operations_by_status ON operations (status, updated_us);
    CREATE INDEX operations_by_contract ON operations (contract, updated_us);
    CREATE INDEX operations_by_update ON operations (updated_us);
    """,
    # 3: events commit to the row fields they set; every claim is anchored ledger-wide
    # (the operations already there are anchored right after, in the same transaction).
    """
    ALTER TABLE events ADD COLUMN commits TEXT;
    CREATE TABLE claims (
        seq INTEGER PRIMARY KEY,
        operation_id TEXT NOT NULL,
        running BLOB NOT NULL
    );
    """,
    # 4: the operations an operator lists during an incident (neither in flight nor
    # settled) are read from one small index holding every column, never from the
    # table; a call that goes DISPATCHED -> CONFIRMED or REJECTED never touches it.
    """
    CREATE INDEX operations_needing_attention ON operations (status, updated_us,
        operation_id, contract, contract_version, fingerprint, provider_key, attempts,
        attempt_budget, arguments, output, provider_operation_id, reason, evidence,
        lease_token, lease_owner, lease_expires_us, overlap, created_us,
        first_dispatched_us, event_count, event_head)
        WHERE status IN ('PREPARED', 'OUTCOME_UNKNOWN', 'RECONCILING', 'QUARANTINED');
    """,
    # 5: the tombstones of pruned operations (ledger/sqlite/pruning.py).
    pruning.MIGRATION,
)
#: Migration 4's condition, written into a listing of those statuses so SQLite uses its index.
NEEDING_ATTENTION = "status IN ('PREPARED', 'OUTCOME_UNKNOWN', 'RECONCILING', 'QUARANTINED')"
#: The statuses that condition holds for.
ATTENTION_STATUSES = frozenset({"PREPARED", "OUTCOME_UNKNOWN", "RECONCILING", "QUARANTINED"})
# SQLite uses a partial index only for a query that repeats its condition word for word.
if NEEDING_ATTENTION not in MIGRATIONS[3]:
    _msg = "the listing's condition is out of step with migration 4's index"
    raise TypeError(_msg)

#: The schema version this library writes; older files are migrated forward on open.
SCHEMA_VERSION = len(MIGRATIONS)

#: The migration that created the claims anchor.
ANCHOR_MIGRATION = 3

#: The ledger's file format (the shared opening and migration code reads it).
FORMAT = FileFormat(
    "ledger", APPLICATION_ID, MIGRATIONS, after={ANCHOR_MIGRATION: anchoring.anchor_unanchored}
)
