"""Checkpoint stores: where a run's state is kept between steps, and between processes.

A checkpoint is written before every dispatch and after every tool result and
model turn, so a run interrupted anywhere (a WAITING effect, an approval, a
killed process) continues from its last checkpoint. The checkpoint is never
the authority on an effect: on resume a dispatched call is re-issued with the
same arguments, and the ledger replays or reconciles it.

:class:`InMemoryCheckpointStore` is the reference (runs die with the process);
:class:`~effectguard.runtime.checkpoints.sqlite.SQLiteCheckpointStore` keeps them in a file.
"""

from __future__ import annotations

import json
import threading
from typing import Protocol, runtime_checkable

from effectguard.errors import CheckpointConflictError, CheckpointError, RunExistsError
from effectguard.runtime.state import RunRecord, RunState

__all__ = ["CheckpointStore", "InMemoryCheckpointStore", "encode_record"]


def encode_record(record: RunRecord) -> str:
    """Return the JSON text a store keeps for ``record``.

    Raises :class:`CheckpointError` when the run holds a value JSON cannot
    represent (every message and argument must be plain JSON).
    """
    try:
        return json.dumps(record.to_json(), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        msg = f"run {record.run_id!r} cannot be checkpointed: {exc}"
        raise CheckpointError(msg) from exc


@runtime_checkable
class CheckpointStore(Protocol):
    """Keeps one :class:`RunRecord` per run id, with optimistic revisions.

    ``create`` stores a new run at revision 1 (an existing id is a
    :class:`RunExistsError`); ``save`` stores a record loaded at revision
    ``n`` as revision ``n + 1`` only if the stored one is still ``n``
    (else :class:`CheckpointConflictError`, storing nothing) and returns
    ``n + 1``. Every write is durable when it returns.
    """

    def create(self, record: RunRecord) -> int:
        """Store a new run; return its revision (1)."""
        ...

    def load(self, run_id: str) -> RunRecord | None:
        """Return the run's latest record, or None."""
        ...

    def save(self, record: RunRecord) -> int:
        """Store ``record`` over the revision it was loaded at; return the new revision."""
        ...

    def list_runs(self, state: RunState | None = None) -> list[str]:
        """Return run ids (in the given state), oldest first."""
        ...

    def close(self) -> None:
        """Release what the store holds."""
        ...


class InMemoryCheckpointStore:
    """A :class:`CheckpointStore` in a dict, for tests and runs that need not outlive the process.

    Records are kept as JSON text, so a value that could not be checkpointed
    in a file fails here too.
    """

    def __init__(self) -> None:
        self._runs: dict[str, tuple[int, str]] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"InMemoryCheckpointStore({len(self._runs)} runs)"

    def create(self, record: RunRecord) -> int:
        """Store a new run; return its revision (1)."""
        text = encode_record(record)
        with self._lock:
            if record.run_id in self._runs:
                msg = f"run {record.run_id!r} already exists; resume it or use a new run id"
                raise RunExistsError(msg)
            self._runs[record.run_id] = (1, text)
        return 1

    def load(self, run_id: str) -> RunRecord | None:
        """Return the run's latest record, or None."""
        with self._lock:
            stored = self._runs.get(run_id)
        if stored is None:
            return None
        return RunRecord.from_json(json.loads(stored[1]), stored[0])

    def save(self, record: RunRecord) -> int:
        """Store ``record`` over the revision it was loaded at; return the new revision."""
        text = encode_record(record)
        with self._lock:
            stored = self._runs.get(record.run_id)
            current = None if stored is None else stored[0]
            if current != record.revision:
                raise CheckpointConflictError(conflict_message(record, current))
            self._runs[record.run_id] = (record.revision + 1, text)
        return record.revision + 1

    def list_runs(self, state: RunState | None = None) -> list[str]:
        """Return run ids (in the given state), oldest first."""
        with self._lock:
            runs = list(self._runs.items())
        return [
            run_id
            for run_id, (_, text) in runs
            if state is None or json.loads(text)["state"] == state.value
        ]

    def close(self) -> None:
        """Nothing to release."""


def conflict_message(record: RunRecord, current: int | None) -> str:
    """Say why saving ``record`` over the stored revision ``current`` was refused."""
    if current is None:
        return f"run {record.run_id!r} has no checkpoint to save over (create it first)"
    return (
        f"run {record.run_id!r} was saved by another driver (revision {current}, this one "
        f"loaded {record.revision}); reload it with resume()"
    )
