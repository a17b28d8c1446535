"""LangGraph tools for ``@effect`` functions: one call, its scope, its pause and its answer.

The public face is :mod:`effectguard.adapters.langgraph`; see it for what these guarantee.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool
from langgraph.config import get_config
from langgraph.constants import CONFIG_KEY_CHECKPOINTER
from langgraph.prebuilt.tool_node import ToolCallRequest, msg_content_output
from langgraph.types import Command, interrupt
from pydantic import BaseModel, Field, ValidationError, create_model

from effectguard._decorator import is_effect
from effectguard._describe import PublicSignature, public_signature
from effectguard._model import EffectStatus
from effectguard._scope import CallScope
from effectguard.adapters._approval import approval_request
from effectguard.adapters._common import (
    Confirmed,
    Outcome,
    Pending,
    PendingEffect,
    require_recorded,
    resume_effect,
    resume_effect_async,
    run_effect,
    run_effect_async,
)
from effectguard.errors import ConfigurationError

__all__ = [
    "as_tool",
    "atool_call_wrapper",
    "effect_of",
    "require_checkpointer",
    "tool_call_wrapper",
]

#: How LangGraph writes a checkpoint namespace: ``node:task_id|node:task_id``.
_NS_SEP, _NS_END = "|", ":"


# -- the call scope and the checkpointer ----------------------------------------------


def require_checkpointer(configurable: Mapping[str, Any], what: str) -> None:
    """Refuse a graph without a checkpointer, before anything is sent.

    A pause on an uncertain effect that could never be resumed would leave
    the effect with no way back into the run.
    """
    if configurable.get(CONFIG_KEY_CHECKPOINTER) is None:
        msg = (
            f"{what}: the graph has no checkpointer, so a pause on an uncertain effect could "
            "never be resumed; compile it with one (graph.compile(checkpointer=...), e.g. "
            "langgraph's SqliteSaver). Nothing was sent"
        )
        raise ConfigurationError(msg)


def _graph_scope(tool: str, tool_call_id: str) -> CallScope:
    """The call scope of a tool call inside a graph: the thread (and subgraph) and the call id."""
    outside = (
        f"{tool}: an effectguard LangGraph tool runs inside a graph (it needs the thread "
        "id and a checkpointer to pause and resume); nothing was sent"
    )
    try:
        configurable = get_config().get("configurable", {})
    except RuntimeError as exc:
        raise ConfigurationError(outside) from exc
    if "checkpoint_ns" not in configurable:  # LangGraph sets it for every task it runs
        raise ConfigurationError(outside)
    require_checkpointer(configurable, tool)
    thread = configurable.get("thread_id")
    if thread is None or str(thread) == "":
        msg = f"{tool}: the run's config has no thread_id; nothing was sent"
        raise ConfigurationError(msg)
    return CallScope(_run_id(str(thread), str(configurable.get("checkpoint_ns", ""))), tool_call_id)


def _run_id(thread: str, namespace: str) -> str:
    """``thread`` and the names of the enclosing subgraph nodes, without LangGraph's task ids.

    Task ids are left out: the operation id must not depend on them.
    """
    names = [part.split(_NS_END, 1)[0] for part in namespace.split(_NS_SEP) if part]
    parents = names[:-1]
    return f"{thread}/{'/'.join(parents)}" if parents else thread


# -- one call: run, pause while pending, answer -----------------------------------------


def _answer(outcome: Outcome, tool: str, tool_call_id: str) -> Any:
    """What the tool returns: the output, or an error ToolMessage that does not invite a retry."""
    if isinstance(outcome, Confirmed):
        return outcome.output
    if isinstance(outcome, Pending):  # pragma: no cover - the callers loop until it is not
        msg = f"{tool}: internal error: a pending outcome reached the answer"
        raise ConfigurationError(msg)
    return ToolMessage(
        content=outcome.message, name=tool, tool_call_id=tool_call_id, status="error"
    )


def _resuming() -> bool:
    """True when LangGraph is re-running this node to resume it, so it paused here before.

    Read from the task's scratchpad, where ``interrupt()`` itself finds the resume
    values (LangGraph keeps no public flag for it). If that internal ever moves,
    this says False and the resume step's own ledger check is what remains.
    """
    try:
        from langgraph._internal._constants import CONFIG_KEY_SCRATCHPAD  # noqa: PLC0415 - see above

        scratchpad = get_config()["configurable"][CONFIG_KEY_SCRATCHPAD]
        return bool(scratchpad.resume) or scratchpad.get_null_resume(False) is not None  # noqa: FBT003 - LangGraph's positional flag: do not consume it
    except (ImportError, KeyError, AttributeError, RuntimeError, TypeError):
        return False


def _payload(fn: Any, effect: PendingEffect) -> dict[str, Any]:
    """What the graph pauses with: an approval request, or the pending-effect payload.

    A request AWAITING_APPROVAL is shown as the ledger holds it (redacted
    values masked), with the commands that approve or deny it.
    """
    if effect.status is EffectStatus.AWAITING_APPROVAL:
        return approval_request(fn, effect).to_json()
    return effect.to_json()


def _call(fn: Any, tool: str, arguments: Mapping[str, Any], tool_call_id: str) -> Any:
    scope = _graph_scope(tool, tool_call_id)
    if _resuming():
        require_recorded(fn, arguments, scope=scope, tool=tool, tool_call_id=tool_call_id)
    outcome = run_effect(fn, arguments, scope=scope, tool=tool, tool_call_id=tool_call_id)
    while isinstance(outcome, Pending):
        interrupt(_payload(fn, outcome.effect))  # the resume value is never trusted
        outcome = resume_effect(fn, arguments, pending=outcome.effect, scope=scope)
    return _answer(outcome, tool, tool_call_id)


async def _acall(fn: Any, tool: str, arguments: Mapping[str, Any], tool_call_id: str) -> Any:
    scope = _graph_scope(tool, tool_call_id)
    if _resuming():
        await asyncio.to_thread(
            require_recorded, fn, arguments, scope=scope, tool=tool, tool_call_id=tool_call_id
        )
    outcome = await run_effect_async(
        fn, arguments, scope=scope, tool=tool, tool_call_id=tool_call_id
    )
    while isinstance(outcome, Pending):
        payload = await asyncio.to_thread(_payload, fn, outcome.effect)
        interrupt(payload)  # the resume value is never trusted
        outcome = await resume_effect_async(fn, arguments, pending=outcome.effect, scope=scope)
    return _answer(outcome, tool, tool_call_id)


# -- as_tool ---------------------------------------------------------------------------


def _args_schema(shown: PublicSignature) -> type[BaseModel]:
    """A pydantic model of the business parameters, plus the injected tool call id."""
    fields: dict[str, Any] = {}
    for parameter in shown.signature.parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            msg = (
                f"{shown.name}: *{parameter.name} cannot be offered to a model as a tool "
                "parameter; name each parameter"
            )
            raise ConfigurationError(msg)
        default = ... if parameter.default is parameter.empty else parameter.default
        description = shown.descriptions.get(parameter.name)
        fields[parameter.name] = (
            shown.hints[parameter.name],
            Field(default, description=description),
        )
    if "tool_call_id" in fields:
        msg = f"{shown.name}: a parameter named tool_call_id would hide the injected call id"
        raise ConfigurationError(msg)
    fields["tool_call_id"] = (Annotated[str, InjectedToolCallId], ...)
    model: type[BaseModel] = create_model(f"{shown.name}_arguments", **fields)
    model.__doc__ = shown.description
    return model


def as_tool(fn: Any, *, name: str | None = None) -> StructuredTool:
    """Return a LangGraph tool for the ``@effect`` function ``fn``.

    The schema's properties are exactly the business parameters, each with its
    docstring description; the tool call id is injected and never shown to the
    model. A CONFIRMED output is returned; a REJECTED operation or a
    conflicting request is an error ToolMessage telling the model not to retry;
    a request AWAITING_APPROVAL pauses the graph (``interrupt``) with an
    approval payload, and any other outcome with the pending payload, until
    the ledger says it is approved or resolved. Sync tools get ``func``, async ones
    ``coroutine``. Raises :class:`ConfigurationError` for a function that is
    not an ``@effect`` tool or cannot be described to a model.
    """
    shown = public_signature(fn, name=name)
    schema = _args_schema(shown)
    tool = shown.name

    def run(tool_call_id: str, **arguments: Any) -> Any:
        return _call(fn, tool, arguments, tool_call_id)

    async def arun(tool_call_id: str, **arguments: Any) -> Any:
        return await _acall(fn, tool, arguments, tool_call_id)

    is_async = inspect.iscoroutinefunction(fn)
    return StructuredTool(
        name=tool,
        description=shown.description,
        args_schema=schema,
        func=None if is_async else run,
        coroutine=arun if is_async else None,
    )


# -- wrap_tool_call for @effect functions registered as plain functions --------------


def effect_of(tool: BaseTool | None) -> Any:
    """The ``@effect`` function behind a tool built from a plain function, or None."""
    for attribute in ("func", "coroutine"):
        candidate = getattr(tool, attribute, None)
        if candidate is not None and is_effect(candidate):
            return candidate
    return None


def _arguments(
    request: ToolCallRequest, fn: Any
) -> tuple[Mapping[str, Any] | None, ToolMessage | None]:
    """The call's arguments checked against the tool's schema, or the error the model sees."""
    tool, call = request.tool, request.tool_call
    schema = getattr(tool, "args_schema", None)
    arguments = dict(call["args"])
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        try:
            checked = schema.model_validate(arguments)
        except ValidationError as exc:
            content = f"Error invoking tool {call['name']!r} with {arguments!r}: {exc}"
            message = ToolMessage(
                content=content, name=call["name"], tool_call_id=call["id"], status="error"
            )
            return None, message
        names = inspect.signature(fn).parameters
        arguments = {k: getattr(checked, k) for k in type(checked).model_fields if k in names}
    return arguments, None


def _as_message(answer: Any, tool: str, tool_call_id: str) -> ToolMessage:
    """The answer as the ToolMessage a ``ToolNode`` wrapper must return."""
    if isinstance(answer, ToolMessage):
        return answer
    content: Any = msg_content_output(answer)  # str or content blocks, as ToolNode makes them
    return ToolMessage(content=content, name=tool, tool_call_id=tool_call_id)


def tool_call_wrapper(
    request: ToolCallRequest, execute: Callable[[ToolCallRequest], ToolMessage | Command[Any]]
) -> Any:
    """``ToolNode(wrap_tool_call=...)``: run ``@effect`` tools as :func:`as_tool` would.

    Any other tool is executed unchanged. An async ``@effect`` tool needs
    ``awrap_tool_call=atool_call_wrapper`` and is refused here.
    """
    fn = effect_of(request.tool)
    if fn is None:
        return execute(request)
    name = request.tool_call["name"]
    if inspect.iscoroutinefunction(fn):
        msg = f"{name} is async: give the ToolNode awrap_tool_call=atool_call_wrapper too"
        raise ConfigurationError(msg)
    arguments, error = _arguments(request, fn)
    if error is not None or arguments is None:
        return error
    call_id = str(request.tool_call["id"])
    return _as_message(_call(fn, name, arguments, call_id), name, call_id)


async def atool_call_wrapper(
    request: ToolCallRequest,
    execute: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
) -> Any:
    """``ToolNode(awrap_tool_call=...)``: the async form of :func:`tool_call_wrapper`."""
    fn = effect_of(request.tool)
    if fn is None:
        return await execute(request)
    arguments, error = _arguments(request, fn)
    if error is not None or arguments is None:
        return error
    name, call_id = request.tool_call["name"], str(request.tool_call["id"])
    return _as_message(await _acall(fn, name, arguments, call_id), name, call_id)
