"""AgentRuntime: an agent loop in which an uncertain effect pauses the run instead of failing it.

::

    runtime = AgentRuntime(model, [capture_payment, lookup_invoice], executor,
                           checkpoints=SQLiteCheckpointStore("runs.db"))
    result = runtime.start("run-1", "Capture invoice INV-1042")
    if result.state is RunState.WAITING:
        ...                       # later, in this process or another one:
        result = runtime.resume("run-1")

The sync methods run async tools and models in an event loop of their own;
inside a running event loop use :meth:`AgentRuntime.start_async` and
:meth:`AgentRuntime.resume_async`, which run sync tools, models, checkpoint
writes and ledger reads in worker threads.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterable, Sequence
from typing import Any

from effectguard._executor import EffectExecutor
from effectguard._model import EffectStatus
from effectguard._scope import call_scope
from effectguard.errors import (
    ApprovalNotPendingError,
    InvalidRequestError,
    RunExistsError,
    RunNotFoundError,
)
from effectguard.runtime.checkpoints import CheckpointStore, InMemoryCheckpointStore
from effectguard.runtime.invoke import invoke, invoke_async, run_to_completion
from effectguard.runtime.llm import Message, Model
from effectguard.runtime.loop import (
    Machine,
    ModelStep,
    RunMachine,
    SaveStep,
    StatusStep,
    Step,
    ToolStep,
    initial_messages,
)
from effectguard.runtime.permissions import PermissionPolicy, allow_all
from effectguard.runtime.sinks.audit import AuditAction, AuditSink, InMemoryAuditSink
from effectguard.runtime.sinks.trace import InMemoryTraceSink, TraceKind, TraceSink
from effectguard.runtime.state import CallPhase, PendingCall, RunRecord, RunResult
from effectguard.runtime.tools.registry import ToolLike, ToolRegistry

__all__ = ["AgentRuntime"]


class AgentRuntime:
    """Runs a model's tool calls under effect contracts, permissions and checkpoints.

    For each tool call: the arguments are validated against the tool's schema
    (invalid → an error for the model, nothing run); the permission policy
    decides (deny → an error for the model; approval → the run WAITs); the
    run is checkpointed; the handler runs, decorated tools with this
    runtime's ``effect_executor`` lent to them. A CONFIRMED effect's output,
    a REJECTED effect's structured error, or a read-only tool's output (or
    error) goes back to the model. Any effect not confirmed or rejected stops
    the run in WAITING with its operation ids; :meth:`resume` re-issues the
    same call, which the ledger replays or reconciles, never dispatches blindly.
    The model is not asked for another turn while an effect of the run is in
    doubt, so its text never completes such a run.

    Failures of the infrastructure (ledger, checkpoint store, audit sink,
    model API) are raised to the caller and leave the run resumable from its
    last checkpoint. ``max_steps`` bounds the model turns of a run (FAILED
    when reached).
    """

    def __init__(
        self,
        model: Model,
        tools: ToolRegistry | Iterable[ToolLike],
        effect_executor: EffectExecutor,
        permission_policy: PermissionPolicy | None = None,
        checkpoints: CheckpointStore | None = None,
        trace: TraceSink | None = None,
        audit: AuditSink | None = None,
        max_steps: int = 20,
    ) -> None:
        if not callable(getattr(model, "next_turn", None)):
            msg = f"model must have a next_turn(messages, tools) method, not {model!r}"
            raise TypeError(msg)
        if not isinstance(effect_executor, EffectExecutor):
            msg = f"effect_executor must be an EffectExecutor, not {type(effect_executor).__name__}"
            raise TypeError(msg)
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            msg = f"max_steps must be an int >= 1, not {max_steps!r}"
            raise ValueError(msg)
        self.model = model
        self.tools = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        self.effect_executor = effect_executor
        self.permission_policy: PermissionPolicy = permission_policy or allow_all()
        if not callable(self.permission_policy):
            msg = "permission_policy must be callable: policy(request) -> Decision"
            raise TypeError(msg)
        self.checkpoints: CheckpointStore = checkpoints or InMemoryCheckpointStore()
        self.trace: TraceSink = trace or InMemoryTraceSink()
        self.audit: AuditSink = audit or InMemoryAuditSink()
        self.max_steps = max_steps

    def __repr__(self) -> str:
        return f"AgentRuntime({self.model!r}, tools={self.tools.names()})"

    # -- sync --------------------------------------------------------------------------

    def start(self, run_id: str, input: str | Sequence[Message]) -> RunResult:  # noqa: A002 - `input` is the documented parameter name
        """Start a new run from ``input`` (a user message, or starting messages).

        Raises :class:`RunExistsError` when ``run_id`` is already checkpointed.
        """
        record = self._new_record(run_id, input)
        record.revision = self.checkpoints.create(record)
        return self._drive(self._machine(record, TraceKind.RUN_STARTED))

    def resume(self, run_id: str) -> RunResult:
        """Continue a run from its checkpoint, in this process or any other.

        A COMPLETED or FAILED run is returned as it is. A call whose effect was
        in doubt is re-issued with the same arguments, so the same operation id
        and fingerprint: the ledger replays or reconciles it. A call awaiting
        approval keeps the run WAITING until :meth:`approve` or :meth:`deny`.
        """
        record = self._load(run_id)
        if record.state.finished:
            return record.result()
        return self._drive(self._machine(record, TraceKind.RUN_RESUMED))

    def start_or_resume(self, run_id: str, input: str | Sequence[Message]) -> RunResult:  # noqa: A002 - `input` is the documented parameter name
        """Start run ``run_id`` from ``input``, or resume it if it is already checkpointed.

        The normal way to drive a run: calling it again after a crash, a
        restart or an operator's resolution continues the same run (``input``
        is used only when the run is new), and a finished run is returned as it is.
        """
        if self.checkpoints.load(run_id) is None:
            try:
                return self.start(run_id, input)
            except RunExistsError:
                pass  # another process started it between the read and the create
        return self.resume(run_id)

    def approve(self, run_id: str, call_id: str, actor: str, reason: str | None = None) -> None:
        """Approve a call the policy held for a person; the next :meth:`resume` runs it.

        Raises :class:`ApprovalNotPendingError` when no call ``call_id`` of the
        run awaits a decision.
        """
        self._decide(run_id, call_id, actor, reason, approve=True)

    def deny(self, run_id: str, call_id: str, actor: str, reason: str | None = None) -> None:
        """Refuse a call the policy held for a person; the next :meth:`resume` tells the model."""
        self._decide(run_id, call_id, actor, reason, approve=False)

    def result(self, run_id: str) -> RunResult:
        """Return where a run stands now, without driving it (RUNNING if it is being driven)."""
        return self._load(run_id).result()

    # -- async -------------------------------------------------------------------------

    async def start_async(self, run_id: str, input: str | Sequence[Message]) -> RunResult:  # noqa: A002 - `input` is the documented parameter name
        """Like :meth:`start`, on the event loop: sync work runs in worker threads."""
        record = self._new_record(run_id, input)
        record.revision = await asyncio.to_thread(self.checkpoints.create, record)
        return await self._drive_async(self._machine(record, TraceKind.RUN_STARTED))

    async def start_or_resume_async(self, run_id: str, input: str | Sequence[Message]) -> RunResult:  # noqa: A002 - `input` is the documented parameter name
        """Like :meth:`start_or_resume`, on the event loop."""
        existing = await asyncio.to_thread(self.checkpoints.load, run_id)
        if existing is None:
            try:
                return await self.start_async(run_id, input)
            except RunExistsError:
                pass  # another process started it between the read and the create
        return await self.resume_async(run_id)

    async def resume_async(self, run_id: str) -> RunResult:
        """Like :meth:`resume`, on the event loop."""
        record = await asyncio.to_thread(self._load, run_id)
        if record.state.finished:
            return record.result()
        return await self._drive_async(self._machine(record, TraceKind.RUN_RESUMED))

    # -- drivers -----------------------------------------------------------------------

    def _drive(self, machine: Machine) -> RunResult:
        value: Any = None
        try:
            while True:
                try:
                    step = machine.send(value)
                except StopIteration as stop:
                    result: RunResult = stop.value
                    return result
                value = self._perform(step)
        finally:
            machine.close()

    async def _drive_async(self, machine: Machine) -> RunResult:
        value: Any = None
        try:
            while True:
                try:
                    step = machine.send(value)
                except StopIteration as stop:
                    result: RunResult = stop.value
                    return result
                value = await self._perform_async(step)
        finally:
            machine.close()

    def _perform(self, step: Step) -> Any:
        if isinstance(step, ModelStep):
            turn = self.model.next_turn(step.messages, step.tools)
            return run_to_completion(turn) if inspect.isawaitable(turn) else turn
        if isinstance(step, ToolStep):
            with call_scope(run_id=step.scope.run_id, call_id=step.scope.call_id):
                return invoke(step.tool, step.arguments, self.effect_executor)
        if isinstance(step, SaveStep):
            step.record.revision = self.checkpoints.save(step.record)
            return None
        return self._statuses(step)

    async def _perform_async(self, step: Step) -> Any:
        if isinstance(step, ModelStep):
            # A sync model (a blocking API client) must not block the loop; an async
            # one only creates its coroutine in the thread, and it is awaited here.
            turn = await asyncio.to_thread(self.model.next_turn, step.messages, step.tools)
            return await turn if inspect.isawaitable(turn) else turn
        if isinstance(step, ToolStep):
            # Set in this task's context, which the tool's worker thread copies.
            with call_scope(run_id=step.scope.run_id, call_id=step.scope.call_id):
                return await invoke_async(step.tool, step.arguments, self.effect_executor)
        if isinstance(step, SaveStep):
            step.record.revision = await asyncio.to_thread(self.checkpoints.save, step.record)
            return None
        return await asyncio.to_thread(self._statuses, step)

    def _statuses(self, step: StatusStep) -> dict[str, EffectStatus | None]:
        ledger = self.effect_executor.ledger
        statuses: dict[str, EffectStatus | None] = {}
        for op in step.operation_ids:
            found = ledger.get(op)
            statuses[op] = None if found is None else found.status
        return statuses

    # -- helpers -----------------------------------------------------------------------

    def _machine(self, record: RunRecord, kind: TraceKind) -> Machine:
        machine = RunMachine(
            record,
            tools=self.tools,
            policy=self.permission_policy,
            trace=self.trace,
            audit=self.audit,
            max_steps=self.max_steps,
        )
        machine.trace(kind, previous=record.state.value)
        return machine.run()

    @staticmethod
    def _new_record(run_id: str, value: str | Sequence[Message]) -> RunRecord:
        if not isinstance(run_id, str) or not run_id.strip():
            msg = f"run_id must be a non-empty string, not {run_id!r}"
            raise InvalidRequestError(msg)
        return RunRecord(run_id=run_id, messages=initial_messages(value))

    def _load(self, run_id: str) -> RunRecord:
        record = self.checkpoints.load(run_id)
        if record is None:
            msg = f"no run {run_id!r} in {self.checkpoints!r}"
            raise RunNotFoundError(msg)
        return record

    def _decide(
        self, run_id: str, call_id: str, actor: str, reason: str | None, *, approve: bool
    ) -> None:
        if not isinstance(actor, str) or not actor.strip():
            msg = "an approval decision needs the actor who made it (a non-empty string)"
            raise InvalidRequestError(msg)
        record = self._load(run_id)
        pending = _awaiting(record, call_id)
        pending.phase = CallPhase.APPROVED if approve else CallPhase.REFUSED
        pending.actor, pending.reason = actor, reason
        record.waiting_on = [
            item for item in record.waiting_on if isinstance(item, str) or item.call_id != call_id
        ]
        action = AuditAction.APPROVED if approve else AuditAction.REFUSED
        machine = RunMachine(
            record,
            tools=self.tools,
            policy=self.permission_policy,
            trace=self.trace,
            audit=self.audit,
            max_steps=self.max_steps,
        )
        # Audited before it is saved: an approval that takes effect is always on record.
        machine.audit(action, pending, actor=actor, reason=reason)
        machine.trace(TraceKind.APPROVAL, pending, decision=action.value, actor=actor)
        record.revision = self.checkpoints.save(record)


def _awaiting(record: RunRecord, call_id: str) -> PendingCall:
    for pending in record.pending:
        if pending.call.id == call_id:
            if pending.phase is not CallPhase.AWAITING_APPROVAL:
                msg = (
                    f"call {call_id} of run {record.run_id!r} is not awaiting approval "
                    f"(it is {pending.phase.value.lower().replace('_', ' ')})"
                )
                raise ApprovalNotPendingError(msg)
            return pending
    msg = f"run {record.run_id!r} has no pending call {call_id!r} awaiting approval"
    raise ApprovalNotPendingError(msg)
