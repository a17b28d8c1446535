"""``@effect`` tools as CrewAI tools (``crewai`` 1.6), paused by ending the crew's run.

::

    from effectguard.adapters.crewai import as_crewai_tool, stop_on_unconfirmed

    refund_tool = as_crewai_tool(refund, run_id="order-1042")
    agent = Agent(role=..., tools=[refund_tool], step_callback=stop_on_unconfirmed)

- :func:`as_crewai_tool` makes a CrewAI ``BaseTool`` whose ``args_schema``
  holds exactly the business parameters (never ``idempotency_key``), each
  described by the docstring's ``Args:``. A confirmed output reaches the
  model as text; a refusal (rejected, conflicting) as a message that invites
  no retry; an unconfirmed effect as the pending payload (JSON) naming the
  operation and the ``agent-effect-ops`` command that resolves it.
- :func:`stop_on_unconfirmed`, as an agent's or the crew's
  ``step_callback``, raises :class:`CrewPaused` out of ``Crew.kickoff``
  right after such a tool call, before the model reads it, so it can neither
  call again nor answer "done". ``CrewPaused.pending`` holds each
  :class:`~effectguard.adapters.PendingEffect` (``approvals`` each
  :class:`~effectguard.adapters.ApprovalRequest`).
- Resuming is kicking the crew off again under the same run id: the
  model's call of the same operation re-reads the ledger, so a QUARANTINED
  operation stays paused and nothing is sent, an OUTCOME_UNKNOWN one is
  re-probed, and a confirmed one replayed. :func:`waiting` re-reads the
  ledger for a pause's operations, so the host knows whether kicking off
  again can finish.

CrewAI 1.6 has no pause a tool can enter (``human_input`` asks on the console
when a task ends; it is not durable) and its agents call tools by parsing the
model's text, so there is no tool-call id. The call scope is therefore
``(run_id, "<task key>:<tool name>")``: the run id is ``run_id=`` (a string or
a function of the :class:`CrewCall`), else the state id of the ``Flow`` that
created the crew (with ``@persist`` it survives a restart), else there is no
scope and only business-key operation ids (templates over the arguments)
work. CrewAI's task key is a hash of the task's description and expected
output as written (before inputs are interpolated), stable across processes.
A ``call_scoped`` operation id thus means one such effect per task and run:
a second call in that task with other arguments is refused as a conflict,
nothing sent. Two identical calls (parallel tasks, crews in threads) are one
operation and share one dispatch.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from effectguard._decorator import executor_of, request_of
from effectguard._model import EffectStatus
from effectguard._scope import CallScope, call_scope
from effectguard.adapters._approval import ApprovalRequest, is_approval_payload, request_payload
from effectguard.adapters._common import (
    Confirmed,
    Outcome,
    Pending,
    PendingEffect,
    PublicSignature,
    _refusal,
    classify,
    is_pending_payload,
    public_signature,
    run_effect,
    run_effect_async,
)
from effectguard.adapters._effect_tools import as_text
from effectguard.errors import (
    ConfigurationError,
    EffectGuardError,
    OperationConflictError,
    OutputNotStored,
)

try:
    from crewai.hooks import (
        get_after_tool_call_hooks,
        get_before_tool_call_hooks,
        register_after_tool_call_hook,
        register_before_tool_call_hook,
    )
    from crewai.hooks.tool_hooks import ToolCallHookContext
    from crewai.tools import BaseTool
    from crewai.tools.tool_types import ToolResult
    from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, create_model
except ModuleNotFoundError as exc:  # pragma: no cover - exercised without the extra
    msg = (
        "effectguard.adapters.crewai needs the 'crewai' extra "
        f"({exc.name} is not installed): pip install 'effectguard[crewai]'"
    )
    raise ImportError(msg, name=exc.name) from exc

__all__ = [
    "CrewCall",
    "CrewPaused",
    "EffectTool",
    "RunId",
    "as_crewai_tool",
    "stop_on_unconfirmed",
    "waiting",
]

logger = logging.getLogger("effectguard.adapters.crewai")


@dataclass(frozen=True, slots=True)
class CrewCall:
    """Who is calling a tool, as CrewAI's tool hooks tell it: the crew, the task, the agent.

    Any of them may be None (an agent kicked off without a crew has no task).
    """

    crew: Any
    task: Any
    agent: Any


#: A run id, or how to read one from the call (e.g. an order id in the crew's inputs).
RunId = str | Callable[[CrewCall], str]

# Set by a before-tool-call hook for the tool body that runs right after it, in the same
# thread: CrewAI passes a tool only its arguments, and its hooks are where the task is seen.
# It holds the tool the hook saw too, so a body run without the hooks (``tool.run(...)``
# directly) never takes another call's task for its own.
_current_call: contextvars.ContextVar[tuple[object, CrewCall] | None] = contextvars.ContextVar(
    "effectguard_crewai_call", default=None
)
# A failure of the infrastructure (no executor, ledger unreachable, scope missing) in the tool
# body, kept for stop_on_unconfirmed to raise: CrewAI would show the model a raised error.
_failure: contextvars.ContextVar[BaseException | None] = contextvars.ContextVar(
    "effectguard_crewai_failure", default=None
)


class CrewPaused(EffectGuardError):
    """Raised out of ``Crew.kickoff`` by :func:`stop_on_unconfirmed`: an effect waits.

    ``pending`` lists each operation whose outcome is not confirmed (an
    operator resolves it with its ``operator_command``); ``approvals`` each
    request that waits for a person's approval. Kick the crew off again under
    the same run id once :func:`waiting` is empty.
    """

    def __init__(
        self, pending: Sequence[PendingEffect], approvals: Sequence[ApprovalRequest] = ()
    ) -> None:
        self.pending = list(pending)
        self.approvals = list(approvals)
        lines = [p.message() for p in self.pending] + [a.message() for a in self.approvals]
        super().__init__("the crew paused on an effect: " + " | ".join(lines))


def _before(context: ToolCallHookContext) -> None:
    tool = getattr(context.tool, "_original_tool", None)
    if isinstance(tool, EffectTool):
        _current_call.set((tool, CrewCall(context.crew, context.task, context.agent)))


def _after(context: ToolCallHookContext) -> None:
    if isinstance(getattr(context.tool, "_original_tool", None), EffectTool):
        _current_call.set(None)


def _install_hooks() -> None:
    """Register the hooks once per process: CrewAI keeps one global list of each."""
    if _before not in get_before_tool_call_hooks():
        register_before_tool_call_hook(_before)
    if _after not in get_after_tool_call_hooks():
        register_after_tool_call_hook(_after)


def _flow_id(call: CrewCall) -> str | None:
    flow = getattr(call.crew, "parent_flow", None)
    state = getattr(flow, "state", None)
    value = state.get("id") if isinstance(state, Mapping) else getattr(state, "id", None)
    return value if isinstance(value, str) and value else None


def _scope(made: EffectTool, run_id: RunId | None, tool: str) -> CallScope | None:
    """The call scope of this call of ``made``, or None when nothing names the run."""
    current = _current_call.get()
    seen = current is not None and current[0] is made
    call = current[1] if current is not None and seen else CrewCall(None, None, None)
    if run_id is None:
        run = _flow_id(call)
    else:
        run = run_id(call) if callable(run_id) else run_id
        if not isinstance(run, str) or not run:
            msg = f"{tool}: run_id= must give a non-empty string, not {run!r}; nothing was sent"
            raise ConfigurationError(msg)
    if run is None:
        return None
    owner = call.task if call.task is not None else call.agent
    key = getattr(owner, "key", None)
    return CallScope(run, f"{key}:{tool}" if key else tool)


def _schema(public: PublicSignature) -> type[BaseModel]:
    """The model CrewAI validates arguments with: the public parameters, described."""
    fields: dict[str, Any] = {}
    for parameter in public.signature.parameters.values():
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[parameter.name] = (
            public.hints.get(parameter.name, Any),
            Field(default, description=public.descriptions.get(parameter.name)),
        )
    title = "".join(part.title() for part in public.name.split("_")) + "Arguments"
    return create_model(title, **fields)


def _text(outcome: Outcome, approval: ApprovalRequest | None) -> str:
    """What the model would read; :func:`stop_on_unconfirmed` keeps it from a pending one."""
    if approval is not None:
        logger.warning(
            "tool %s: operation %s awaits a person's approval in the ledger; nothing was sent",
            approval.tool,
            approval.operation_id,
        )
        message = (
            f"{approval.tool} was not sent: operation {approval.operation_id} needs a person's "
            f"approval of exactly this request. Do not call {approval.tool} again for it and do "
            "not report it as done."
        )
        return json.dumps({**approval.to_json(), "message": message}, ensure_ascii=False)
    if isinstance(outcome, Confirmed):
        return as_text(outcome.output)
    if isinstance(outcome, Pending):
        effect = outcome.effect
        logger.warning(
            "tool %s: operation %s is %s; the crew should pause",
            effect.tool,
            effect.operation_id,
            effect.status.value,
        )
        message = (
            f"The outcome of {effect.tool} is not confirmed (operation {effect.operation_id} "
            f"is {effect.status.value}). Do not call {effect.tool} again for it and do not "
            f"report it as done: an operator must resolve it ({effect.operator_command})."
        )
        return json.dumps({**effect.to_json(), "message": message}, ensure_ascii=False)
    return outcome.message


class EffectTool(BaseTool):
    """A CrewAI tool running an ``@effect`` function under its contract (:func:`as_crewai_tool`)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    effect_function: Any = Field(exclude=True)
    run_id: Any = Field(default=None, exclude=True)
    _public: PublicSignature = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        """Keep the public signature; then CrewAI writes its description."""
        self._public = public_signature(self.effect_function, name=self.name)
        super().model_post_init(context)

    def _run(self, **arguments: Any) -> str:
        fn, public = self.effect_function, self._public
        _failure.set(None)
        try:
            scope = _scope(self, self.run_id, public.name)
            outcome = _outcome(fn, public, arguments, scope)
            return _text(outcome, _awaiting(fn, arguments, scope, outcome))
        except Exception as exc:
            # CrewAI would run the body again and show the model the error: keep it for
            # stop_on_unconfirmed, which raises it to the application instead.
            _failure.set(exc)
            logger.exception("tool %s could not be completed", public.name)
            return (
                f"{public.name} could not be completed ({type(exc).__name__}: {exc}). "
                f"Do not call {public.name} again in this run; tell the user it needs attention."
            )


def _outcome(
    fn: Any, public: PublicSignature, arguments: Mapping[str, Any], scope: CallScope | None
) -> Outcome:
    """Run one call; an async tool in its own event loop, as CrewAI runs async functions.

    CrewAI calls a tool body in a thread without a running loop (``kickoff_async``
    runs the crew in a worker thread), so ``asyncio.run`` is safe here.
    """
    is_async = inspect.iscoroutinefunction(fn)
    if scope is not None:
        tool, call_id = public.name, scope.call_id
        if is_async:
            return asyncio.run(
                run_effect_async(fn, arguments, scope=scope, tool=tool, tool_call_id=call_id)
            )
        return run_effect(fn, arguments, scope=scope, tool=tool, tool_call_id=call_id)
    # No run to scope by: a business-key operation id needs none, and one that reads the
    # scope raises a ConfigurationError before anything is recorded.
    try:
        result = asyncio.run(fn.execute(**arguments)) if is_async else fn.execute(**arguments)
    except (OperationConflictError, OutputNotStored) as exc:
        return _refusal(exc, public.name)
    return classify(fn, result, tool=public.name, tool_call_id=public.name)


def _awaiting(
    fn: Any, arguments: Mapping[str, Any], scope: CallScope | None, outcome: Outcome
) -> ApprovalRequest | None:
    """The approval payload of a call that came back AWAITING_APPROVAL; None for any other."""
    if not isinstance(outcome, Pending) or outcome.effect.status is not _AWAITING:
        return None
    effect = outcome.effect
    if scope is None:
        request = request_of(fn, **arguments)
    else:
        with call_scope(run_id=scope.run_id, call_id=scope.call_id):
            request = request_of(fn, **arguments)
    return request_payload(
        fn,
        tool=effect.tool,
        tool_call_id=effect.tool_call_id,
        operation_id=effect.operation_id,
        arguments=request.arguments,
        fingerprint=request.fingerprint,
        reason=effect.reason,
        run_id=None if scope is None else scope.run_id,
    )


_AWAITING = EffectStatus.AWAITING_APPROVAL


def as_crewai_tool(fn: Any, *, run_id: RunId | None = None, name: str | None = None) -> EffectTool:
    """Return a CrewAI tool running the ``@effect`` function ``fn`` under its contract.

    Its ``args_schema`` holds exactly ``fn``'s business parameters with their
    docstring descriptions; CrewAI validates the model's arguments with it. A
    call runs under the call scope described in this module's docstring and
    returns the confirmed output as text, a refusal as a message that invites
    no retry, and an unconfirmed effect (or a request awaiting approval) as
    its JSON payload, which :func:`stop_on_unconfirmed` ends the run on.
    CrewAI's result cache is off for the tool: a later identical call asks the
    ledger, never a cached pending answer. Raises :class:`ConfigurationError`
    for a function that is not an ``@effect`` function.
    """
    public = public_signature(fn, name=name)
    _install_hooks()
    return EffectTool(
        name=public.name,
        description=public.description or public.name,
        args_schema=_schema(public),
        effect_function=fn,
        run_id=run_id,
        cache_function=lambda _arguments=None, _result=None: False,
    )


def _payload(text: object) -> object:
    if not isinstance(text, str) or not text.startswith("{"):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def stop_on_unconfirmed(step: Any) -> None:
    """A ``step_callback`` raising :class:`CrewPaused` right after a tool call that must pause.

    CrewAI calls it with the tool's result before the model reads it. An
    unconfirmed effect or a request awaiting approval raises
    :class:`CrewPaused`; a failure of the infrastructure in the tool body (no
    executor, an unreachable ledger, a call-scoped operation id without a run
    id) is raised as itself. Any other step passes. The exception ends
    ``Crew.kickoff``, after CrewAI's own retries of the task
    (``Agent.max_retry_limit``, 2 by default): each retry asks the model again,
    and its call of the same operation only re-reads the ledger.
    """
    if not isinstance(step, ToolResult):
        return
    failure = _failure.get()
    if failure is not None:
        _failure.set(None)
        raise failure
    data = _payload(step.result)
    if is_pending_payload(data):
        raise CrewPaused([PendingEffect.from_json(data)])
    if is_approval_payload(data):
        raise CrewPaused([], [ApprovalRequest.from_json(data)])


def waiting(
    paused: CrewPaused | Iterable[PendingEffect], tools: Iterable[Any]
) -> list[PendingEffect]:
    """Re-read the ledger for the operations a pause named: those still not settled.

    ``tools`` are the ``@effect`` functions or the tools :func:`as_crewai_tool`
    made. An operation the ledger holds CONFIRMED or REJECTED is dropped (the
    next kickoff replays it); any other comes back with the ledger's status
    now. Reads only: nothing is sent. An empty list means kicking the crew
    off again under the same run id can finish.
    """
    table = {}
    for given in tools:
        if isinstance(given, EffectTool):
            table[given.name] = given.effect_function
        else:
            table[public_signature(given).name] = given
    effects = paused.pending if isinstance(paused, CrewPaused) else list(paused)
    still = []
    for effect in effects:
        fn = table.get(effect.tool)
        if fn is None:
            msg = f"{effect.tool!r} is not among tools= ({sorted(table)}); pass it to read it"
            raise ConfigurationError(msg)
        record = executor_of(fn).ledger.get(effect.operation_id)
        if record is None:
            still.append(effect)
        elif record.status not in (EffectStatus.CONFIRMED, EffectStatus.REJECTED):
            still.append(
                PendingEffect(
                    tool=effect.tool,
                    tool_call_id=effect.tool_call_id,
                    operation_id=record.operation_id,
                    status=record.status,
                    reason=record.reason,
                    attempts=record.attempts,
                    operator_command=effect.operator_command,
                    run_id=effect.run_id,
                )
            )
    return still
