"""Where a run stands: what a caller is told (RunResult) and what a checkpoint keeps (RunRecord)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from effectguard._model import EffectStatus
from effectguard._scope import CallScope
from effectguard.runtime.llm import Message, ToolCall

__all__ = ["ApprovalRequest", "CallPhase", "PendingCall", "RunRecord", "RunResult", "RunState"]


class RunState(enum.StrEnum):
    """Where a run stands.

    ``start`` and ``resume`` return COMPLETED, WAITING or FAILED. RUNNING is
    only ever seen in a checkpoint: the run is being driven right now, or its
    process died while driving it; ``resume`` continues it either way.
    """

    RUNNING = "RUNNING"
    WAITING = "WAITING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"

    @property
    def finished(self) -> bool:
        """True for COMPLETED and FAILED, which ``resume`` returns unchanged."""
        return self in (RunState.COMPLETED, RunState.FAILED)


class CallPhase(enum.StrEnum):
    """How far one tool call of the current turn has got."""

    NEW = "NEW"
    """Not yet validated or decided."""

    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    """The policy asked for a person's decision; nothing was dispatched."""

    APPROVED = "APPROVED"
    """A person approved it; it is dispatched on the next resume."""

    REFUSED = "REFUSED"
    """A person refused it; the model is told so on the next resume."""

    DISPATCHING = "DISPATCHING"
    """Allowed and handed to its handler; every resume re-issues it until it settles."""


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A tool call waiting for ``runtime.approve(run_id, call_id, actor)``."""

    run_id: str
    call_id: str
    tool: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class RunResult:
    """What ``start`` or ``resume`` left the run as.

    ``waiting_on`` holds, for a WAITING run, the operation ids (strings) of
    effects that are not confirmed and the :class:`ApprovalRequest` of each call
    awaiting a person. ``effects`` maps every operation the run touched to its
    last known status. ``final`` is set only for COMPLETED; ``error`` only for FAILED.
    """

    run_id: str
    state: RunState
    final: str | None = None
    waiting_on: tuple[str | ApprovalRequest, ...] = ()
    steps: int = 0
    effects: Mapping[str, EffectStatus] = field(default_factory=dict)
    error: str | None = None

    @property
    def operations(self) -> tuple[str, ...]:
        """The operation ids this run waits on."""
        return tuple(item for item in self.waiting_on if isinstance(item, str))

    @property
    def approvals(self) -> tuple[ApprovalRequest, ...]:
        """The approval requests this run waits on."""
        return tuple(item for item in self.waiting_on if isinstance(item, ApprovalRequest))


@dataclass(slots=True)
class PendingCall:
    """A tool call of the current turn that has no result in the conversation yet."""

    call: ToolCall
    phase: CallPhase = CallPhase.NEW
    actor: str | None = None
    reason: str | None = None
    operation_ids: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form kept in a checkpoint."""
        return {
            "call": self.call.to_json(),
            "phase": self.phase.value,
            "actor": self.actor,
            "reason": self.reason,
            "operation_ids": list(self.operation_ids),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PendingCall:
        """Rebuild a pending call from :meth:`to_json` output."""
        return cls(
            call=ToolCall.from_json(data["call"]),
            phase=CallPhase(data["phase"]),
            actor=data.get("actor"),
            reason=data.get("reason"),
            operation_ids=[str(op) for op in data.get("operation_ids") or ()],
        )


@dataclass(slots=True)
class RunRecord:
    """Everything a run needs to continue in another process: its checkpoint.

    ``revision`` is the store's version of this record; saving a record whose
    revision is no longer current is a :class:`CheckpointConflictError`.
    """

    run_id: str
    state: RunState = RunState.RUNNING
    messages: list[Message] = field(default_factory=list)
    pending: list[PendingCall] = field(default_factory=list)
    waiting_on: list[str | ApprovalRequest] = field(default_factory=list)
    steps: int = 0
    final: str | None = None
    error: str | None = None
    effects: dict[str, EffectStatus] = field(default_factory=dict)
    revision: int = 0

    def scope_of(self, call: ToolCall) -> CallScope:
        """Return the call scope of ``call``, a tool call of the run's latest turn.

        Its call id is the tool call's own, unless an earlier turn used that id
        too (a model may number calls per turn): then ``"<id>#<n>"`` for its
        n-th use, so an operation id derived from the scope never collides with
        an earlier call's. Counted from the checkpointed messages, so a resume,
        in this process or another, gives the same scope.
        """
        uses = sum(
            1
            for message in self.messages
            if message.get("role") == "assistant"
            for tool_call in message.get("tool_calls") or ()
            if tool_call.get("id") == call.id
        )
        return CallScope(self.run_id, call.id if uses <= 1 else f"{call.id}#{uses}")

    def result(self) -> RunResult:
        """Return what a caller is told about this run."""
        return RunResult(
            run_id=self.run_id,
            state=self.state,
            final=self.final,
            waiting_on=tuple(self.waiting_on),
            steps=self.steps,
            effects=dict(self.effects),
            error=self.error,
        )

    def to_json(self) -> dict[str, Any]:
        """Return the JSON document a checkpoint store keeps (without the revision)."""
        waiting: list[dict[str, Any]] = []
        for item in self.waiting_on:
            if isinstance(item, str):
                waiting.append({"operation_id": item})
            else:
                waiting.append(
                    {
                        "approval": {
                            "call_id": item.call_id,
                            "tool": item.tool,
                            "arguments": dict(item.arguments),
                        }
                    }
                )
        return {
            "run_id": self.run_id,
            "state": self.state.value,
            "messages": self.messages,
            "pending": [pending.to_json() for pending in self.pending],
            "waiting_on": waiting,
            "steps": self.steps,
            "final": self.final,
            "error": self.error,
            "effects": {op: status.value for op, status in self.effects.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], revision: int) -> RunRecord:
        """Rebuild a record from :meth:`to_json` output and the store's revision."""
        run_id = str(data["run_id"])
        waiting: list[str | ApprovalRequest] = []
        for item in data.get("waiting_on") or ():
            if "operation_id" in item:
                waiting.append(str(item["operation_id"]))
            else:
                approval = item["approval"]
                waiting.append(
                    ApprovalRequest(
                        run_id, approval["call_id"], approval["tool"], approval["arguments"]
                    )
                )
        return cls(
            run_id=run_id,
            state=RunState(data["state"]),
            messages=list(data.get("messages") or ()),
            pending=[PendingCall.from_json(item) for item in data.get("pending") or ()],
            waiting_on=waiting,
            steps=int(data.get("steps", 0)),
            final=data.get("final"),
            error=data.get("error"),
            effects={op: EffectStatus(s) for op, s in (data.get("effects") or {}).items()},
            revision=revision,
        )
