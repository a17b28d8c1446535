"""The PostgreSQL ledger's tables as data: its forward migrations, in order.

Pure text, no driver: :mod:`effectguard.ledger.postgres.sql` formats each one
for a schema and :mod:`effectguard.ledger.postgres.ledger` applies those not
yet applied, once, in order, under a lock.
"""

from __future__ import annotations

__all__ = ["ANCHOR_MIGRATION", "ANCHOR_SHARDS", "MIGRATIONS", "SCHEMA_VERSION", "TOMBSTONED"]

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
