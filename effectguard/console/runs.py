"""Agent runs that wait on operations, read from a runtime's checkpoint file.

Plain functions over the public runtime API, so the console shows an operator
which resolution unblocks which run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from effectguard.ledger import EffectLedger
    from effectguard.model import EffectStatus

__all__ = ["WaitingRun", "waiting_runs"]


@dataclass(frozen=True, slots=True)
class WaitingRun:
    """A WAITING run: the operations it waits on (with their status now) and its approvals."""

    run_id: str
    steps: int
    operations: tuple[tuple[str, EffectStatus | None], ...]
    approvals: tuple[str, ...]


def waiting_runs(checkpoints: str, ledger: EffectLedger) -> list[WaitingRun]:
    """Return every WAITING run in the checkpoint file ``checkpoints``, by run id.

    An operation's status is None when the ledger has no such operation (the
    run was checkpointed against another ledger).
    """
    from effectguard.runtime import RunState, SQLiteCheckpointStore  # noqa: PLC0415 - only with --checkpoints

    runs: list[WaitingRun] = []
    with SQLiteCheckpointStore(checkpoints) as store:
        for run_id in sorted(store.list_runs(RunState.WAITING)):
            record = store.load(run_id)
            if record is None:
                continue  # finished or removed between the listing and the load
            operations = []
            approvals = []
            for item in record.waiting_on:
                if isinstance(item, str):
                    found = ledger.get(item)
                    operations.append((item, None if found is None else found.status))
                else:
                    approvals.append(f"{item.tool} (call {item.call_id})")
            runs.append(WaitingRun(run_id, record.steps, tuple(operations), tuple(approvals)))
    return runs
