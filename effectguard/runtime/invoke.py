"""Running one tool call and saying what the model is told, or which effects the run waits on.

Every effect executed during a call is observed, including those of a
decorated tool that a plain tool calls inside itself, whichever executor runs
it: the runtime lends its executor to the tools and notes each result through
the executor's observer hook (:func:`effectguard.observing`), once. An effect
that is not confirmed or rejected makes the run wait, even when the tool
around it swallowed the result and returned normally.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from effectguard._contract import OutputCodec
from effectguard._decorator import use_executor
from effectguard._executor import EffectExecutor, Transition, observing
from effectguard._model import EffectResult, EffectStatus
from effectguard.errors import (
    ConfigurationError,
    EffectRejected,
    LedgerError,
    OperationConflictError,
    RuntimeStateError,
)
from effectguard.runtime.tools import ToolDefinition

__all__ = [
    "CallOutcome",
    "encode_output",
    "error_content",
    "invoke",
    "invoke_async",
    "run_to_completion",
]

#: Raised to the caller, never shown to the model: the run cannot go on until they are fixed,
#: and the checkpoint still says which call to re-issue.
_INFRASTRUCTURE = (LedgerError, ConfigurationError, RuntimeStateError)


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """What one tool call came to.

    When ``waiting`` is empty, ``content`` is the tool message for the model
    (``is_error`` for a structured error). Otherwise the run waits on those
    operation ids and the model is told nothing yet.
    """

    content: str = ""
    is_error: bool = False
    effects: dict[str, EffectResult[Any]] = field(default_factory=dict)
    waiting: tuple[str, ...] = ()


class _Effects:
    """The results of the effects of one call, as the executors' observer hook reports them."""

    def __init__(self) -> None:
        self.results: dict[str, EffectResult[Any]] = {}

    def __call__(self, transition: Transition) -> None:
        """Keep each final result: the run must not finish while one is unresolved."""
        if transition.result is not None:
            self.results[transition.operation_id] = transition.result


def _call_by_name(func: Callable[..., Any], arguments: Mapping[str, Any]) -> Any:
    """Call ``func`` with ``arguments`` by keyword, positional-only parameters by position."""
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return func(**arguments)
    args: list[Any] = []
    kwargs = dict(arguments)
    for parameter in parameters:
        if parameter.kind is not inspect.Parameter.POSITIONAL_ONLY or parameter.name not in kwargs:
            break
        args.append(kwargs.pop(parameter.name))
    return func(*args, **kwargs)


def _start(tool: ToolDefinition, arguments: Mapping[str, Any], executor: EffectExecutor) -> Any:
    """Begin the call; returns its value, or an awaitable of it for async tools."""
    if tool.decorated:
        run: Callable[..., Any] = tool.handler.execute  # type: ignore[attr-defined]
        return run(**arguments)
    if tool.contract is not None:
        if inspect.iscoroutinefunction(tool.handler):
            return executor.execute_async(tool.contract, arguments, tool.handler)
        return executor.execute(tool.contract, arguments, tool.handler)
    return _call_by_name(tool.handler, arguments)


def run_to_completion(awaitable: Any) -> Any:
    """Await ``awaitable`` in a new event loop; refused inside a running one."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        if inspect.iscoroutine(awaitable):
            awaitable.close()
        msg = (
            "an async tool or model cannot run under the sync runtime inside a running "
            "event loop; use start_async/resume_async"
        )
        raise ConfigurationError(msg)

    async def wait() -> Any:
        return await awaitable

    return asyncio.run(wait())


def invoke(
    tool: ToolDefinition, arguments: Mapping[str, Any], executor: EffectExecutor
) -> CallOutcome:
    """Run one call synchronously (an async tool in its own event loop); return a CallOutcome."""
    observer = _Effects()
    try:
        with use_executor(executor), observing(observer):
            value = _start(tool, arguments, executor)
            if inspect.isawaitable(value):
                value = run_to_completion(value)
    except Exception as exc:  # noqa: BLE001 - sorted by _from_exception, which re-raises infrastructure
        return _from_exception(exc, observer)
    return _from_value(tool, value, observer)


async def invoke_async(
    tool: ToolDefinition, arguments: Mapping[str, Any], executor: EffectExecutor
) -> CallOutcome:
    """Run one call on the event loop: sync work in a worker thread, async work awaited."""
    observer = _Effects()
    try:
        with use_executor(executor), observing(observer):
            # to_thread copies this context, so the lent executor reaches the worker thread.
            value = await asyncio.to_thread(_start, tool, arguments, executor)
            if inspect.isawaitable(value):
                value = await value
    except Exception as exc:  # noqa: BLE001 - sorted by _from_exception, which re-raises infrastructure
        return _from_exception(exc, observer)
    return _from_value(tool, value, observer)


def _unresolved(effects: Mapping[str, EffectResult[Any]]) -> tuple[str, ...]:
    return tuple(op for op, result in effects.items() if not result.status.terminal)


def _from_value(tool: ToolDefinition, value: Any, observer: _Effects) -> CallOutcome:
    effects = dict(observer.results)
    if isinstance(value, EffectResult) and tool.contract is not None:
        waiting = _unresolved(effects)
        if waiting:
            return CallOutcome(effects=effects, waiting=waiting)
        if value.status is EffectStatus.REJECTED:
            return CallOutcome(_rejected(value), is_error=True, effects=effects)
        return CallOutcome(encode_output(value.output, tool.contract.codec), effects=effects)
    waiting = _unresolved(effects)
    if waiting:
        return CallOutcome(effects=effects, waiting=waiting)
    return CallOutcome(encode_output(value, None), effects=effects)


def _from_exception(exc: Exception, observer: _Effects) -> CallOutcome:
    if isinstance(exc, _INFRASTRUCTURE):
        raise exc
    effects = dict(observer.results)
    waiting = _unresolved(effects)
    if waiting:
        return CallOutcome(effects=effects, waiting=waiting)
    if isinstance(exc, EffectRejected):
        if exc.result is not None:
            return CallOutcome(_rejected(exc.result), is_error=True, effects=effects)
        content = error_content("effect_rejected", exc.reason, evidence=exc.evidence)
        return CallOutcome(content, is_error=True, effects=effects)
    if isinstance(exc, OperationConflictError):
        content = error_content(
            "operation_conflict",
            f"{exc} Nothing was sent.",
            operation_id=exc.operation_id,
        )
        return CallOutcome(content, is_error=True, effects=effects)
    content = error_content("tool_error", str(exc) or type(exc).__name__, type=type(exc).__name__)
    return CallOutcome(content, is_error=True, effects=effects)


def _rejected(result: EffectResult[Any]) -> str:
    return error_content(
        "effect_rejected",
        result.reason or "the provider refused the request; nothing took effect",
        operation_id=result.operation_id,
        evidence=dict(result.evidence),
    )


def error_content(kind: str, message: str, **details: Any) -> str:
    """Return the JSON text of a structured error for the model: ``{"error": {...}}``."""
    return _dumps({"error": {"kind": kind, "message": message, **details}})


def _fallback(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=_fallback)


def encode_output(value: Any, codec: OutputCodec[Any] | None) -> str:
    """Return a tool's output as the text the model reads: a string as is, else JSON."""
    if isinstance(value, str):
        return value
    if codec is not None and value is not None:
        value = codec.encode(value)
    return _dumps(value)
