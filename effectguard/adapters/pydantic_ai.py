"""Pydantic AI adapter: ``@effect`` functions as Pydantic AI tools that pause instead of failing.

:func:`as_tool` turns an ``@effect`` function into a :class:`pydantic_ai.Tool`.
Each call runs under the call scope ``run_id`` = the run's ``conversation_id``
(which a resumed run inherits from its message history) and ``call_id`` = the
model's ``tool_call_id``, so ``call_scoped(prefix)`` operation ids stay the
same when the run is resumed, in this process or another.

What the model and the caller see of each outcome:

- CONFIRMED (fresh or replayed): the tool's output.
- REJECTED, or the operation id reused for a different request: a
  :class:`pydantic_ai.ToolFailed`, a failure the model sees and does not retry
  (never :class:`pydantic_ai.ModelRetry`, which would invite the same call again).
- Anything else (unknown outcome, quarantined, another worker on it, not yet
  sent): :class:`pydantic_ai.CallDeferred` with the pending payload and the
  arguments as metadata. The run ends with :class:`pydantic_ai.DeferredToolRequests`
  as its output, so the agent's ``output_type`` must include it.

To resume, :func:`settle_deferred` (or :func:`asettle_deferred`) re-reads the
ledger for every deferred call, never trusting what the run recorded:
an OUTCOME_UNKNOWN operation is probed again, a QUARANTINED one is never
dispatched, and a confirmed or rejected one becomes the result to pass as
``agent.run(message_history=..., deferred_tool_results=...)``.
"""

from __future__ import annotations

import asyncio
import inspect
import shlex
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from effectguard.config import resolve_executor
from effectguard.decorator import get_contract
from effectguard.decorator.decorate import _find
from effectguard.errors import ConfigurationError, OperationConflictError
from effectguard.executor import EffectExecutor
from effectguard.fingerprint import redact_arguments
from effectguard.model import EffectResult, EffectStatus
from effectguard.scope import call_scope

try:
    from pydantic_ai import (
        CallDeferred,
        DeferredToolRequests,
        DeferredToolResults,
        RunContext,
        Tool,
        ToolFailed,
    )
    from pydantic_ai.messages import ToolCallPart
except ModuleNotFoundError as exc:  # pragma: no cover - exercised without the extra
    msg = (
        "effectguard.adapters.pydantic_ai needs the 'pydantic-ai' extra "
        f"({exc.name} is not installed): pip install 'effectguard[pydantic-ai]'"
    )
    raise ImportError(msg) from exc

__all__ = ["EFFECT_ATTRIBUTE", "as_tool", "asettle_deferred", "settle_deferred"]

#: The attribute of a tool function built by :func:`as_tool` that holds its ``@effect`` function.
EFFECT_ATTRIBUTE = "__effectguard_effect__"

#: The name of the run-context parameter of the synthesised signature (hidden from the model).
_CONTEXT = "_run_context"

ToolsLike = Mapping[str, Any] | Iterable[Any]


@dataclass(frozen=True, slots=True)
class Pending:
    """An effect the run waits on: what an operator needs to find and resolve it.

    ``arguments`` has every value the contract redacts replaced, since the
    payload travels in Pydantic AI's run output and telemetry.
    """

    tool: str
    tool_call_id: str
    operation_id: str
    status: str
    reason: str | None
    attempts: int
    resolve: str
    arguments: dict[str, Any]

    def as_metadata(self) -> dict[str, Any]:
        """The payload as plain JSON-ready data."""
        return asdict(self)


def effect_name(fn: Any) -> str:
    """The default tool name of an ``@effect`` function: its own ``__name__``."""
    return str(getattr(fn, "__name__", None) or get_contract(fn).name)  # type: ignore[union-attr]


def executor_of(fn: Any) -> EffectExecutor:
    """The executor a call of ``fn`` runs on (its own, the one lent, or the configured one)."""
    tool = _find(fn)
    contract = get_contract(fn)
    name = contract.name if contract is not None else repr(fn)
    return resolve_executor(None if tool is None else tool.executor, name)


def _ledger_target(executor: EffectExecutor) -> str:
    """What ``agent-effect-ops --db`` takes for the executor's ledger, never with credentials."""
    path = getattr(executor.ledger, "path", None)
    return str(path) if path is not None else "$EFFECTGUARD_LEDGER_URL"


def pending_payload(
    fn: Any, tool: str, call_id: str, result: EffectResult[Any], arguments: Mapping[str, Any]
) -> Pending:
    """The pending payload of an unconfirmed call, with the operator command that resolves it."""
    contract = get_contract(fn)
    redact = contract.redact if contract is not None else frozenset()
    db = _ledger_target(executor_of(fn))
    op = shlex.quote(result.operation_id)
    resolve = (
        f"agent-effect-ops --db {shlex.quote(db)} show {op}, then confirm {op} "
        "(or reject / authorize-retry) with --actor, --reason and --evidence-reference"
    )
    return Pending(
        tool=tool,
        tool_call_id=call_id,
        operation_id=result.operation_id,
        status=result.status.name,
        reason=result.reason,
        attempts=result.attempts,
        resolve=resolve,
        arguments=redact_arguments(arguments, redact),
    )


def failure_text(tool: str, result: EffectResult[Any]) -> str:
    """What the model is told of a rejected effect: final, and not to be retried as is."""
    why = f": {result.reason}" if result.reason else ""
    return (
        f"{tool} was rejected (operation {result.operation_id}){why}. Nothing took effect; "
        "do not retry this operation with the same arguments."
    )


def scope_of_metadata(call_id: str, tool: str, metadata: Mapping[str, Any]) -> dict[str, str]:
    """The call scope a deferred call ran under, from the metadata :func:`as_tool` attached."""
    scope = metadata.get("scope")
    if not isinstance(scope, Mapping) or not all(
        isinstance(scope.get(k), str) for k in ("run_id", "call_id")
    ):
        msg = (
            f"deferred call {call_id!r} ({tool}) carries no effectguard call scope in its "
            "metadata: pass the DeferredToolRequests the paused run returned, unchanged"
        )
        raise ConfigurationError(msg)
    return {"run_id": scope["run_id"], "call_id": scope["call_id"]}


def _scope(ctx: RunContext[Any]) -> dict[str, str] | None:
    """The call scope of one tool call: the conversation (stable across resume) and the call id."""
    run_id = ctx.conversation_id or ctx.run_id
    if not run_id or not ctx.tool_call_id:
        return None
    return {"run_id": run_id, "call_id": ctx.tool_call_id}


def _outcome(
    fn: Any,
    name: str,
    call_id: str,
    scope: dict[str, str] | None,
    arguments: dict[str, Any],
    result: EffectResult[Any],
) -> Any:
    """The tool's return for a CONFIRMED result; the framework's exception otherwise."""
    if result.status is EffectStatus.CONFIRMED:
        return result.output
    if result.status is EffectStatus.REJECTED:
        raise ToolFailed(failure_text(name, result))
    payload = pending_payload(fn, name, call_id, result, arguments)
    raise CallDeferred(metadata={**payload.as_metadata(), "scope": scope})


def _conflict(name: str, exc: OperationConflictError) -> ToolFailed:
    return ToolFailed(
        f"{name} was refused: {exc}. This operation id already belongs to a different request; "
        "do not call it again with these arguments."
    )


def _signature(fn: Any) -> tuple[inspect.Signature, dict[str, Any]]:
    """The tool's visible signature with the run context first, and its resolved annotations."""
    visible = inspect.signature(fn)
    hints = typing.get_type_hints(fn, include_extras=True)
    context = inspect.Parameter(
        _CONTEXT, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=RunContext[Any]
    )
    parameters = [context]
    for parameter in visible.parameters.values():
        annotation = hints.get(parameter.name, parameter.annotation)
        parameters.append(parameter.replace(annotation=annotation))
    returns = hints.get("return", visible.return_annotation)
    annotations = {_CONTEXT: RunContext[Any], **hints}
    return inspect.Signature(parameters, return_annotation=returns), annotations


def _tool_function(fn: Any, name: str) -> Callable[..., Any]:
    """A function Pydantic AI can call: the run context first, then the business arguments."""
    if inspect.iscoroutinefunction(inspect.unwrap(fn)):

        async def call_async(_run_context: RunContext[Any], **arguments: Any) -> Any:
            scope = _scope(_run_context)
            call_id = _run_context.tool_call_id or ""
            try:
                if scope is None:
                    result = await fn.execute(**arguments)
                else:
                    with call_scope(**scope):
                        result = await fn.execute(**arguments)
            except OperationConflictError as exc:
                raise _conflict(name, exc) from exc
            return _outcome(fn, name, call_id, scope, arguments, result)

        return call_async

    def call(_run_context: RunContext[Any], **arguments: Any) -> Any:
        scope = _scope(_run_context)
        call_id = _run_context.tool_call_id or ""
        try:
            if scope is None:
                result = fn.execute(**arguments)
            else:
                with call_scope(**scope):
                    result = fn.execute(**arguments)
        except OperationConflictError as exc:
            raise _conflict(name, exc) from exc
        return _outcome(fn, name, call_id, scope, arguments, result)

    return call


def as_tool(
    fn: Any,
    *,
    name: str | None = None,
    description: str | None = None,
    max_retries: int | None = None,
) -> Tool[Any]:
    """Return ``fn``, an ``@effect`` function (sync or async), as a Pydantic AI tool.

    The tool's schema holds exactly ``fn``'s business parameters (never
    ``idempotency_key``, which the executor supplies), described from the
    docstring's ``Args:`` section. It takes the run context, so every call runs
    under a call scope that a resumed run reproduces. A confirmed effect
    returns its output; a rejected one (or a conflicting reuse of its operation
    id) is a :class:`pydantic_ai.ToolFailed` the model does not retry; any other
    outcome defers the call (:class:`pydantic_ai.CallDeferred`), so the run ends
    with :class:`pydantic_ai.DeferredToolRequests` and nothing is sent again
    until :func:`settle_deferred` finds the operation settled in the ledger.
    """
    if get_contract(fn) is None:
        msg = f"as_tool() takes an @effect function, not {fn!r}: decorate it with @effect first"
        raise TypeError(msg)
    tool_name = name or effect_name(fn)
    function = _tool_function(fn, tool_name)
    signature, annotations = _signature(fn)
    function.__signature__ = signature  # type: ignore[attr-defined]
    function.__annotations__ = annotations
    function.__doc__ = inspect.getdoc(fn)
    function.__name__ = tool_name
    function.__qualname__ = tool_name
    function.__module__ = getattr(fn, "__module__", __name__)
    setattr(function, EFFECT_ATTRIBUTE, fn)
    return Tool(
        function,
        takes_ctx=True,
        name=tool_name,
        description=description,
        max_retries=max_retries,
        docstring_format="google",
    )


def _registry(tools: ToolsLike) -> dict[str, Any]:
    """The ``@effect`` functions by tool name, from functions, a mapping, or adapter tools."""
    items = tools.items() if isinstance(tools, Mapping) else ((None, t) for t in tools)
    found: dict[str, Any] = {}
    for given_name, item in items:
        fn, name = item, given_name
        if isinstance(item, Tool):
            fn = getattr(item.function, EFFECT_ATTRIBUTE, None)
            name = given_name or item.name
        if fn is None or get_contract(fn) is None:
            msg = (
                f"settle_deferred() takes @effect functions, a name-to-function mapping, or "
                f"tools made by as_tool(), not {item!r}"
            )
            raise TypeError(msg)
        found[name or effect_name(fn)] = fn
    return found


def _check_recorded(fn: Any, call: ToolCallPart, metadata: Mapping[str, Any]) -> None:
    """Refuse to settle a call whose operation this process's ledger has no record of.

    Settling re-issues the call; on a missing record that would dispatch it
    afresh, a duplicate if the pause was recorded in another ledger.
    """
    operation_id = metadata.get("operation_id")
    ledger = executor_of(fn).ledger
    if not isinstance(operation_id, str) or ledger.get(operation_id) is None:
        msg = (
            f"deferred call {call.tool_call_id!r} ({call.tool_name}): operation "
            f"{operation_id!r} is not in {ledger!r}; nothing was dispatched. Settle it "
            "with the ledger the run paused with."
        )
        raise ConfigurationError(msg)


def _settled(fn: Any, call: ToolCallPart, result: EffectResult[Any]) -> Any:
    """The deferred result for a settled call, or a :class:`Pending` while it is not."""
    if result.status is EffectStatus.CONFIRMED:
        return result.output
    if result.status is EffectStatus.REJECTED:
        return ToolFailed(failure_text(call.tool_name, result))
    return pending_payload(fn, call.tool_name, call.tool_call_id, result, call.args_as_dict())


def _deferred_calls(
    requests: DeferredToolRequests, tools: ToolsLike
) -> list[tuple[Any, ToolCallPart, dict[str, Any], dict[str, str]]]:
    """Each deferred call of an ``@effect`` tool, with its function, arguments and scope."""
    registry = _registry(tools)
    found = []
    for call in requests.calls:
        fn = registry.get(call.tool_name)
        if fn is None:
            continue
        metadata = requests.metadata.get(call.tool_call_id) or {}
        scope = scope_of_metadata(call.tool_call_id, call.tool_name, metadata)
        _check_recorded(fn, call, metadata)
        found.append((fn, call, call.args_as_dict(), scope))
    return found


def _collect(
    settled: Iterable[tuple[ToolCallPart, Any]],
) -> tuple[DeferredToolResults, list[Pending]]:
    results = DeferredToolResults()
    waiting: list[Pending] = []
    for call, outcome in settled:
        if isinstance(outcome, Pending):
            waiting.append(outcome)
        else:
            results.calls[call.tool_call_id] = outcome
    return results, waiting


def _execute_sync(fn: Any, arguments: dict[str, Any], scope: dict[str, str]) -> EffectResult[Any]:
    with call_scope(**scope):
        if inspect.iscoroutinefunction(inspect.unwrap(fn)):
            return asyncio.run(_awaited(fn.execute(**arguments)))
        result: EffectResult[Any] = fn.execute(**arguments)
        return result


async def _awaited(pending: Awaitable[EffectResult[Any]]) -> EffectResult[Any]:
    return await pending


def settle_deferred(
    requests: DeferredToolRequests, tools: ToolsLike
) -> tuple[DeferredToolResults, list[Pending]]:
    """Re-read the ledger for each deferred ``@effect`` call: the results, and what still waits.

    ``tools`` names the ``@effect`` functions: the functions, a name-to-function
    mapping, or the tools :func:`as_tool` made. Each deferred call is re-issued
    under its original call scope, so the executor replays a CONFIRMED or
    REJECTED operation, probes an OUTCOME_UNKNOWN one again, returns a
    QUARANTINED one without dispatching, and only sends one an operator
    authorized to retry. Confirmed calls get their output, rejected ones a
    :class:`pydantic_ai.ToolFailed`; the rest are returned as ``still_waiting``.
    Resume with ``agent.run(message_history=..., deferred_tool_results=results)``
    once ``still_waiting`` is empty (Pydantic AI needs a result for every
    deferred call). Calls of other tools are left for the caller to answer.

    Raises :class:`~effectguard.ConfigurationError` before anything is sent when
    a call's operation is not in this process's ledger. Call it outside a
    running event loop when a tool is async; inside one, use :func:`asettle_deferred`.
    """
    settled = []
    for fn, call, arguments, scope in _deferred_calls(requests, tools):
        try:
            result = _execute_sync(fn, arguments, scope)
        except OperationConflictError as exc:
            settled.append((call, _conflict(call.tool_name, exc)))
            continue
        settled.append((call, _settled(fn, call, result)))
    return _collect(settled)


async def asettle_deferred(
    requests: DeferredToolRequests, tools: ToolsLike
) -> tuple[DeferredToolResults, list[Pending]]:
    """:func:`settle_deferred` for an event loop: async tools awaited, sync ones run in a thread."""
    settled = []
    for fn, call, arguments, scope in _deferred_calls(requests, tools):
        try:
            with call_scope(**scope):
                if inspect.iscoroutinefunction(inspect.unwrap(fn)):
                    result = await fn.execute(**arguments)
                else:
                    result = await asyncio.to_thread(fn.execute, **arguments)
        except OperationConflictError as exc:
            settled.append((call, _conflict(call.tool_name, exc)))
            continue
        settled.append((call, _settled(fn, call, result)))
    return _collect(settled)
