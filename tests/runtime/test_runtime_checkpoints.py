"""Checkpoint stores: the same contract in memory and in SQLite, and the SQLite file rules."""

from __future__ import annotations

import os
import sqlite3
import stat

import pytest

from effectguard import EffectStatus, SQLiteEffectLedger
from effectguard.runtime import (
    ApprovalRequest,
    CheckpointConflictError,
    CheckpointError,
    InMemoryCheckpointStore,
    RunExistsError,
    RunState,
    SQLiteCheckpointStore,
    ToolCall,
)
from effectguard.runtime.state import CallPhase, PendingCall, RunRecord


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    """Each checkpoint store under test."""
    if request.param == "memory":
        yield InMemoryCheckpointStore()
        return
    sqlite_store = SQLiteCheckpointStore(tmp_path / "runs.db")
    yield sqlite_store
    sqlite_store.close()


def full_record(run_id: str = "run-1") -> RunRecord:
    """A record using every field."""
    call = ToolCall("call-1", "capture_payment", {"invoice_id": "INV-1", "amount_cents": 5})
    return RunRecord(
        run_id=run_id,
        state=RunState.WAITING,
        messages=[{"role": "user", "content": "pay ✓"}],
        pending=[
            PendingCall(call, CallPhase.DISPATCHING, operation_ids=["invoice:INV-1:capture"]),
            PendingCall(ToolCall("call-2", "x", "{bad json"), CallPhase.APPROVED, "ada", "ok"),
        ],
        waiting_on=[
            "invoice:INV-1:capture",
            ApprovalRequest(run_id, "call-3", "refund", {"invoice_id": "INV-1"}),
        ],
        steps=3,
        effects={"invoice:INV-1:capture": EffectStatus.OUTCOME_UNKNOWN},
    )


def test_a_record_round_trips(store):
    """Everything saved is loaded back as it was, at revision 1."""
    record = full_record()
    assert store.create(record) == 1
    loaded = store.load("run-1")
    assert loaded.revision == 1
    loaded.revision = 0
    assert loaded == record
    assert store.load("missing") is None


def test_saves_are_compare_and_set(store):
    """A save over a stale revision is refused and stores nothing."""
    store.create(full_record())
    first, second = store.load("run-1"), store.load("run-1")
    first.steps = 4
    assert store.save(first) == 2
    second.steps = 99
    with pytest.raises(CheckpointConflictError, match="saved by another driver"):
        store.save(second)
    assert store.load("run-1").steps == 4
    assert store.load("run-1").revision == 2


def test_creating_twice_and_saving_the_unknown_are_refused(store):
    """create() of an existing run and save() of a run never created are errors."""
    store.create(full_record())
    with pytest.raises(RunExistsError):
        store.create(full_record())
    with pytest.raises(CheckpointConflictError, match="create it first"):
        store.save(full_record("other"))


def test_runs_are_listed_by_state(store):
    """list_runs() gives run ids oldest first, optionally by state."""
    store.create(full_record("a"))
    done = full_record("b")
    done.state = RunState.COMPLETED
    store.create(done)
    assert store.list_runs() == ["a", "b"]
    assert store.list_runs(RunState.WAITING) == ["a"]


def test_a_value_json_cannot_hold_is_a_checkpoint_error(store):
    """A message that is not JSON is refused before anything is written."""
    record = full_record()
    record.messages.append({"role": "user", "content": object()})
    with pytest.raises(CheckpointError, match="cannot be checkpointed"):
        store.create(record)
    assert store.load("run-1") is None


def test_a_run_survives_reopening_the_file(tmp_path):
    """A second store on the same file (as in a new process) reads the latest revision."""
    path = tmp_path / "runs.db"
    with SQLiteCheckpointStore(path) as first:
        first.create(full_record())
        record = first.load("run-1")
        record.steps = 7
        first.save(record)
    with SQLiteCheckpointStore(path) as second:
        loaded = second.load("run-1")
    assert (loaded.steps, loaded.revision) == (7, 2)


def test_the_file_is_private_wal_and_fully_synchronous(tmp_path):
    """The file and its WAL companions are 0600; journal WAL, synchronous FULL."""
    path = tmp_path / "runs.db"
    old = os.umask(0o022)
    try:
        store = SQLiteCheckpointStore(path)
        store.create(full_record())
    finally:
        os.umask(old)
    for name in ("runs.db", "runs.db-wal", "runs.db-shm"):
        mode = stat.S_IMODE((tmp_path / name).stat().st_mode)
        assert mode == 0o600, (name, oct(mode))
    conn = store._conn
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    store.close()


def test_a_ledger_file_is_not_taken_for_a_checkpoint_store(tmp_path):
    """Pointing the store at an effect ledger is refused, and the ledger is left unchanged."""
    path = tmp_path / "ledger.db"
    ledger = SQLiteEffectLedger(path)
    ledger.list_operations()
    ledger._write(lambda conn: None)  # make sure the ledger file exists with its schema
    ledger.close()
    before = path.read_bytes()
    with pytest.raises(CheckpointError, match="not an effectguard checkpoint store"):
        SQLiteCheckpointStore(path)
    assert path.read_bytes() == before


def test_a_file_that_is_not_sqlite_is_refused_unchanged(tmp_path):
    """A non-database file is a one-line CheckpointError and is not modified."""
    path = tmp_path / "notes.txt"
    path.write_text("hello, this is not a database at all" * 10)
    before = path.read_bytes()
    with pytest.raises(CheckpointError) as info:
        SQLiteCheckpointStore(path)
    assert "\n" not in str(info.value)
    assert path.read_bytes() == before


def test_a_newer_schema_is_refused(tmp_path):
    """A checkpoint file written by a newer effectguard is refused, not migrated backwards."""
    path = tmp_path / "runs.db"
    SQLiteCheckpointStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(CheckpointError, match="newer than this effectguard supports"):
        SQLiteCheckpointStore(path)


def test_a_closed_store_refuses_work(tmp_path):
    """After close(), every call is a CheckpointError; closing twice is harmless."""
    store = SQLiteCheckpointStore(tmp_path / "runs.db")
    store.close()
    store.close()
    with pytest.raises(CheckpointError, match="closed"):
        store.load("run-1")
