"""``@effect`` tools in the OpenAI Agents SDK (``openai-agents`` 0.24), paused where the host sees.

The SDK has no pause from inside a tool body, so an unconfirmed effect is
mapped onto three of its public pieces:

- :func:`as_function_tool` makes a ``FunctionTool`` whose schema holds the
  business parameters only (keyword-only, described by the docstring's
  ``Args:``). A confirmed output reaches the model as text; an unconfirmed
  one as the pending payload, which tells the model not to call again;
  failures never say "Please try again".
- :func:`stop_on_unconfirmed`, as the agent's ``tool_use_behavior``, ends the
  run before the model reads an unconfirmed effect; :func:`pending_effects`
  lists them (each a :class:`~effectguard.adapters.PendingEffect`, as in
  every adapter). Once an operator has resolved them,
  :func:`settle_input` (or :func:`asettle_input`) replaces the pending tool
  outputs of ``result.to_input_list()`` with the ledger's confirmed output,
  and ``Runner.run(agent, items)`` carries on.
- :func:`ledger_gate`, as ``needs_approval=`` (``as_function_tool`` sets it),
  interrupts any later call of an operation that is not settled before
  anything is dispatched: ``RunState.to_string()`` keeps the run, an operator
  confirms in the ledger, ``state.approve(item)``, and the body replays the
  ledger without a dispatch.

Each call runs under the call scope ``(run_id, ToolContext.tool_call_id)``;
the gate computes the same operation id from its ``call_id``. ``run_id`` is a
string or a function of the run context, and must be the same when the run
is continued: call-scoped operation ids need both to be stable.

An agent with a structured ``output_type``: :func:`stop_on_unconfirmed` ends
the run with a text ``final_output`` (not an instance of that type); read
:func:`pending_effects` first.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from effectguard._decorator import executor_of, operation_id_of
from effectguard._model import EffectStatus
from effectguard._scope import CallScope, call_scope
from effectguard.adapters._common import (
    Confirmed,
    Outcome,
    Pending,
    PendingEffect,
    PublicSignature,
    is_pending_payload,
    public_signature,
    resume_effect,
    resume_effect_async,
    run_effect_async,
)
from effectguard.adapters._effect_tools import as_text, keyword_parameters, stand_in
from effectguard.errors import ConfigurationError

try:
    from agents import FunctionTool, RunContextWrapper, ToolsToFinalOutputResult, function_tool
    from agents.exceptions import ModelBehaviorError
    from agents.function_schema import function_schema
    from agents.tool import FunctionToolResult
    from agents.tool_context import ToolContext
    from pydantic import Field, ValidationError
except ModuleNotFoundError as exc:  # pragma: no cover - exercised without the extra
    msg = (
        "effectguard.adapters.openai_agents needs the 'openai-agents' extra "
        f"({exc.name} is not installed): pip install 'effectguard[openai-agents]'"
    )
    raise ImportError(msg, name=exc.name) from exc

__all__ = [
    "DEFAULT_RUN_ID",
    "RunId",
    "as_function_tool",
    "asettle_input",
    "ledger_gate",
    "pending_effects",
    "settle_input",
    "stop_on_unconfirmed",
]

logger = logging.getLogger("effectguard.adapters.openai_agents")

#: The run id of the call scope when none is given: OpenAI tool call ids are unique by themselves.
DEFAULT_RUN_ID = "openai-agents"

#: A run id, or how to read one from the run context (e.g. a conversation id in your context).
RunId = str | Callable[[RunContextWrapper[Any]], str]

_TOOL_ATTRIBUTE = "_effectguard_effect"


def _run_id(run_id: RunId, ctx: RunContextWrapper[Any]) -> str:
    value = run_id(ctx) if callable(run_id) else run_id
    if not isinstance(value, str) or not value:
        msg = f"run_id= must give a non-empty string, not {value!r}"
        raise ConfigurationError(msg)
    return value


def _text(outcome: Outcome) -> str:
    """What the model reads: the output, a refusal that invites no retry, or the pending payload.

    The payload keeps the call scope's ``run_id``, so a later
    :func:`settle_input` recomputes the same operation id.
    """
    if isinstance(outcome, Confirmed):
        return as_text(outcome.output)
    if isinstance(outcome, Pending):
        effect = outcome.effect
        logger.warning(
            "tool %s (call %s): operation %s is %s; the run should pause",
            effect.tool,
            effect.tool_call_id,
            effect.operation_id,
            effect.status.value,
        )
        message = (
            f"The outcome of {effect.tool} is not confirmed (operation {effect.operation_id} "
            f"is {effect.status.value}). Do not call {effect.tool} again for it and do not "
            "report it as done: an operator must resolve it, then the host resumes this call."
        )
        return json.dumps({**effect.to_json(), "message": message}, ensure_ascii=False)
    return outcome.message


def _failure_message(public: PublicSignature) -> Callable[[RunContextWrapper[Any], Exception], str]:
    def failure(ctx: RunContextWrapper[Any], error: Exception) -> str:  # noqa: ARG001 - SDK's signature
        if isinstance(error, ModelBehaviorError):
            return f"{public.name} was not called, its arguments are invalid: {error}"
        logger.error("tool %s failed: %s", public.name, error, exc_info=error)
        return (
            f"{public.name} could not be completed ({type(error).__name__}: {error}). "
            f"Do not call {public.name} again in this run; tell the user it needs attention."
        )

    return failure


def as_function_tool(
    fn: Any, *, gate: bool = True, run_id: RunId = DEFAULT_RUN_ID, name: str | None = None
) -> FunctionTool:
    """Return a ``FunctionTool`` running the ``@effect`` function ``fn`` under its contract.

    Its schema holds exactly ``fn``'s business parameters, keyword-only, with
    their docstring descriptions. A call runs under the call scope
    ``(run_id, tool_call_id)`` and returns the confirmed output as text, a
    refusal (rejected, conflicting) as a message that invites no retry, and
    an unconfirmed effect as the pending payload (JSON). Any other failure
    reaches the model through a ``failure_error_function`` that does not say
    "try again". With ``gate`` (the default) a call of an operation that is
    not settled is interrupted before dispatch (:func:`ledger_gate`).
    """
    public = public_signature(fn, name=name)

    async def invoke(ctx: ToolContext[Any], **arguments: Any) -> str:
        scope = CallScope(_run_id(run_id, ctx), ctx.tool_call_id)
        outcome = await run_effect_async(
            fn, arguments, scope=scope, tool=public.name, tool_call_id=ctx.tool_call_id
        )
        return _text(outcome)

    context = inspect.Parameter(
        "ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=ToolContext[Any]
    )
    made = function_tool(
        stand_in(invoke, public, [context, *keyword_parameters(public, Field)], str),
        name_override=public.name,
        description_override=public.description,
        use_docstring_info=False,
        failure_error_function=_failure_message(public),
        needs_approval=ledger_gate(fn, run_id=run_id) if gate else False,
    )
    setattr(made, _TOOL_ATTRIBUTE, fn)
    return made


#: Statuses of an operation that was (or may have been) sent and is not settled yet.
_UNSETTLED = frozenset(
    {
        EffectStatus.DISPATCHED,
        EffectStatus.OUTCOME_UNKNOWN,
        EffectStatus.RECONCILING,
        EffectStatus.QUARANTINED,
    }
)


def ledger_gate(
    fn: Any, *, run_id: RunId = DEFAULT_RUN_ID
) -> Callable[[RunContextWrapper[Any], dict[str, Any], str], Awaitable[bool]]:
    """A ``needs_approval=`` policy: True when the call's operation was sent and is not settled.

    The operation id is computed as the tool body computes it (same run id,
    the SDK's ``call_id``), and the ledger is only read: a call of an
    operation that is DISPATCHED, OUTCOME_UNKNOWN, RECONCILING or QUARANTINED
    is interrupted before anything is dispatched. Arguments that do not fit
    the tool are left to the tool body to report.
    """
    public = public_signature(fn)

    async def needs_approval(
        ctx: RunContextWrapper[Any], parameters: dict[str, Any], call_id: str
    ) -> bool:
        with call_scope(run_id=_run_id(run_id, ctx), call_id=call_id):
            try:
                operation = operation_id_of(fn, **parameters)
            except TypeError:
                return False
        record = await asyncio.to_thread(executor_of(fn).ledger.get, operation)
        unsettled = record is not None and record.status in _UNSETTLED
        if unsettled:
            logger.info("tool %s: operation %s is unsettled; interrupting", public.name, operation)
        return unsettled

    return needs_approval


def stop_on_unconfirmed(
    ctx: RunContextWrapper[Any],  # noqa: ARG001 - the SDK's tool_use_behavior signature
    results: list[FunctionToolResult],
) -> ToolsToFinalOutputResult:
    """A ``tool_use_behavior`` ending the run when a tool's effect is not confirmed.

    The model never reads the pending output, so it can neither answer "done"
    nor call again; ``final_output`` is a text naming each pending operation,
    and :func:`pending_effects` gives their payloads.
    """
    pending = [p for r in results if (p := _pending(r.output)) is not None]
    if not pending:
        return ToolsToFinalOutputResult(is_final_output=False)
    listed = "; ".join(f"{p.tool}: {p.operation_id} ({p.status.value})" for p in pending)
    return ToolsToFinalOutputResult(
        is_final_output=True,
        final_output=f"Paused: {len(pending)} effect(s) await an operator: {listed}",
    )


def _pending(output: object) -> PendingEffect | None:
    """The pending effect a tool output holds, or None for any other output."""
    if not isinstance(output, str) or not output.startswith("{"):
        return None
    try:
        found = json.loads(output)
    except ValueError:
        return None
    return PendingEffect.from_json(found) if is_pending_payload(found) else None


def pending_effects(result: Any) -> list[PendingEffect]:
    """The pending effects of a run result's tool outputs (or of a list of input items).

    Each is the :class:`~effectguard.adapters.PendingEffect` every adapter
    returns; ``to_json()`` gives the payload the tool output holds.
    """
    items = getattr(result, "new_items", None)
    outputs: Iterable[Any]
    if items is not None:
        outputs = (getattr(item, "output", None) for item in items)
    else:
        outputs = (
            item.get("output")
            for item in result
            if isinstance(item, Mapping) and item.get("type") == "function_call_output"
        )
    return [p for p in (_pending(output) for output in outputs) if p is not None]


def _table(tools: Mapping[str, Any] | Iterable[Any]) -> dict[str, Any]:
    """The ``@effect`` functions by tool name: from functions, our ``FunctionTool``s, a mapping."""
    if isinstance(tools, Mapping):
        return dict(tools)
    table = {}
    for given in tools:
        fn = getattr(given, _TOOL_ATTRIBUTE, given)
        if isinstance(fn, FunctionTool):
            msg = f"tool {fn.name!r} was not made by as_function_tool: pass its @effect function"
            raise ConfigurationError(msg)
        table[given.name if isinstance(given, FunctionTool) else public_signature(fn).name] = fn
    return table


_Call = tuple[int, Any, dict[str, Any], PendingEffect, CallScope]


def _pending_calls(items: Sequence[Any], table: Mapping[str, Any]) -> list[_Call]:
    """Each pending tool output of ``items``: its index, function, arguments, payload and scope."""
    calls = {
        item.get("call_id"): item
        for item in items
        if isinstance(item, Mapping) and item.get("type") == "function_call"
    }
    found = []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping) or item.get("type") != "function_call_output":
            continue
        pending = _pending(item.get("output"))
        if pending is None:
            continue
        fn = table.get(pending.tool)
        if fn is None:
            msg = (
                f"call {pending.tool_call_id} of {pending.tool!r} is pending, and tools= does "
                f"not hold that tool (it holds {sorted(table)}); pass it to settle the call"
            )
            raise ConfigurationError(msg)
        call = calls.get(item.get("call_id"))
        if call is None:
            msg = f"the input items hold no function_call for call {pending.tool_call_id!r}"
            raise ConfigurationError(msg)
        if pending.run_id is None:
            msg = (
                f"call {pending.tool_call_id} of {pending.tool!r} is pending, but its payload "
                "holds no run_id; nothing was sent. Settle the items the paused run returned"
            )
            raise ConfigurationError(msg)
        scope = CallScope(pending.run_id, pending.tool_call_id)
        found.append((index, fn, _call_arguments(fn, call["arguments"], pending), pending, scope))
    return found


def _call_arguments(fn: Any, arguments: str | None, pending: PendingEffect) -> dict[str, Any]:
    """The arguments the SDK passed the tool body for the call's JSON: validated by its schema.

    The operation's fingerprint was taken from those (``20`` for a ``float`` is
    ``20.0``); resuming with the raw JSON would be another request, a conflict.
    """
    public = public_signature(fn)

    def body(**_: Any) -> None:  # pragma: no cover - only its signature is read
        return None

    schema = function_schema(
        stand_in(body, public, keyword_parameters(public, Field), str), use_docstring_info=False
    )
    raw = json.loads(arguments or "{}")
    try:
        parsed = schema.params_pydantic_model(**raw)
    except ValidationError as exc:
        msg = (
            f"call {pending.tool_call_id} of {pending.tool!r}: its arguments do not fit the "
            f"tool's parameters ({exc.error_count()} error(s)); nothing was sent"
        )
        raise ConfigurationError(msg) from exc
    _, kwargs = schema.to_call_args(parsed)
    return kwargs


def _settled(
    items: Sequence[Any], pending: list[_Call], outcomes: list[Outcome]
) -> tuple[list[Any], list[PendingEffect]]:
    settled = list(items)
    waiting = []
    for (index, *_), outcome in zip(pending, outcomes, strict=True):
        text = _text(outcome)
        if isinstance(outcome, Pending):
            waiting.append(outcome.effect)
        settled[index] = {**items[index], "output": text}
    return settled, waiting


def settle_input(
    items: Sequence[Any], tools: Mapping[str, Any] | Iterable[Any]
) -> tuple[list[Any], list[PendingEffect]]:
    """Replace each pending tool output of ``items`` with what the ledger now holds.

    ``items`` is ``result.to_input_list()`` of a paused run; ``tools`` the
    ``@effect`` functions (or the tools :func:`as_function_tool` made, or a
    name → function mapping). Each pending call is resumed under its own call
    scope: a QUARANTINED operation stays pending and nothing is called, an
    OUTCOME_UNKNOWN one is probed again, a CONFIRMED or REJECTED one replayed.
    Returns the new items, for ``Runner.run(agent, items)``, and the
    :class:`~effectguard.adapters.PendingEffect` of each call still waiting
    for an operator (empty when the run can continue). Sync
    tools only; :func:`asettle_input` takes async ones too.
    """
    pending = _pending_calls(items, _table(tools))
    for _, fn, _, effect, _ in pending:
        if inspect.iscoroutinefunction(fn):
            msg = f"{effect.tool} is an async tool: settle with `await asettle_input(...)`"
            raise TypeError(msg)
    outcomes = [
        resume_effect(fn, arguments, pending=effect, scope=scope)
        for _, fn, arguments, effect, scope in pending
    ]
    return _settled(items, pending, outcomes)


async def asettle_input(
    items: Sequence[Any], tools: Mapping[str, Any] | Iterable[Any]
) -> tuple[list[Any], list[PendingEffect]]:
    """:func:`settle_input` for sync and async tools, from a running event loop."""
    pending = _pending_calls(items, _table(tools))
    outcomes = [
        await resume_effect_async(fn, arguments, pending=effect, scope=scope)
        for _, fn, arguments, effect, scope in pending
    ]
    return _settled(items, pending, outcomes)
