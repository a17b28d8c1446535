"""Opening a brand-new SQLite ledger while another connection is creating it (deterministic)."""

from __future__ import annotations

import threading

from effectguard import SQLiteEffectLedger


def test_ledger_created_by_another_connection_during_the_check(tmp_path, monkeypatch):
    """A new ledger created by another connection mid-check is opened, not called foreign."""
    path = tmp_path / "ledger.db"
    path.touch(mode=0o600)  # an empty file is a new database that both handles set out to create
    original = SQLiteEffectLedger._prepare
    interleaved: list[str] = []
    errors: list[BaseException] = []

    def create_elsewhere() -> None:
        other = SQLiteEffectLedger(path)
        try:
            other.list_operations()
        except BaseException as exc:
            errors.append(exc)
        finally:
            other.close()

    creator = threading.Thread(target=create_elsewhere)

    def prepare(self: SQLiteEffectLedger, conn: object) -> None:
        def trace(statement: str) -> None:
            # Right before this connection looks for tables, another one creates the ledger.
            # Without a consistent read it succeeds at once; with one, it waits for this
            # connection's read to end, so the bounded join below is a pause, not a deadlock.
            if "sqlite_master" in statement and not interleaved:
                interleaved.append(statement)
                creator.start()
                creator.join(0.5)

        conn.set_trace_callback(trace)  # type: ignore[attr-defined]
        try:
            original(self, conn)
        finally:
            conn.set_trace_callback(None)  # type: ignore[attr-defined]

    monkeypatch.setattr(SQLiteEffectLedger, "_prepare", prepare)
    ledger = SQLiteEffectLedger(path)
    try:
        assert ledger.list_operations() == []
    finally:
        ledger.close()
    creator.join(30)
    assert interleaved
    assert not creator.is_alive()
    assert errors == []
