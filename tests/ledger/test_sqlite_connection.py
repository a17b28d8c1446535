"""SQLite file handling written once: the ledger and the checkpoint store open files alike."""

from __future__ import annotations

import sqlite3

import pytest

from effectguard import SQLiteEffectLedger
from effectguard.errors import CheckpointError, LedgerSchemaError
from effectguard.ledger import sqlite as connection
from effectguard.ledger import sqlite as migrations
from effectguard.ledger.sqlite import foreign_message
from effectguard.runtime.checkpoints import sqlite as checkpoints
from effectguard.runtime.checkpoints.sqlite import SQLiteCheckpointStore


def _ledger_file(path):
    ledger = SQLiteEffectLedger(path)
    ledger._write(lambda conn: None)  # the file exists with the ledger's schema
    ledger.close()
    return path


def _checkpoint_file(path):
    SQLiteCheckpointStore(path).close()
    return path


def test_each_store_refuses_the_others_file_with_the_one_shared_message(tmp_path):
    """A ledger on a checkpoint file and a store on a ledger file: one message, naming both ids."""
    ledger_path = _ledger_file(tmp_path / "ledger.db")
    store_path = _checkpoint_file(tmp_path / "runs.db")
    ledger_bytes, store_bytes = ledger_path.read_bytes(), store_path.read_bytes()

    with pytest.raises(LedgerSchemaError) as as_ledger:
        SQLiteEffectLedger(store_path)
    with pytest.raises(CheckpointError) as as_store:
        SQLiteCheckpointStore(ledger_path)

    assert str(as_ledger.value) == foreign_message(
        store_path, migrations.FORMAT, checkpoints.APPLICATION_ID
    )
    assert str(as_store.value) == foreign_message(
        ledger_path, checkpoints.FORMAT, migrations.APPLICATION_ID
    )
    assert "0x45474350 ('EGCP')" in str(as_ledger.value)
    assert "0x45474C44 ('EGLD')" in str(as_store.value)
    assert "not an effectguard ledger" in str(as_ledger.value)
    assert "not an effectguard checkpoint store" in str(as_store.value)
    assert ledger_path.read_bytes() == ledger_bytes
    assert store_path.read_bytes() == store_bytes


def _empty_file_with_user_version(path, version):
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {version}")
    conn.close()
    return path


def test_an_empty_file_another_tool_versioned_becomes_a_working_ledger(tmp_path):
    """No tables and a foreign user_version: the ledger's migrations all run, from version 0."""
    path = _empty_file_with_user_version(tmp_path / "ledger.db", 7)
    ledger = SQLiteEffectLedger(path)
    assert ledger.list_operations() == []
    ledger.close()
    conn = sqlite3.connect(path)
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert {"operations", "events"} <= tables
    assert conn.execute("PRAGMA user_version").fetchone()[0] == migrations.SCHEMA_VERSION
    conn.close()


def test_an_empty_file_another_tool_versioned_becomes_a_working_checkpoint_store(tmp_path):
    """The checkpoint store follows the same rule: an empty file is its to create."""
    path = _empty_file_with_user_version(tmp_path / "runs.db", 7)
    with SQLiteCheckpointStore(path) as store:
        assert store.list_runs() == []


def test_the_format_version_is_the_count_of_its_migrations():
    """A format's schema version is derived from its migrations, never kept beside them."""
    assert migrations.FORMAT.version == len(migrations.MIGRATIONS) == migrations.SCHEMA_VERSION
    assert checkpoints.FORMAT.version == checkpoints.SCHEMA_VERSION == 1
    assert connection.FileFormat("x", 1, ("a", "b")).version == 2
