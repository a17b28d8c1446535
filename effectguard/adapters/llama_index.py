"""``@effect`` tools in LlamaIndex agent workflows (``llama-index-core`` 0.14), paused in them.

:func:`as_function_tool` makes a LlamaIndex ``FunctionTool`` whose schema holds
exactly the business parameters (never ``idempotency_key``), each described by
the docstring's ``Args:``. An agent workflow (``FunctionAgent``,
``AgentWorkflow``) calls it like any tool; what the model reads of each outcome:

- confirmed (fresh or replayed): the output, as text (JSON for JSON values);
- REJECTED, a request conflicting with the one recorded under its operation
  id, a denied approval, or an output that took effect but could not be kept:
  a tool error (``ToolOutput.is_error``) saying not to retry it;
- a request that provably never left: a tool error saying that calling again
  sends it once;
- anything else (an unknown outcome, quarantined, a peer still dispatching, a
  request awaiting a person's approval): the model reads nothing. The tool
  pauses the workflow with LlamaIndex's human-in-the-loop wait
  (``ctx.wait_for_event``): an :class:`EffectPaused` (an ``InputRequiredEvent``)
  carrying the pending payload (or the approval payload) goes to the event
  stream, and the call waits for an :class:`EffectResume` (a
  ``HumanResponseEvent``) naming its tool call.

The workflow ``Context`` of a paused run can be kept
(``handler.ctx.to_dict(serializer=PickleSerializer())``: the default JSON
serializer drops the agent's memory) and the run continued in another process
(``Context.from_dict(agent, data, serializer=...)``, ``agent.run(ctx=ctx)``,
then :func:`resume_event` for each of :func:`paused_calls`). Sending
:func:`resume_event` of a pause does not settle anything: LlamaIndex replays
the tool call from its start, and the tool re-reads the ledger. A
QUARANTINED operation (or a request still awaiting approval) pauses again
with a fresh :class:`EffectPaused` and nothing is sent; an OUTCOME_UNKNOWN one
is probed again; a CONFIRMED one is replayed to the model, never re-sent.
A failure of the infrastructure (an unreachable ledger, a call scope that
changed) is logged and reaches the model as a tool error telling it to stop:
an agent workflow shows the model whatever a tool raises.

Each call runs under the call scope ``run_id`` = the workflow run's id, kept
in the workflow's state store when the run first calls an ``@effect`` tool
(so a run continued from a serialized ``Context`` keeps it), and ``call_id`` =
the tool call id of the model's ``ToolSelection``. LlamaIndex does not pass a
tool its call id: the tool reads the ``ToolCall`` event the agent's
``call_tool`` step is processing, so the tool must be called by an agent
workflow, not directly (:class:`~effectguard.ConfigurationError` otherwise).
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from effectguard._decorator import executor_of
from effectguard._model import EffectStatus
from effectguard._scope import CallScope
from effectguard.adapters._approval import (
    ApprovalRequest,
    approval_request,
    decide,
    denial_message,
)
from effectguard.adapters._common import (
    Confirmed,
    Pending,
    PendingEffect,
    public_signature,
    require_effect,
    resume_effect_async,
    run_effect_async,
)
from effectguard.adapters._effect_tools import as_text
from effectguard.errors import ConfigurationError, EffectGuardError, InvalidRequestError
from effectguard.ledger import EffectLedger

try:
    from llama_index.core.agent.workflow.workflow_events import ToolCall
    from llama_index.core.tools import FunctionTool, ToolMetadata, ToolOutput
    from llama_index_instrumentation.dispatcher import active_instrument_tags
    from pydantic import BaseModel, Field, ValidationError, create_model
    from workflows import Context
    from workflows.events import HumanResponseEvent, InputRequiredEvent
    from workflows.runtime.types.results import StepWorkerStateContextVar
except ModuleNotFoundError as exc:  # pragma: no cover - exercised without the extra
    msg = (
        "effectguard.adapters.llama_index needs the 'llama-index' extra "
        f"({exc.name} is not installed): pip install 'effectguard[llama-index]'"
    )
    raise ImportError(msg, name=exc.name) from exc

__all__ = [
    "RUN_ID_KEY",
    "EffectPaused",
    "EffectResume",
    "as_function_tool",
    "paused_calls",
    "record_approval",
    "resume_event",
]

logger = logging.getLogger("effectguard.adapters.llama_index")

#: The key of the workflow state store holding the run id of the call scope.
RUN_ID_KEY = "effectguard_run_id"

#: The key, in the workflow state store, of the pauses the run's tool calls are at, by call id.
_PAUSED_KEY = "effectguard_paused"

#: The key, in the workflow state store, of the tool calls already answered.
_DONE_KEY = "effectguard_answered"


class EffectPaused(InputRequiredEvent):
    """A tool call waits: its effect is not confirmed, or a person must approve its request.

    Written to the event stream once per pause. ``payload`` is the pending
    payload (:meth:`effectguard.adapters.PendingEffect.to_json`) or, for a
    request awaiting approval, the approval payload
    (:meth:`effectguard.adapters.ApprovalRequest.to_json`: the arguments as the
    ledger holds them, redacted values masked); ``payload["operator_command"]``
    resolves it. ``prefix`` is one line for a person. The call continues only
    after :func:`resume_event` of this pause is sent, and then only as the
    ledger says.
    """

    prefix: str
    tool: str
    tool_call_id: str
    operation_id: str
    status: str
    payload: dict[str, Any]
    round: int = 1


class EffectResume(HumanResponseEvent):
    """Asks the paused tool call ``tool_call_id`` to read the ledger again.

    It carries no outcome and no approval: the tool decides from the ledger
    alone, so sending it before an operator acts only pauses the call again.
    """

    tool_call_id: str
    operation_id: str
    round: int = 1
    response: str = "resume"


def resume_event(paused: EffectPaused | Mapping[str, Any]) -> EffectResume:
    """The event that resumes the tool call of ``paused`` (an :class:`EffectPaused` or its payload).

    Send it once per pause, with ``handler.ctx.send_event(resume_event(paused))``,
    once the operator has resolved the operation (``payload["operator_command"]``):
    LlamaIndex re-delivers the call for every resume that matches a pause.
    """
    if isinstance(paused, EffectPaused):
        return EffectResume(
            tool_call_id=paused.tool_call_id, operation_id=paused.operation_id, round=paused.round
        )
    call_id, operation = paused.get("tool_call_id"), paused.get("operation_id")
    round_ = paused.get("round", 1)
    if (
        not isinstance(call_id, str)
        or not isinstance(operation, str)
        or not isinstance(round_, int)
    ):
        msg = f"not an effectguard pause (no tool_call_id/operation_id/round): {paused!r}"
        raise InvalidRequestError(msg)
    return EffectResume(tool_call_id=call_id, operation_id=operation, round=round_)


async def paused_calls(ctx: Context) -> list[EffectPaused]:
    """The pause each waiting ``@effect`` tool call of the run is at, from the workflow's state.

    For a run continued from a serialized ``Context`` in another process,
    which has not seen the :class:`EffectPaused` events: resume each with
    :func:`resume_event`. A call that has since finished is not listed.
    """
    kept, answered = await _kept(ctx)
    return [
        EffectPaused.model_validate(pause)
        for call_id, pause in kept.items()
        if call_id not in answered
    ]


async def _kept(ctx: Context) -> tuple[Mapping[str, Any], frozenset[str]]:
    """The run's pauses by tool call id, and the calls already answered: one read of the state."""
    state = await ctx.store.get_state()
    kept = state.get(_PAUSED_KEY, None)
    done = state.get(_DONE_KEY, None)
    return (
        kept if isinstance(kept, Mapping) else {},
        frozenset(done) if isinstance(done, list) else frozenset(),
    )


def record_approval(
    fn: Any,
    paused: EffectPaused,
    *,
    approve: bool,
    actor: str,
    reason: str,
    evidence_reference: str,
    expires_in: float | None = None,
) -> EffectResume:
    """Write a person's decision on the approval ``paused`` shows; the event that resumes the call.

    ``approve=True`` approves exactly the request the ledger holds (bound to
    its fingerprint and to the state shown: a request that moved since is
    refused, nothing written); ``False`` denies it (REJECTED, never sent, and
    the model reads a refusal that invites no retry). Blocks on the ledger;
    from async code, ``await asyncio.to_thread(record_approval, ...)``.
    """
    request = ApprovalRequest.from_json(paused.payload)
    decide(
        _ledger(fn),
        request,
        approve=approve,
        actor=actor,
        reason=reason,
        evidence_reference=evidence_reference,
        expires_in=expires_in if approve else None,
    )
    return resume_event(paused)


def _ledger(fn: Any) -> EffectLedger:
    """The ledger of ``fn``'s executor."""
    return executor_of(fn).ledger


# -- the tool ----------------------------------------------------------------------------


def _schema(fn: Any, name: str) -> type[BaseModel]:
    """The pydantic model LlamaIndex offers the model: the public parameters, described."""
    public = public_signature(fn, name=name)
    fields: dict[str, Any] = {}
    for parameter in public.signature.parameters.values():
        hint = public.hints.get(parameter.name, Any)
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        description = public.descriptions.get(parameter.name)
        fields[parameter.name] = (hint, Field(default, description=description))
    return typing.cast("type[BaseModel]", create_model(name, **fields))


@dataclass(frozen=True, slots=True)
class _Failure:
    """A tool error for the model: the callback turns it into ``ToolOutput(is_error=True)``."""

    message: str


def _call_id() -> str:
    """The tool call id of the ``ToolCall`` event the agent's step is processing."""
    try:
        event = StepWorkerStateContextVar.get().event
    except LookupError:
        event = None
    if not isinstance(event, ToolCall) or not event.tool_id:
        msg = (
            "an effectguard LlamaIndex tool must be called by an agent workflow "
            "(FunctionAgent, AgentWorkflow), which gives it its tool call id; nothing was sent"
        )
        raise ConfigurationError(msg)
    return event.tool_id


async def _run_id(ctx: Context) -> str:
    """The run id of the call scope, kept in the state store so a continued run has the same."""
    stored = await ctx.store.get(RUN_ID_KEY, default=None)
    if isinstance(stored, str) and stored:
        return stored
    run_id = _workflow_run_id()
    await ctx.store.set(RUN_ID_KEY, run_id)
    return run_id


def _workflow_run_id() -> str:
    """The id LlamaIndex tags the running workflow's spans with (``llamaindex.run_id``)."""
    run_id = active_instrument_tags.get().get("llamaindex.run_id")
    if not isinstance(run_id, str) or not run_id:
        msg = "the workflow run has no run id (llamaindex.run_id); nothing was sent"
        raise ConfigurationError(msg)
    return run_id


class _InvalidArgumentsError(Exception):
    """The model's arguments do not fit the schema: reported to the model, nothing sent."""


def _validated(schema: type[BaseModel], name: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments as the schema validates them: what the operation's fingerprint is taken from.

    LlamaIndex passes the model's arguments unvalidated; ``"1999"`` for an int
    would otherwise be another request than ``1999``.
    """
    try:
        parsed = schema.model_validate(dict(raw))
    except ValidationError as exc:
        msg = f"{name} was not called, its arguments do not fit its parameters: {exc}"
        raise _InvalidArgumentsError(msg) from exc
    return {key: getattr(parsed, key) for key in schema.model_fields}


def _pause_payload(fn: Any, effect: PendingEffect) -> dict[str, Any]:
    """The payload of a pause: the approval request (from the ledger) or the pending effect."""
    if effect.status is EffectStatus.AWAITING_APPROVAL:
        return approval_request(fn, effect).to_json()
    return effect.to_json()


def _denied(fn: Any, operation_id: str | None, tool: str) -> str | None:
    """The denial message when the ledger holds this request denied by a person, else None."""
    if operation_id is None:
        return None
    record = _ledger(fn).get(operation_id)
    if record is None or record.status is not EffectStatus.REJECTED:
        return None
    if "denied_fingerprint" not in record.evidence:
        return None
    return denial_message(tool, record)


async def _answer(
    fn: Any,
    name: str,
    ctx: Context,
    call_id: str,
    arguments: dict[str, Any],
    paused: Mapping[str, Any] | None,
) -> Any:
    """Run or resume one call: its output, a :class:`_Failure`, or (pending) a wait that raises."""
    scope = CallScope(run_id=await _run_id(ctx), call_id=call_id)
    if paused is None:
        outcome = await run_effect_async(
            fn, arguments, scope=scope, tool=name, tool_call_id=call_id
        )
    else:
        # LlamaIndex replays a waiting step from its start: this is the resume. A call
        # that ever paused always resumes here (its pause is never forgotten), so a late
        # delivery needs the ledger's record and can never dispatch afresh.
        pending = PendingEffect.from_json(paused["payload"]["pending"])
        outcome = await resume_effect_async(fn, arguments, pending=pending, scope=scope)
    if not isinstance(outcome, Pending):
        if isinstance(outcome, Confirmed):
            return outcome.output
        denial = None
        if paused is not None:
            denial = await asyncio.to_thread(_denied, fn, outcome.operation_id, name)
        return _Failure(denial or outcome.message)
    effect = outcome.effect
    payload = await asyncio.to_thread(_pause_payload, fn, effect)
    round_ = 1 if paused is None else int(paused["round"])
    await _wait(ctx, effect, payload, round_)
    # Unreachable in a workflow: the wait raises until a resume arrives, which replays the call.
    return _Failure(effect.message())


def _tool_function(fn: Any, name: str, schema: type[BaseModel]) -> Any:
    async def call(ctx: Context, **raw: Any) -> Any:
        try:
            arguments = _validated(schema, name, raw)
        except _InvalidArgumentsError as exc:
            return _Failure(str(exc))
        call_id = _call_id()
        kept, answered = await _kept(ctx)
        if call_id in answered:
            await _park(ctx, call_id)
        try:
            answer = await _answer(fn, name, ctx, call_id, arguments, kept.get(call_id))
        except EffectGuardError as exc:
            # The agent shows whatever a tool raises to the model as text, so an
            # infrastructure failure (an unreachable ledger, a changed call scope) is
            # logged for the host and reaches the model as a stop, never as "try again".
            logger.exception("tool %s (call %s) failed", name, call_id)
            answer = _Failure(
                f"{name} could not be completed ({type(exc).__name__}: {exc}). Do not call "
                f"{name} again in this run; tell the user it needs attention."
            )
        if not await _finish(ctx, call_id):
            await _park(ctx, call_id)
        return answer

    return call


async def _finish(ctx: Context, call_id: str) -> bool:
    """Mark the call answered; False when another delivery of it answered first."""
    async with ctx.store.edit_state() as state:
        done = state.get(_DONE_KEY, None)
        answered = list(done) if isinstance(done, list) else []
        if call_id in answered:
            return False
        state[_DONE_KEY] = [*answered, call_id]
    return True


async def _park(ctx: Context, call_id: str) -> None:
    """Stop a second delivery of an answered call: it waits on an event nothing ever sends.

    LlamaIndex re-delivers a waiting call once for every resume matching any
    of its pauses, including one already answered (a resume sent twice, or an
    old pause's resume sent after a restore). The agent counts one result per
    tool call, so a second result would start a second model turn.
    """
    logger.info("tool call %s was already answered; a repeated resume is ignored", call_id)
    await ctx.wait_for_event(
        EffectResume,
        waiter_id=f"effectguard:{call_id}:answered",
        requirements={"tool_call_id": call_id, "round": 0},
        timeout=None,
    )


async def _wait(ctx: Context, effect: PendingEffect, payload: dict[str, Any], round_: int) -> None:
    """Pause on ``effect`` at ``round_``; a resume of that round already received moves to the next.

    Each pause is a waiter of its own (``…:1``, ``…:2``) that only the resume
    of that round matches: LlamaIndex re-delivers the call for every waiter a
    resume matches, so one resume must wake one replay. A replay finding its
    round answered (the ledger was read again at the top of this replay and
    still holds the call pending) waits on the next round, which writes a
    fresh :class:`EffectPaused` to the stream.
    """
    logger.warning(
        "tool %s (call %s): operation %s is %s; the workflow waits for a resume",
        effect.tool,
        effect.tool_call_id,
        effect.operation_id,
        effect.status.value,
    )
    for current in itertools.count(round_):
        pause = EffectPaused(
            prefix=effect.message(),
            tool=effect.tool,
            tool_call_id=effect.tool_call_id,
            operation_id=effect.operation_id,
            status=effect.status.value,
            payload={**payload, "pending": effect.to_json()},
            round=current,
        )
        async with ctx.store.edit_state() as state:
            kept = state.get(_PAUSED_KEY, None)
            state[_PAUSED_KEY] = {
                **(kept if isinstance(kept, Mapping) else {}),
                effect.tool_call_id: pause.model_dump(mode="json"),
            }
        await ctx.wait_for_event(
            EffectResume,
            waiter_event=pause,
            waiter_id=f"effectguard:{effect.tool_call_id}:{current}",
            requirements={"tool_call_id": effect.tool_call_id, "round": current},
            timeout=None,
        )


def _callback(name: str) -> Any:
    """Turn a :class:`_Failure` into LlamaIndex's tool error, and an output into text."""

    def to_output(raw: Any) -> ToolOutput | str:
        if isinstance(raw, _Failure):
            return ToolOutput(
                content=raw.message,
                tool_name=name,
                raw_input={},
                raw_output=None,
                is_error=True,
            )
        return as_text(raw)

    return to_output


def as_function_tool(
    fn: Any, *, name: str | None = None, description: str | None = None
) -> FunctionTool:
    """Return ``fn``, an ``@effect`` function (sync or async), as a LlamaIndex ``FunctionTool``.

    Its schema (``tool.metadata.fn_schema``) holds exactly ``fn``'s business
    parameters with their docstring descriptions. A confirmed effect returns
    its output; a refused one a tool error that invites no retry; any other
    outcome pauses the workflow (:class:`EffectPaused`) until
    :func:`resume_event` is sent, and then continues only as the ledger says.
    Raises :class:`~effectguard.ConfigurationError` when ``fn`` is not an ``@effect`` tool.
    """
    require_effect(fn, "effectguard.adapters.llama_index.as_function_tool()")
    public = public_signature(fn, name=name)
    schema = _schema(fn, public.name)
    function = _tool_function(fn, public.name, schema)
    function.__signature__ = inspect.Signature(
        [
            inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Context),
            inspect.Parameter("raw", inspect.Parameter.VAR_KEYWORD),
        ]
    )
    function.__name__ = function.__qualname__ = public.name
    function.__doc__ = public.description
    metadata = ToolMetadata(
        name=public.name, description=description or public.description, fn_schema=schema
    )
    return FunctionTool(async_fn=function, metadata=metadata, callback=_callback(public.name))
