"""A new SQLite ledger file opened by several writers at once."""

from __future__ import annotations

import sqlite3
import threading

from effectguard import SQLiteEffectLedger
from effectguard._process import current_owner
from effectguard.ledger import Lease, NewOperation

WRITERS = 8
TRIALS = 20


def _claim(ledger: SQLiteEffectLedger, number: int) -> None:
    operation = NewOperation(
        operation_id=f"op-{number}",
        contract="first-open",
        contract_version=1,
        fingerprint=f"fingerprint-{number}",
        provider_key=None,
        arguments={"n": number},
        attempt_budget=1,
        lease=Lease(f"token-{number}", current_owner(), 30.0),
    )
    ledger.claim(operation)


def test_concurrent_first_open_never_mistakes_a_ledger_being_migrated(tmp_path):
    """Writers racing to create and migrate one new file all succeed (no spurious schema error)."""
    failures: list[BaseException] = []
    for trial in range(TRIALS):
        path = tmp_path / f"ledger-{trial}.db"
        # One handle per writer, as separate processes would have: each migrates on first use.
        # (NORMAL: the race is about snapshots, not durability, and fsyncs only slow it down.)
        ledgers = [SQLiteEffectLedger(path, synchronous="NORMAL") for _ in range(WRITERS)]
        start = threading.Barrier(WRITERS)

        def write(ledger: SQLiteEffectLedger, number: int, start: threading.Barrier) -> None:
            start.wait()
            try:
                _claim(ledger, number)
            except BaseException as exc:
                failures.append(exc)

        threads = [
            threading.Thread(target=write, args=(ledger, number, start))
            for number, ledger in enumerate(ledgers)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(ledgers[0].list_operations()) == WRITERS - len(failures)
        for ledger in ledgers:
            ledger.close()
    assert failures == []


def test_first_open_waits_for_a_writer_holding_the_new_file(tmp_path):
    """Switching a new file to WAL waits out another writer's lock instead of failing at once."""
    path = tmp_path / "ledger.db"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # another writer holds the new, empty file
    releaser = threading.Timer(0.3, other.execute, args=("ROLLBACK",))
    releaser.start()
    try:
        with SQLiteEffectLedger(path) as ledger:
            _claim(ledger, 1)
            assert [record.operation_id for record in ledger.list_operations()] == ["op-1"]
    finally:
        releaser.join()
        other.close()
