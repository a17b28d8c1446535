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
  lists the payloads. Once an operator has resolved them,
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

from effectguard.adapters._effect_tools import (
    UNSETTLED,
    EffectTool,
    as_text,
    parse_pending,
    pending_payload,
    rejection_message,
)
from effectguard.errors import ConfigurationError, OperationConflictError
from effectguard.model import EffectResult, EffectStatus
from effectguard.scope import call_scope

try:
    from agents import FunctionTool, RunContextWrapper, ToolsToFinalOutputResult, function_tool
    from agents.exceptions import ModelBehaviorError
    from agents.tool import FunctionToolResult
    from agents.tool_context import ToolContext
    from pydantic import Field
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

_TOOL_ATTRIBUTE = "_effectguard_tool"


def _run_id(run_id: RunId, ctx: RunContextWrapper[Any]) -> str:
    value = run_id(ctx) if callable(run_id) else run_id
    if not isinstance(value, str) or not value:
        msg = f"run_id= must give a non-empty string, not {value!r}"
        raise ConfigurationError(msg)
    return value


def _output(tool: EffectTool, result: EffectResult[Any], call_id: str, run_id: str) -> str:
    """The text the model reads for ``result``: output, final rejection, or pending payload."""
    if result.status is EffectStatus.CONFIRMED:
        return as_text(result.output)
    if result.status is EffectStatus.REJECTED:
        return rejection_message(tool.name, result)
    logger.warning(
        "tool %s (call %s): operation %s is %s; the run should pause",
        tool.name,
        call_id,
        result.operation_id,
        result.status.value,
    )
    payload = pending_payload(tool.name, result, call_id=call_id, run_id=run_id)
    return json.dumps(payload, ensure_ascii=False)


async def _invoke(
    tool: EffectTool, ctx: ToolContext[Any], arguments: dict[str, Any], run_id: RunId
) -> str:
    scope = _run_id(run_id, ctx)
    try:
        result = await tool.execute(arguments, run_id=scope, call_id=ctx.tool_call_id)
    except OperationConflictError as exc:
        return (
            f"{tool.name} was not sent: {exc}. Do not call {tool.name} again with these "
            "arguments; tell the user."
        )
    return _output(tool, result, ctx.tool_call_id, scope)


def _failure_message(tool: EffectTool) -> Callable[[RunContextWrapper[Any], Exception], str]:
    def failure(ctx: RunContextWrapper[Any], error: Exception) -> str:  # noqa: ARG001 - SDK's signature
        if isinstance(error, ModelBehaviorError):
            return f"{tool.name} was not called, its arguments are invalid: {error}"
        logger.error("tool %s failed: %s", tool.name, error, exc_info=error)
        return (
            f"{tool.name} could not be completed ({type(error).__name__}: {error}). "
            f"Do not call {tool.name} again in this run; tell the user it needs attention."
        )

    return failure


def as_function_tool(
    fn: Any, *, gate: bool = True, run_id: RunId = DEFAULT_RUN_ID, name: str | None = None
) -> FunctionTool:
    """Return a ``FunctionTool`` running the ``@effect`` function ``fn`` under its contract.

    Its schema holds exactly ``fn``'s business parameters, keyword-only, with
    their docstring descriptions. A call returns the confirmed output as text,
    a rejection as a final message, and an unconfirmed effect as the pending
    payload (JSON); errors come back through a ``failure_error_function`` that
    does not invite a retry. With ``gate`` (the default) a call of an
    operation that is not settled is interrupted before dispatch
    (:func:`ledger_gate`).
    """
    tool = EffectTool.read(fn, name=name)

    async def invoke(ctx: ToolContext[Any], **arguments: Any) -> str:
        return await _invoke(tool, ctx, arguments, run_id)

    context = inspect.Parameter(
        "ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=ToolContext[Any]
    )
    parameters = [context, *tool.described_parameters(Field)]
    invoke.__signature__ = inspect.Signature(parameters, return_annotation=str)  # type: ignore[attr-defined]
    invoke.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": str}
    invoke.__name__ = invoke.__qualname__ = tool.name
    made = function_tool(
        invoke,
        name_override=tool.name,
        description_override=tool.description or tool.name,
        use_docstring_info=False,
        failure_error_function=_failure_message(tool),
        needs_approval=ledger_gate(fn, run_id=run_id) if gate else False,
    )
    setattr(made, _TOOL_ATTRIBUTE, tool)
    return made


def ledger_gate(
    fn: Any, *, run_id: RunId = DEFAULT_RUN_ID
) -> Callable[[RunContextWrapper[Any], dict[str, Any], str], Awaitable[bool]]:
    """A ``needs_approval=`` policy: True when the call's operation was sent and is not settled.

    The operation id is computed as the tool body computes it (same run id,
    the SDK's ``call_id``), and the ledger is read, never written: a call of an
    operation that is DISPATCHED, OUTCOME_UNKNOWN, RECONCILING or QUARANTINED
    is interrupted before anything is dispatched. Arguments the tool cannot
    bind are left to the tool body to report.
    """
    tool = EffectTool.read(fn)

    async def needs_approval(
        ctx: RunContextWrapper[Any], parameters: dict[str, Any], call_id: str
    ) -> bool:
        with call_scope(run_id=_run_id(run_id, ctx), call_id=call_id):
            try:
                operation = tool.operation_id(parameters)
            except TypeError:
                return False
        record = await asyncio.to_thread(tool.executor().ledger.get, operation)
        unsettled = record is not None and record.status in UNSETTLED
        if unsettled:
            logger.info("tool %s: operation %s is unsettled; interrupting", tool.name, operation)
        return unsettled

    return needs_approval


def stop_on_unconfirmed(
    ctx: RunContextWrapper[Any],  # noqa: ARG001 - the SDK's tool_use_behavior signature
    results: list[FunctionToolResult],
) -> ToolsToFinalOutputResult:
    """A ``tool_use_behavior`` ending the run when a tool's effect is not confirmed.

    The model never reads the pending output, so it cannot answer "done" or
    call again; ``final_output`` is a text naming each pending operation, and
    :func:`pending_effects` gives their payloads.
    """
    pending = [p for r in results if (p := parse_pending(r.output)) is not None]
    if not pending:
        return ToolsToFinalOutputResult(is_final_output=False)
    listed = "; ".join(f"{p['tool']}: {p['operation_id']} ({p['status']})" for p in pending)
    return ToolsToFinalOutputResult(
        is_final_output=True,
        final_output=f"Paused: {len(pending)} effect(s) await an operator: {listed}",
    )


def pending_effects(result: Any) -> list[dict[str, Any]]:
    """The pending payloads of a run result's tool outputs (or of a list of input items)."""
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
    return [p for p in (parse_pending(output) for output in outputs) if p is not None]


def _table(tools: Mapping[str, Any] | Iterable[Any]) -> dict[str, EffectTool]:
    """The tools by name: ``@effect`` functions, ``as_function_tool`` tools, or a name mapping."""
    if isinstance(tools, Mapping):
        return {name: EffectTool.read(fn, name=name) for name, fn in tools.items()}
    table = {}
    for given in tools:
        tool = getattr(given, _TOOL_ATTRIBUTE, None)
        if tool is None:
            if isinstance(given, FunctionTool):
                msg = f"tool {given.name!r} was not made by as_function_tool: pass the @effect fn"
                raise ConfigurationError(msg)
            tool = EffectTool.read(given)
        table[tool.name] = tool
    return table


Pending = tuple[int, EffectTool, dict[str, Any], dict[str, Any]]


def _pending_calls(items: Sequence[Any], table: Mapping[str, EffectTool]) -> list[Pending]:
    """Each pending tool output of ``items``: its index, tool, call arguments and payload."""
    calls = {
        item.get("call_id"): item
        for item in items
        if isinstance(item, Mapping) and item.get("type") == "function_call"
    }
    found = []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping) or item.get("type") != "function_call_output":
            continue
        payload = parse_pending(item.get("output"))
        if payload is None:
            continue
        tool = table.get(payload["tool"])
        if tool is None:
            msg = (
                f"call {item.get('call_id')} of {payload['tool']!r} is pending, and tools= does "
                f"not hold that tool (it holds {sorted(table)}); pass it to settle the call"
            )
            raise ConfigurationError(msg)
        call = calls.get(item.get("call_id"))
        if call is None:
            msg = f"the input items hold no function_call for call {item.get('call_id')!r}"
            raise ValueError(msg)
        found.append((index, tool, json.loads(call["arguments"] or "{}"), payload))
    return found


def _settled(
    items: Sequence[Any], pending: list[Pending], results: list[EffectResult[Any]]
) -> tuple[list[Any], list[dict[str, Any]]]:
    settled = list(items)
    waiting = []
    for (index, tool, _, payload), result in zip(pending, results, strict=True):
        if result.operation_id != payload["operation_id"]:
            msg = (
                f"call {payload['tool_call_id']} now names operation {result.operation_id!r}, "
                f"not {payload['operation_id']!r}: was the tool's run_id= changed?"
            )
            raise ConfigurationError(msg)
        text = _output(tool, result, payload["tool_call_id"], payload["run_id"])
        still = parse_pending(text)
        if still is not None:
            waiting.append(still)
        settled[index] = {**items[index], "output": text}
    return settled, waiting


def settle_input(
    items: Sequence[Any], tools: Mapping[str, Any] | Iterable[Any]
) -> tuple[list[Any], list[dict[str, Any]]]:
    """Replace each pending tool output of ``items`` with what the ledger now holds.

    Each pending call is run again under its own call scope: a CONFIRMED or
    REJECTED operation replays, an OUTCOME_UNKNOWN one is probed again, a
    QUARANTINED one is never dispatched. Returns the new items (for
    ``Runner.run(agent, items)``) and the payloads of the calls still waiting
    for an operator (empty when the run can continue). Sync tools only; use
    :func:`asettle_input` for async ones.
    """
    pending = _pending_calls(items, _table(tools))
    results = [
        tool.execute_sync(arguments, run_id=p["run_id"], call_id=p["tool_call_id"])
        for _, tool, arguments, p in pending
    ]
    return _settled(items, pending, results)


async def asettle_input(
    items: Sequence[Any], tools: Mapping[str, Any] | Iterable[Any]
) -> tuple[list[Any], list[dict[str, Any]]]:
    """:func:`settle_input` for sync and async tools, from a running event loop."""
    pending = _pending_calls(items, _table(tools))
    results = [
        await tool.execute(arguments, run_id=p["run_id"], call_id=p["tool_call_id"])
        for _, tool, arguments, p in pending
    ]
    return _settled(items, pending, results)

