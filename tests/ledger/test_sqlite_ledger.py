"""What is particular to the SQLite ledger: the file, its pragmas, its schema, its lock."""

from __future__ import annotations

import dataclasses
import hashlib
import sqlite3
import stat
from pathlib import Path

import pytest
from support import ARGS, OPERATION, capture_contract

from effectguard import EffectExecutor, EffectStatus, SQLiteEffectLedger
from effectguard.errors import LedgerLockedError, LedgerNotFoundError, LedgerSchemaError
from effectguard.ledger import _chain as chain
from effectguard.ledger.sqlite import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION
from effectguard.testkit import FakePaymentProvider


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _confirm_one(ledger: SQLiteEffectLedger) -> None:
    provider = FakePaymentProvider()
    EffectExecutor(ledger).execute(capture_contract(provider), ARGS, provider.handler)


def test_reads_never_create_the_file(tmp_path):
    """Reading a ledger that does not exist answers "nothing" and creates no file."""
    path = tmp_path / "ledger.db"
    ledger = SQLiteEffectLedger(path)
    assert ledger.get(OPERATION) is None
    assert ledger.list_operations() == []
    assert ledger.events(OPERATION) == []
    assert ledger.verify().operations_checked == 0
    assert not path.exists()
    ledger.close()


def test_create_false_refuses_a_missing_file(tmp_path):
    """With create=False a missing ledger is an error at once, and still no file."""
    path = tmp_path / "missing.db"
    with pytest.raises(LedgerNotFoundError, match="no ledger at"):
        SQLiteEffectLedger(path, create=False)
    assert not path.exists()


def test_file_and_its_wal_are_private_to_the_owner(tmp_path):
    """The first write creates the file 0600; SQLite's -wal and -shm copy that mode."""
    path = tmp_path / "ledger.db"
    with SQLiteEffectLedger(path) as ledger:
        _confirm_one(ledger)
        for suffix in ("", "-wal", "-shm"):
            mode = stat.S_IMODE(Path(f"{path}{suffix}").stat().st_mode)
            assert mode == 0o600, (suffix, oct(mode))


def test_wal_and_full_synchronous_by_default_and_normal_on_request(tmp_path):
    """Every connection runs WAL with synchronous=FULL unless the caller chose otherwise."""
    path = tmp_path / "ledger.db"
    with SQLiteEffectLedger(path) as ledger:
        _confirm_one(ledger)
        conn = ledger._open(write=False)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    with SQLiteEffectLedger(path, synchronous="normal") as ledger:
        assert ledger._open(write=False).execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    with pytest.raises(ValueError, match="synchronous must be one of"):
        SQLiteEffectLedger(path, synchronous="OFF")


def test_an_older_schema_is_migrated_forward_keeping_its_operations(tmp_path):
    """A version-1 file (built here by hand) opens, gains the listing index, keeps its rows."""
    path = tmp_path / "old.db"
    with SQLiteEffectLedger(path) as ledger:
        _confirm_one(ledger)
    conn = sqlite3.connect(path, isolation_level=None)
    # Version 6's write views (their triggers go with them), then the rest back to version 1.
    conn.execute("DROP VIEW claim_writes")
    conn.execute("DROP VIEW row_writes")
    conn.execute("DROP INDEX operations_needing_attention")
    conn.execute("DROP TABLE claims")
    conn.execute("DROP TABLE tombstones")
    conn.execute("ALTER TABLE events DROP COLUMN commits")
    conn.execute("PRAGMA user_version = 1")
    conn.close()

    with SQLiteEffectLedger(path) as ledger:
        assert ledger.get(OPERATION).status is EffectStatus.CONFIRMED
        assert [r.operation_id for r in ledger.list_operations(status=EffectStatus.CONFIRMED)] == [
            OPERATION
        ]
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    indexes = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    views = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='view'")}
    conn.close()
    # Version 2's listing indexes were replaced by version 6's one index of what needs attention.
    assert "operations_needing_attention" in indexes
    assert not {"operations_by_status", "operations_by_contract", "operations_by_update"} & indexes
    assert {"claim_writes", "row_writes"} <= views


def test_a_newer_schema_is_refused_and_left_untouched(tmp_path):
    """A ledger written by a newer effectguard is refused with a clear error, bytes unchanged."""
    path = tmp_path / "new.db"
    with SQLiteEffectLedger(path) as ledger:
        _confirm_one(ledger)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    before = _digest(path)

    with pytest.raises(LedgerSchemaError, match="newer than this effectguard supports"):
        SQLiteEffectLedger(path)
    assert _digest(path) == before


def test_a_file_that_is_not_sqlite_is_refused_and_left_untouched(tmp_path):
    """Arbitrary bytes are not a ledger: one clear error, the file unchanged."""
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are not the bytes of a database\n" * 200)
    before = _digest(path)
    with pytest.raises(LedgerSchemaError, match="is not a SQLite database"):
        SQLiteEffectLedger(path)
    assert _digest(path) == before


def test_another_applications_database_is_refused_and_left_untouched(tmp_path):
    """A SQLite file with someone else's tables is never turned into a ledger."""
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    before = _digest(path)
    with pytest.raises(LedgerSchemaError, match="not an effectguard ledger"):
        SQLiteEffectLedger(path)
    assert _digest(path) == before


def test_a_held_write_lock_becomes_a_ledger_error_after_the_busy_timeout(tmp_path):
    """Another writer holding the lock: LedgerLockedError, nothing recorded, no dispatch."""
    path = tmp_path / "ledger.db"
    with SQLiteEffectLedger(path) as ledger:
        ledger.list_operations()
        _confirm_one(ledger)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    provider = FakePaymentProvider()
    try:
        with SQLiteEffectLedger(path, busy_timeout=0.05) as ledger:
            contract = capture_contract(provider)
            with pytest.raises(LedgerLockedError, match="locked by another writer"):
                EffectExecutor(ledger).execute(
                    contract, {**ARGS, "invoice_id": "INV-2"}, provider.handler
                )
            assert not ledger._open(write=False).in_transaction
    finally:
        holder.rollback()
        holder.close()
    assert provider.requests == 0
    with SQLiteEffectLedger(path) as ledger:
        assert len(ledger.list_operations()) == 1


def test_verify_reports_an_edited_and_a_deleted_event(tmp_path):
    """Editing one event and deleting another break their chains, and verify names them."""
    path = tmp_path / "ledger.db"
    provider = FakePaymentProvider()
    with SQLiteEffectLedger(path) as ledger:
        executor = EffectExecutor(ledger)
        for invoice in ("INV-1", "INV-2", "INV-3"):
            executor.execute(
                capture_contract(provider), {**ARGS, "invoice_id": invoice}, provider.handler
            )
        assert ledger.verify().ok
        assert ledger.verify().events_checked == 6

    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(
        "UPDATE events SET evidence = '{\"forged\":true}' "
        "WHERE operation_id = 'invoice:INV-1:capture' AND seq = 1"
    )
    conn.execute("DELETE FROM events WHERE operation_id = 'invoice:INV-2:capture' AND seq = 2")
    conn.close()

    with SQLiteEffectLedger(path) as ledger:
        report = ledger.verify()
    broken = {(p.operation_id, p.seq) for p in report.problems}
    assert not report.ok
    assert ("invoice:INV-1:capture", 1) in broken
    assert any(op == "invoice:INV-2:capture" for op, _ in broken)
    assert all(op != "invoice:INV-3:capture" for op, _ in broken)


def test_application_id_marks_our_files(tmp_path):
    """Ledger files carry effectguard's application id, so tools can tell them apart."""
    path = tmp_path / "ledger.db"
    with SQLiteEffectLedger(path) as ledger:
        _confirm_one(ledger)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    conn.close()


def test_close_waits_for_a_statement_running_in_another_thread(tmp_path):
    """close() from one thread never closes a connection under another thread's statement."""
    import threading  # noqa: PLC0415 - used by this test only

    ledger = SQLiteEffectLedger(tmp_path / "ledger.db")
    _confirm_one(ledger)
    inside, release = threading.Event(), threading.Event()
    seen = []

    def slow_read(conn):
        inside.set()
        release.wait(10)
        return conn.execute("SELECT count(*) FROM operations").fetchone()[0]

    reader = threading.Thread(target=lambda: seen.append(ledger._read(slow_read, None)))
    reader.start()
    inside.wait(10)
    closer = threading.Thread(target=ledger.close)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive()  # waiting for the reader's statement, not closing under it
    release.set()
    reader.join(10)
    closer.join(10)
    assert seen == [1]
    assert not closer.is_alive()


def test_a_version_2_ledger_is_anchored_on_migration_and_reports_its_legacy_rows(tmp_path):
    """Migrating anchors existing operations; their uncommitted fields are counted, not failed."""
    path = tmp_path / "v2.db"
    with SQLiteEffectLedger(path) as ledger:
        _confirm_one(ledger)
        # Rehash the chain as effectguard wrote it before events committed to the row.
        linked = chain.relink(
            OPERATION, [dataclasses.replace(e, commits={}) for e in ledger.events(OPERATION)]
        )
    conn = sqlite3.connect(path, isolation_level=None)
    for event in linked:
        conn.execute(
            "UPDATE events SET hash = ?, commits = NULL WHERE operation_id = ? AND seq = ?",
            (event.hash, OPERATION, event.seq),
        )
    conn.execute("UPDATE operations SET event_head = ?", (linked[-1].hash,))
    conn.execute("DROP VIEW claim_writes")
    conn.execute("DROP VIEW row_writes")
    conn.execute("DROP INDEX operations_needing_attention")
    conn.executescript(MIGRATIONS[1])  # version 2's listing indexes, which version 6 dropped
    conn.execute("DROP TABLE claims")
    conn.execute("DROP TABLE tombstones")
    conn.execute("ALTER TABLE events DROP COLUMN commits")
    conn.execute("PRAGMA user_version = 2")
    conn.close()

    with SQLiteEffectLedger(path) as ledger:
        report = ledger.verify()
        assert report.ok, report.problems
        assert (report.anchored, report.operations_uncovered) == (1, 1)
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("DELETE FROM events")
        conn.execute("DELETE FROM operations")
        conn.close()
        gone = ledger.verify().problems
        assert [(p.operation_id, "row is gone" in p.problem) for p in gone] == [(OPERATION, True)]
