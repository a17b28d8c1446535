"""Which runs wait, on what, and which resolution unblocks each: the operator's view of runs.

A run WAITING on effects is blocked until every operation it waits on can be
settled by a resume: a CONFIRMED or REJECTED one is replayed, a PREPARED one
(a retry authorized) is sent, an OUTCOME_UNKNOWN one is reconciled again. A
QUARANTINED operation, or one still held by a worker, blocks it until a person
resolves it; an approval request blocks it until ``approve`` or ``deny``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from effectguard._model import EffectStatus
from effectguard.errors import RunNotFoundError
from effectguard.runtime.state import ApprovalRequest, RunRecord, RunState

if TYPE_CHECKING:
    from effectguard.ledger import EffectLedger
    from effectguard.runtime.checkpoints.store import CheckpointStore

__all__ = ["RunView", "WaitedOperation", "describe_run", "list_runs"]

#: Statuses a resume settles without a person.
_SETTLEABLE = frozenset(
    {
        EffectStatus.CONFIRMED,
        EffectStatus.REJECTED,
        EffectStatus.PREPARED,
        EffectStatus.OUTCOME_UNKNOWN,
    }
)


@dataclass(frozen=True, slots=True)
class WaitedOperation:
    """An operation a run waits on and its status now (None: no ledger given, or not found)."""

    operation_id: str
    status: EffectStatus | None
    found: bool = True

    @property
    def blocks(self) -> bool:
        """Whether this operation still needs a person (or a worker) before a resume helps."""
        return self.status is not None and self.status not in _SETTLEABLE


@dataclass(frozen=True, slots=True)
class RunView:
    """One run as an operator sees it: its state, the operations and approvals it waits on."""

    run_id: str
    state: RunState
    operations: tuple[WaitedOperation, ...]
    approvals: tuple[ApprovalRequest, ...]
    final: str | None = None

    @property
    def resumable(self) -> bool:
        """True when a ``resume`` would make progress now (nothing waits for a person)."""
        if self.state is not RunState.WAITING:
            return self.state is RunState.RUNNING
        return not self.approvals and not any(op.blocks for op in self.operations)

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "run_id": self.run_id,
            "state": self.state.value,
            "resumable": self.resumable,
            "operations": [
                {
                    "operation_id": op.operation_id,
                    "status": None if op.status is None else op.status.value,
                    "found": op.found,
                    "blocks": op.blocks,
                }
                for op in self.operations
            ],
            "approvals": [
                {"call_id": item.call_id, "tool": item.tool, "arguments": dict(item.arguments)}
                for item in self.approvals
            ],
            "final": self.final,
        }


def _view(record: RunRecord, ledger: EffectLedger | None) -> RunView:
    operations = []
    for item in record.waiting_on:
        if not isinstance(item, str):
            continue
        current = None if ledger is None else ledger.get(item)
        status = current.status if current is not None else record.effects.get(item)
        found = ledger is None or current is not None
        operations.append(WaitedOperation(item, status, found))
    approvals = tuple(item for item in record.waiting_on if isinstance(item, ApprovalRequest))
    return RunView(record.run_id, record.state, tuple(operations), approvals, record.final)


def list_runs(
    checkpoints: CheckpointStore,
    ledger: EffectLedger | None = None,
    *,
    state: RunState | None = RunState.WAITING,
) -> list[RunView]:
    """Return the runs in ``state`` (all runs for None), oldest first, with what they wait on.

    With ``ledger``, each waited-on operation's status is read from it now;
    without, the status the checkpoint last saw is shown.
    """
    views = []
    for run_id in checkpoints.list_runs(state):
        record = checkpoints.load(run_id)
        if record is not None:
            views.append(_view(record, ledger))
    return views


def describe_run(
    checkpoints: CheckpointStore, run_id: str, ledger: EffectLedger | None = None
) -> RunView:
    """Return one run with what it waits on; :class:`RunNotFoundError` if there is none."""
    record = checkpoints.load(run_id)
    if record is None:
        msg = f"no run {run_id!r} in the checkpoints"
        raise RunNotFoundError(msg)
    return _view(record, ledger)
