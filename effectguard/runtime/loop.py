"""The run loop, written once as a generator that yields the I/O it needs.

:class:`RunMachine` decides; the sync and async drivers in
:mod:`effectguard.runtime.runtime` perform its steps (ask the model, run a
tool, save a checkpoint, read effect statuses), so both follow the same rules.
The rules, in order, for each tool call of the current turn: validate the
arguments, ask the permission policy, checkpoint, run the handler; then each
model turn, after checking that no effect of the run is unresolved.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from effectguard._model import EffectStatus
from effectguard._scope import CallScope
from effectguard.errors import ConfigurationError
from effectguard.runtime.invoke import CallOutcome, error_content
from effectguard.runtime.llm import Message, ModelTurn, ToolCall
from effectguard.runtime.permissions import Decision, PermissionPolicy, ToolRequest
from effectguard.runtime.sinks.audit import AuditAction, AuditRecord, AuditSink
from effectguard.runtime.sinks.trace import TraceEvent, TraceKind, TraceSink
from effectguard.runtime.state import (
    ApprovalRequest,
    CallPhase,
    PendingCall,
    RunRecord,
    RunResult,
    RunState,
)
from effectguard.runtime.tools import ToolDefinition
from effectguard.runtime.tools.registry import ToolRegistry
from effectguard.runtime.tools.validation import parse_arguments, validate

__all__ = ["Machine", "ModelStep", "RunMachine", "SaveStep", "StatusStep", "Step", "ToolStep"]

logger = logging.getLogger("effectguard.runtime")


@dataclass(frozen=True, slots=True)
class ModelStep:
    """Ask the model for its next turn; the driver sends back a :class:`ModelTurn`."""

    messages: list[Message]
    tools: tuple[ToolDefinition, ...]


@dataclass(frozen=True, slots=True)
class ToolStep:
    """Run one tool call in its call scope; the driver sends back a :class:`CallOutcome`."""

    tool: ToolDefinition
    arguments: dict[str, Any]
    scope: CallScope


@dataclass(frozen=True, slots=True)
class SaveStep:
    """Checkpoint the record; the driver updates its revision."""

    record: RunRecord


@dataclass(frozen=True, slots=True)
class StatusStep:
    """Read effect statuses from the ledger; the driver sends back ``{op: status or None}``."""

    operation_ids: tuple[str, ...]


Step = ModelStep | ToolStep | SaveStep | StatusStep
Machine = Generator[Step, Any, RunResult]
_Wait = list[str | ApprovalRequest]


def _now() -> datetime:
    return datetime.now(UTC)


def policy_name(policy: object) -> str:
    """Name a permission policy in audit records."""
    return str(getattr(policy, "__qualname__", None) or type(policy).__qualname__)


class RunMachine:
    """The rules of one run, from its last checkpoint to COMPLETED, WAITING or FAILED."""

    def __init__(
        self,
        record: RunRecord,
        *,
        tools: ToolRegistry,
        policy: PermissionPolicy,
        trace: TraceSink,
        audit: AuditSink,
        max_steps: int,
    ) -> None:
        self.record = record
        self.tools = tools
        self.policy = policy
        self.trace_sink = trace
        self.audit_sink = audit
        self.max_steps = max_steps
        self._actor = f"policy:{policy_name(policy)}"

    # -- records -----------------------------------------------------------------------

    def trace(self, kind: TraceKind, call: PendingCall | None = None, **data: Any) -> None:
        """Record a trace event; a failing trace sink is logged, never fatal."""
        event = TraceEvent(
            run_id=self.record.run_id,
            kind=kind,
            step=self.record.steps,
            at=_now(),
            call_id=None if call is None else call.call.id,
            tool=None if call is None else call.call.name,
            data=data,
        )
        try:
            self.trace_sink.record(event)
        except Exception:
            logger.exception("trace sink failed on %s of run %s", kind, self.record.run_id)

    def audit(
        self,
        action: AuditAction,
        call: PendingCall | None = None,
        *,
        actor: str = "runtime",
        operation_id: str | None = None,
        **details: Any,
    ) -> None:
        """Record an audit entry; a failing audit sink stops the run here."""
        self.audit_sink.record(
            AuditRecord(
                run_id=self.record.run_id,
                action=action,
                actor=actor,
                at=_now(),
                call_id=None if call is None else call.call.id,
                tool=None if call is None else call.call.name,
                operation_id=operation_id,
                details=details,
            )
        )

    # -- the loop ----------------------------------------------------------------------

    def run(self) -> Machine:
        """Drive the run until it completes, waits or fails."""
        record = self.record
        record.state = RunState.RUNNING
        record.waiting_on = []
        while True:
            while record.pending:
                waiting = yield from self._advance(record.pending[0])
                if waiting:
                    return (yield from self._wait(waiting))
            unresolved = yield from self._unresolved()
            if unresolved:
                # A model's text never completes a run with an effect in doubt: it is not asked.
                return (yield from self._wait(list(unresolved)))
            if record.steps >= self.max_steps:
                return (yield from self._fail(f"max_steps ({self.max_steps}) reached"))
            turn = yield ModelStep(copy.deepcopy(record.messages), tuple(self.tools))
            if not isinstance(turn, ModelTurn):
                msg = f"the model returned {type(turn).__name__}, not a ModelTurn"
                raise TypeError(msg)
            record.steps += 1
            if turn.final is not None:
                return (yield from self._complete(turn.final))
            record.messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [call.to_json() for call in turn.tool_calls],
                }
            )
            record.pending = [PendingCall(call) for call in turn.tool_calls]
            self.trace(TraceKind.MODEL_TURN, tool_calls=[c.name for c in turn.tool_calls])
            yield SaveStep(record)

    def _unresolved(self) -> Generator[Step, Any, tuple[str, ...]]:
        record = self.record
        doubtful = tuple(op for op, status in record.effects.items() if not status.terminal)
        if not doubtful:
            return ()
        statuses: dict[str, EffectStatus | None] = yield StatusStep(doubtful)
        for op, status in statuses.items():
            if status is not None and status is not record.effects.get(op):
                record.effects[op] = status
                self.trace(TraceKind.EFFECT, operation_id=op, status=status.value)
                self.audit(AuditAction.EFFECT_STATUS, operation_id=op, status=status.value)
        return tuple(op for op in doubtful if not record.effects[op].terminal)

    def _complete(self, final: str) -> Generator[Step, Any, RunResult]:
        record = self.record
        record.messages.append({"role": "assistant", "content": final})
        record.state, record.final, record.waiting_on = RunState.COMPLETED, final, []
        self.trace(TraceKind.MODEL_TURN, final=final)
        self.audit(AuditAction.RUN_COMPLETED, steps=record.steps)
        self.trace(TraceKind.RUN_COMPLETED)
        yield SaveStep(record)
        return record.result()

    def _fail(self, reason: str) -> Generator[Step, Any, RunResult]:
        record = self.record
        record.state, record.error, record.waiting_on = RunState.FAILED, reason, []
        self.audit(AuditAction.RUN_FAILED, reason=reason)
        self.trace(TraceKind.RUN_FAILED, reason=reason)
        yield SaveStep(record)
        return record.result()

    def _wait(self, waiting: _Wait) -> Generator[Step, Any, RunResult]:
        record = self.record
        record.state, record.waiting_on = RunState.WAITING, list(waiting)
        described = [w if isinstance(w, str) else f"approval of {w.call_id}" for w in waiting]
        self.audit(AuditAction.RUN_WAITING, waiting_on=described)
        self.trace(TraceKind.RUN_WAITING, waiting_on=described)
        yield SaveStep(record)
        return record.result()

    # -- one tool call -----------------------------------------------------------------

    def _answer(
        self, pending: PendingCall, content: str, *, is_error: bool
    ) -> Generator[Step, Any, None]:
        """Give the model the call's result and checkpoint that the call is done."""
        record = self.record
        record.messages.append(
            {
                "role": "tool",
                "tool_call_id": pending.call.id,
                "name": pending.call.name,
                "content": content,
                "is_error": is_error,
            }
        )
        record.pending.remove(pending)
        # Outputs stay out of telemetry (they may hold personal data); our own errors do not.
        detail = {"error": content} if is_error else {"size": len(content)}
        self.trace(TraceKind.TOOL_RESULT, pending, is_error=is_error, **detail)
        yield SaveStep(record)

    def _arguments(
        self, pending: PendingCall, tool: ToolDefinition
    ) -> tuple[dict[str, Any] | None, list[str]]:
        arguments, problem = parse_arguments(pending.call.arguments)
        if arguments is None:
            return None, [problem]
        problems = validate(arguments, tool.parameters)
        return (None, problems) if problems else (arguments, [])

    def _approval(self, pending: PendingCall) -> ApprovalRequest:
        arguments, _ = parse_arguments(pending.call.arguments)
        return ApprovalRequest(
            self.record.run_id, pending.call.id, pending.call.name, arguments or {}
        )

    def _advance(self, pending: PendingCall) -> Generator[Step, Any, _Wait]:
        """Take one call as far as it can go; return what the run must wait on, if anything."""
        call = pending.call
        tool = self.tools.get(call.name)
        if pending.phase is CallPhase.NEW:
            self.trace(TraceKind.TOOL_CALL, pending, arguments=_traced_arguments(call, tool))
            if tool is None:
                available = ", ".join(self.tools.names()) or "none"
                self.audit(AuditAction.TOOL_UNKNOWN, pending)
                self.trace(TraceKind.TOOL_UNKNOWN, pending)
                message = f"there is no tool named {call.name!r}; available: {available}"
                yield from self._answer(
                    pending, error_content("unknown_tool", message), is_error=True
                )
                return []
            arguments, problems = self._arguments(pending, tool)
            if arguments is None:
                self.audit(AuditAction.ARGUMENTS_INVALID, pending, problems=problems)
                self.trace(TraceKind.ARGUMENTS_INVALID, pending, problems=problems)
                content = error_content(
                    "invalid_arguments",
                    "the arguments do not match the tool's schema; nothing was run",
                    problems=problems,
                )
                yield from self._answer(pending, content, is_error=True)
                return []
            decision = self.policy(ToolRequest(self.record.run_id, call, tool, arguments))
            if not isinstance(decision, Decision):
                name = policy_name(self.policy)
                msg = f"permission policy {name} returned {decision!r}, not a Decision"
                raise TypeError(msg)
            self.trace(TraceKind.PERMISSION, pending, decision=decision.value)
            if decision is Decision.DENY:
                self.audit(AuditAction.PERMISSION_DENIED, pending, actor=self._actor)
                message = "the permission policy denied this call; nothing was run"
                yield from self._answer(
                    pending, error_content("permission_denied", message), is_error=True
                )
                return []
            if decision is Decision.REQUIRE_APPROVAL:
                self.audit(AuditAction.APPROVAL_REQUESTED, pending, actor=self._actor)
                pending.phase = CallPhase.AWAITING_APPROVAL
                return [self._approval(pending)]
            self.audit(AuditAction.PERMISSION_ALLOWED, pending, actor=self._actor)
            pending.phase = CallPhase.DISPATCHING
        elif pending.phase is CallPhase.AWAITING_APPROVAL:
            return [self._approval(pending)]
        elif pending.phase is CallPhase.REFUSED:
            message = f"{pending.actor} refused this call"
            if pending.reason:
                message += f": {pending.reason}"
            yield from self._answer(
                pending,
                error_content("approval_refused", message + "; nothing was run"),
                is_error=True,
            )
            return []
        elif pending.phase is CallPhase.APPROVED:
            pending.phase = CallPhase.DISPATCHING
        return (yield from self._dispatch(pending, tool))

    def _dispatch(
        self, pending: PendingCall, tool: ToolDefinition | None
    ) -> Generator[Step, Any, _Wait]:
        call = pending.call
        if tool is None:
            msg = (
                f"run {self.record.run_id!r} must re-issue call {call.id} of tool "
                f"{call.name!r}, which this runtime does not have; give it the same tools"
            )
            raise ConfigurationError(msg)
        arguments, problems = self._arguments(pending, tool)
        if arguments is None:
            msg = (
                f"run {self.record.run_id!r}: call {call.id} of {call.name!r} no longer matches "
                f"the tool's schema ({'; '.join(problems)}); give the runtime the tool it ran with"
            )
            raise ConfigurationError(msg)
        reissue = bool(pending.operation_ids)
        self.audit(AuditAction.DISPATCHED, pending, reissue=reissue)
        self.trace(TraceKind.DISPATCH, pending, reissue=reissue)
        # Durable before the handler runs, so a crash from here on re-issues this call.
        yield SaveStep(self.record)
        outcome: CallOutcome = yield ToolStep(tool, arguments, self.record.scope_of(call))
        self._note_effects(pending, outcome)
        if outcome.waiting:
            pending.operation_ids = list(outcome.waiting)
            return list(outcome.waiting)
        yield from self._answer(pending, outcome.content, is_error=outcome.is_error)
        return []

    def _note_effects(self, pending: PendingCall, outcome: CallOutcome) -> None:
        for op, result in outcome.effects.items():
            self.record.effects[op] = result.status
            details: dict[str, Any] = {
                "status": result.status.value,
                "replayed": result.replayed,
                "attempts": result.attempts,
                "reason": result.reason,
            }
            self.trace(TraceKind.EFFECT, pending, operation_id=op, **details)
            self.audit(AuditAction.EFFECT_STATUS, pending, operation_id=op, **details)


def _traced_arguments(call: ToolCall, tool: ToolDefinition | None) -> Any:
    """The call's arguments for the trace, without the values its contract redacts."""
    redact = frozenset() if tool is None or tool.contract is None else tool.contract.redact
    if not redact:
        return call.to_json()["arguments"]
    arguments, _ = parse_arguments(call.arguments)
    if arguments is None:
        return "[unparsed arguments of a tool with redacted parameters]"
    return {name: "[redacted]" if name in redact else value for name, value in arguments.items()}


def initial_messages(value: str | Sequence[Message]) -> list[Message]:
    """Return the conversation a run starts from: a user message, or the messages given."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    messages = [dict(message) for message in value]
    if not all(isinstance(message.get("role"), str) for message in messages):
        msg = 'every starting message needs a "role"'
        raise ValueError(msg)
    return messages
