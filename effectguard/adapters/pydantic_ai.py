"""Pydantic AI adapter: ``@effect`` functions as Pydantic AI tools that pause instead of failing.

:func:`as_tool` turns an ``@effect`` function (sync or async) into a
:class:`pydantic_ai.Tool`. Each call runs under the call scope ``run_id`` = the
run's ``conversation_id`` (which a run resumed from its message history
inherits) and ``call_id`` = the model's ``tool_call_id``, so
``call_scoped(prefix)`` operation ids are the same when the run is resumed, in
this process or another.

What the model and the caller see of each outcome:

- confirmed (fresh or replayed): the tool's output;
- REJECTED, a request conflicting with the one recorded under its operation
  id, or an output that took effect but could not be stored: a
  :class:`pydantic_ai.ToolFailed`, a failure the model reads and is not invited
  to retry (never :class:`pydantic_ai.ModelRetry`);
- a request that provably never left: :class:`pydantic_ai.ModelRetry`, since
  calling again sends it once;
- a request that needs a person's approval (``@effect(requires_approval=...)``)
  and has none: :class:`pydantic_ai.ApprovalRequired` whose metadata is the
  approval payload (:class:`~effectguard.adapters.ApprovalRequest`: the
  request as the ledger holds it, redacted values masked) and the call scope;
  the run ends with the call in ``DeferredToolRequests.approvals``. The tool
  raises it again, sending nothing, when Pydantic AI calls it as approved but
  the ledger holds no approval. :func:`record_approvals` writes the
  application's decisions (``DeferredToolResults.approvals``) to the ledger.
- anything else (unknown outcome, quarantined, a peer still dispatching):
  :class:`pydantic_ai.CallDeferred` whose metadata is the pending payload, the
  arguments (redacted values masked) and the call scope. The run then ends with
  :class:`pydantic_ai.DeferredToolRequests` as its output, so the agent's
  ``output_type`` must include it.

To resume, :func:`settle_deferred` (or :func:`asettle_deferred`) re-reads the
ledger for every deferred call, never trusting what the run recorded, and
builds the :class:`pydantic_ai.DeferredToolResults` for
``agent.run(message_history=..., deferred_tool_results=...)``.

Pydantic AI hands a deferred call's result to the model without calling the
tool, so a result the host wrote itself (or a ``ToolApproved``, which for a
deferred call is not a re-run) would reach the model unchecked. Each tool
:func:`as_tool` makes therefore checks, before every model request, the
results of its calls about to be sent: one whose operation the ledger does
not hold as CONFIRMED stops the run with :class:`~effectguard.errors.InvalidRequestError`,
and the model never reads it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterable, Mapping
from typing import Any

from effectguard._decorator import executor_of, get_contract, operation_id_of
from effectguard._fingerprint import redact_arguments
from effectguard._model import EffectStatus
from effectguard._scope import CallScope, call_scope
from effectguard.adapters._approval import (
    ApprovalRequest,
    approval_request,
    decide,
    denial_message,
    is_approval_payload,
)
from effectguard.adapters._common import (
    Confirmed,
    Outcome,
    Pending,
    PendingEffect,
    PublicSignature,
    Refused,
    operator_command,
    public_signature,
    require_effect,
    resume_effect,
    resume_effect_async,
    run_effect,
    run_effect_async,
)
from effectguard.errors import ConfigurationError, InvalidRequestError, OperationNotFoundError

try:
    from pydantic_ai import (
        ApprovalRequired,
        CallDeferred,
        DeferredToolRequests,
        DeferredToolResults,
        ModelRetry,
        RunContext,
        Tool,
        ToolApproved,
        ToolDenied,
        ToolFailed,
    )
    from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
    from pydantic_ai.tools import ToolDefinition
except ModuleNotFoundError as exc:
    msg = (
        "effectguard.adapters.pydantic_ai needs the 'pydantic-ai' extra "
        f"({exc.name} is not installed): pip install 'effectguard[pydantic-ai]'"
    )
    raise ImportError(msg) from exc

__all__ = [
    "EFFECT_ATTRIBUTE",
    "arecord_approvals",
    "as_tool",
    "asettle_deferred",
    "record_approvals",
    "settle_deferred",
]

#: The attribute of a tool function made by :func:`as_tool` that holds its ``@effect`` function.
EFFECT_ATTRIBUTE = "__effectguard_effect__"

#: The name of the run-context parameter in the synthesised signature (never shown to the model).
_CONTEXT = "_run_context"

#: What ``settle_deferred(tools=...)`` takes: functions, adapter tools, or a name-to-function map.
ToolsLike = Mapping[str, Any] | Iterable[Any]


def _scope(ctx: RunContext[Any]) -> CallScope:
    """The call scope of one tool call: the conversation (kept across resume) and the call id."""
    run_id = ctx.conversation_id or ctx.run_id
    return CallScope(run_id=run_id or "", call_id=ctx.tool_call_id or "")


def _metadata(
    fn: Any, effect: PendingEffect, arguments: Mapping[str, Any], scope: CallScope
) -> dict[str, Any]:
    """The deferred call's metadata: the pending payload, masked arguments and the call scope."""
    contract = get_contract(fn)
    redact = contract.redact if contract is not None else frozenset()
    return {
        **effect.to_json(),
        "arguments": redact_arguments(arguments, redact),
        "scope": {"run_id": scope.run_id, "call_id": scope.call_id},
    }


def _refusal(refused: Refused) -> ToolFailed | ModelRetry:
    """A refusal as Pydantic AI's tool failure; a retry prompt only when retrying is safe."""
    return ModelRetry(refused.message) if refused.retry_safe else ToolFailed(refused.message)


def _awaiting(outcome: Outcome) -> bool:
    return isinstance(outcome, Pending) and outcome.effect.status is EffectStatus.AWAITING_APPROVAL


def _approval_metadata(fn: Any, effect: PendingEffect, scope: CallScope) -> dict[str, Any]:
    """An approval request's metadata: the request as the ledger holds it, and the call scope."""
    return {
        **approval_request(fn, effect).to_json(),
        "scope": {"run_id": scope.run_id, "call_id": scope.call_id},
    }


def _returned(
    fn: Any,
    outcome: Outcome,
    arguments: Mapping[str, Any],
    scope: CallScope,
    approval: dict[str, Any] | None = None,
) -> Any:
    """The tool's return for a confirmed outcome; the framework's exception otherwise.

    A request AWAITING_APPROVAL in the ledger raises ``ApprovalRequired`` with
    ``approval`` as its metadata, even when Pydantic AI calls the tool as
    approved: only the ledger's approval lets it be sent.
    """
    if isinstance(outcome, Confirmed):
        return outcome.output
    if isinstance(outcome, Refused):
        raise _refusal(outcome) from outcome.error
    if approval is not None:
        raise ApprovalRequired(metadata=approval)
    raise CallDeferred(metadata=_metadata(fn, outcome.effect, arguments, scope))


def _tool_function(fn: Any, name: str) -> Any:
    """A function Pydantic AI can call: the run context first, then the business arguments."""
    if inspect.iscoroutinefunction(fn):

        async def call_async(_run_context: RunContext[Any], **arguments: Any) -> Any:
            scope = _scope(_run_context)
            outcome = await run_effect_async(
                fn, arguments, scope=scope, tool=name, tool_call_id=scope.call_id
            )
            approval = None
            if isinstance(outcome, Pending) and _awaiting(outcome):
                approval = await asyncio.to_thread(_approval_metadata, fn, outcome.effect, scope)
            return _returned(fn, outcome, arguments, scope, approval)

        return call_async

    def call(_run_context: RunContext[Any], **arguments: Any) -> Any:
        scope = _scope(_run_context)
        outcome = run_effect(fn, arguments, scope=scope, tool=name, tool_call_id=scope.call_id)
        approval = None
        if isinstance(outcome, Pending) and _awaiting(outcome):
            approval = _approval_metadata(fn, outcome.effect, scope)
        return _returned(fn, outcome, arguments, scope, approval)

    return call


def _docstring(public: PublicSignature) -> str:
    """A Google-style docstring Pydantic AI reads exactly what the shared parser found in."""
    lines = [public.description]
    if public.descriptions:
        lines += ["", "Args:"]
        lines += [
            f"    {name}: {' '.join(text.split())}" for name, text in public.descriptions.items()
        ]
    return "\n".join(lines)


def as_tool(
    fn: Any,
    *,
    name: str | None = None,
    description: str | None = None,
    max_retries: int | None = None,
) -> Tool[Any]:
    """Return ``fn``, an ``@effect`` function (sync or async), as a Pydantic AI tool.

    The tool's schema holds exactly ``fn``'s business parameters (never
    ``idempotency_key``, which the executor supplies), each described by the
    docstring's ``Args:`` section. A confirmed effect returns its output; a
    rejected or conflicting one is a :class:`pydantic_ai.ToolFailed` the model
    is not invited to retry; any other outcome defers the call
    (:class:`pydantic_ai.CallDeferred`), so the run ends with
    :class:`pydantic_ai.DeferredToolRequests` and nothing is sent again until
    :func:`settle_deferred` finds the operation settled in the ledger.
    Raises :class:`~effectguard.ConfigurationError` when ``fn`` is not an ``@effect`` tool.
    """
    require_effect(fn, "effectguard.adapters.pydantic_ai.as_tool()")
    public = public_signature(fn, name=name)
    function = _tool_function(fn, public.name)
    context = inspect.Parameter(
        _CONTEXT, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=RunContext[Any]
    )
    parameters = [
        p.replace(annotation=public.hints[p.name]) for p in public.signature.parameters.values()
    ]
    function.__signature__ = inspect.Signature([context, *parameters])
    function.__annotations__ = {_CONTEXT: RunContext[Any], **public.hints}
    function.__doc__ = _docstring(public)
    function.__name__ = function.__qualname__ = public.name
    function.__module__ = getattr(fn, "__module__", __name__)
    setattr(function, EFFECT_ATTRIBUTE, fn)
    made = Tool(
        function,
        takes_ctx=True,
        name=public.name,
        description=description or public.description,
        max_retries=max_retries,
        docstring_format="google",
    )
    made.prepare = _results_guard(fn, made)
    return made


# -- results that did not come from the tool ---------------------------------------------


def _results_guard(fn: Any, tool: Tool[Any]) -> Any:
    """A ``prepare`` hook refusing, before the model reads it, a result the ledger does not hold."""

    async def prepare(ctx: RunContext[Any], definition: ToolDefinition) -> ToolDefinition:
        await asyncio.to_thread(_check_results, fn, tool, ctx)
        return definition

    return prepare


def _check_results(fn: Any, tool: Tool[Any], ctx: RunContext[Any]) -> None:
    """Raise when a successful result of ``tool`` about to be sent is not CONFIRMED in the ledger.

    Only the latest request is read: it holds the results the model has not
    seen yet (earlier ones were checked before the request that sent them).
    """
    latest = ctx.messages[-1] if ctx.messages else None
    if not isinstance(latest, ModelRequest):
        return
    returned = [
        part
        for part in latest.parts
        if isinstance(part, ToolReturnPart)
        and part.tool_name == tool.name
        and part.outcome == "success"
    ]
    if not returned:
        return
    calls = {
        part.tool_call_id: part
        for message in ctx.messages
        if isinstance(message, ModelResponse)
        for part in message.parts
        if isinstance(part, ToolCallPart)
    }
    ledger = executor_of(fn).ledger
    run_id = ctx.conversation_id or ctx.run_id or ""
    for part in returned:
        call = calls.get(part.tool_call_id)
        if call is None:
            continue
        with call_scope(run_id=run_id, call_id=part.tool_call_id):
            operation = operation_id_of(fn, **_arguments(tool, call))
        record = ledger.get(operation)
        if record is not None:
            status: EffectStatus | None = record.status
        else:
            tombstone = getattr(ledger, "tombstone", None)
            kept = tombstone(operation) if callable(tombstone) else None
            status = None if kept is None else EffectStatus(kept.status)
        if status is not EffectStatus.CONFIRMED:
            held = "does not hold it" if status is None else f"holds it as {status.value}"
            msg = (
                f"{tool.name}: the result of tool call {part.tool_call_id!r} did not come from "
                f"the tool, and the ledger {held} (operation {operation!r}); the model was not "
                "sent it. Resume with the results settle_deferred() builds from the ledger"
            )
            raise InvalidRequestError(msg)


# -- resuming ----------------------------------------------------------------------------


def _registry(tools: ToolsLike) -> dict[str, Tool[Any]]:
    """The adapter's tools by name, from ``@effect`` functions, a mapping, or adapter tools."""
    items = tools.items() if isinstance(tools, Mapping) else ((None, t) for t in tools)
    found: dict[str, Tool[Any]] = {}
    for given, item in items:
        tool = item if isinstance(item, Tool) else None
        fn = getattr(tool.function, EFFECT_ATTRIBUTE, None) if tool is not None else item
        if fn is None or get_contract(fn) is None:
            msg = (
                "settle_deferred() takes @effect functions, a name-to-function mapping or "
                f"tools made by as_tool(), not {item!r}"
            )
            raise ConfigurationError(msg)
        if tool is None or (given is not None and given != tool.name):
            tool = as_tool(fn, name=given or (tool.name if tool is not None else None))
        found[tool.name] = tool
    return found


def _arguments(tool: Tool[Any], call: ToolCallPart) -> dict[str, Any]:
    """The call's arguments as Pydantic AI passed them to the tool: validated, defaults applied.

    The model's raw arguments may differ in form (``"1999"`` for an int); the
    operation's fingerprint was taken from the validated ones.
    """
    try:
        validated = tool.function_schema.validator.validate_python(call.args_as_dict())
    except ValueError as exc:
        msg = (
            f"deferred call {call.tool_call_id!r} ({call.tool_name}): its arguments do not fit "
            f"the tool's schema ({exc}); nothing was sent"
        )
        raise ConfigurationError(msg) from exc
    return dict(validated)


def _scope_of(call: ToolCallPart, metadata: Mapping[str, Any]) -> CallScope:
    """The call scope the paused call ran under, from the metadata :func:`as_tool` attached."""
    scope = metadata.get("scope")
    ids = (scope.get("run_id"), scope.get("call_id")) if isinstance(scope, Mapping) else ()
    if len(ids) != 2 or not all(isinstance(i, str) for i in ids):  # noqa: PLR2004 - two ids
        msg = (
            f"deferred call {call.tool_call_id!r} ({call.tool_name}) carries no effectguard "
            "call scope: pass the DeferredToolRequests the paused run returned, unchanged"
        )
        raise ConfigurationError(msg)
    return CallScope(run_id=str(ids[0]), call_id=str(ids[1]))


#: One deferred call to settle: its ``@effect`` function, the call, arguments, payload, scope.
_Deferred = tuple[Any, ToolCallPart, dict[str, Any], PendingEffect, CallScope]

#: One approval request of the ledger: its ``@effect`` function, the call, arguments, request.
_Asked = tuple[Any, ToolCallPart, dict[str, Any], ApprovalRequest]


def _deferred(requests: DeferredToolRequests, registry: Mapping[str, Tool[Any]]) -> list[_Deferred]:
    """Each deferred call of one of ``tools``, checked before any of them is settled."""
    found = []
    for call in requests.calls:
        tool = registry.get(call.tool_name)
        if tool is None:
            continue
        metadata = requests.metadata.get(call.tool_call_id) or {}
        scope = _scope_of(call, metadata)
        pending = PendingEffect.from_json(metadata)
        fn = getattr(tool.function, EFFECT_ATTRIBUTE)
        found.append((fn, call, _arguments(tool, call), pending, scope))
    return found


def _asked(requests: DeferredToolRequests, registry: Mapping[str, Tool[Any]]) -> list[_Asked]:
    """Each approval the ledger asked for through one of ``tools``, checked before any is used.

    An approval request without effectguard's payload (Pydantic AI's own
    ``requires_approval`` on a tool) is left for the caller: the ledger has
    nothing to say about it, and the tool asks the ledger when it runs.
    """
    found = []
    for call in requests.approvals:
        tool = registry.get(call.tool_name)
        metadata = requests.metadata.get(call.tool_call_id) or {}
        if tool is None or not is_approval_payload(metadata):
            continue
        scope = _scope_of(call, metadata)
        request = ApprovalRequest.from_json(metadata)
        fn = getattr(tool.function, EFFECT_ATTRIBUTE)
        arguments = _arguments(tool, call)
        with call_scope(run_id=scope.run_id, call_id=scope.call_id):
            computed = operation_id_of(fn, **arguments)
        if computed != request.operation_id:
            msg = (
                f"approval request of tool call {call.tool_call_id!r} ({call.tool_name}) is for "
                f"operation {request.operation_id!r}, but its call is operation {computed!r}; "
                "nothing was written or sent. Pass the DeferredToolRequests the run returned, "
                "unchanged"
            )
            raise ConfigurationError(msg)
        found.append((fn, call, arguments, request))
    return found


def _ledger_answer(asked: _Asked) -> ToolApproved | ToolDenied | PendingEffect:
    """What the ledger says of one approval request, read now; nothing is called or sent.

    Still AWAITING_APPROVAL: it waits. Denied: a ``ToolDenied`` that invites no
    retry. Anything else (approved, or already settled): ``ToolApproved``, so
    the resumed run calls the tool, which reads the ledger again and sends an
    approved request once, or replays a settled one.
    """
    fn, call, _, request = asked
    record = executor_of(fn).ledger.get(request.operation_id)
    if record is None:
        raise OperationNotFoundError(request.operation_id)
    if record.status is EffectStatus.AWAITING_APPROVAL:
        return PendingEffect(
            tool=request.tool,
            tool_call_id=call.tool_call_id,
            operation_id=record.operation_id,
            status=record.status,
            reason=record.reason,
            attempts=record.attempts,
            operator_command=operator_command(fn, record.operation_id, record.status),
            run_id=request.run_id,
        )
    if record.status is EffectStatus.REJECTED and "denied_fingerprint" in record.evidence:
        return ToolDenied(denial_message(request.tool, record))
    return ToolApproved()


def _collect(
    settled: Iterable[tuple[ToolCallPart, Outcome]],
    answered: Iterable[tuple[ToolCallPart, ToolApproved | ToolDenied | PendingEffect]] = (),
) -> tuple[DeferredToolResults, list[PendingEffect]]:
    """The results of settled calls and approvals, and the payloads of those that still wait."""
    results = DeferredToolResults()
    waiting: list[PendingEffect] = []
    for call, outcome in settled:
        if isinstance(outcome, Confirmed):
            results.calls[call.tool_call_id] = outcome.output
        elif isinstance(outcome, Refused):
            results.calls[call.tool_call_id] = _refusal(outcome)
        else:
            waiting.append(outcome.effect)
    for call, answer in answered:
        if isinstance(answer, PendingEffect):
            waiting.append(answer)
        else:
            results.approvals[call.tool_call_id] = answer
    return results, waiting


def _resume_sync(deferred: _Deferred) -> Outcome:
    fn, call, arguments, pending, scope = deferred
    if not inspect.iscoroutinefunction(fn):
        return resume_effect(fn, arguments, pending=pending, scope=scope)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(resume_effect_async(fn, arguments, pending=pending, scope=scope))
    msg = (
        f"settle_deferred() cannot run the async tool {call.tool_name} inside a running "
        "event loop: await asettle_deferred() instead; nothing was sent"
    )
    raise ConfigurationError(msg)


def _settle(
    requests: DeferredToolRequests, registry: Mapping[str, Tool[Any]]
) -> tuple[DeferredToolResults, list[PendingEffect]]:
    deferred, asked = _deferred(requests, registry), _asked(requests, registry)
    settled = [(item[1], _resume_sync(item)) for item in deferred]
    return _collect(settled, [(item[1], _ledger_answer(item)) for item in asked])


async def _asettle(
    requests: DeferredToolRequests, registry: Mapping[str, Tool[Any]]
) -> tuple[DeferredToolResults, list[PendingEffect]]:
    deferred, asked = _deferred(requests, registry), _asked(requests, registry)
    settled = []
    for fn, call, arguments, pending, scope in deferred:
        outcome = await resume_effect_async(fn, arguments, pending=pending, scope=scope)
        settled.append((call, outcome))
    answered = [(item[1], await asyncio.to_thread(_ledger_answer, item)) for item in asked]
    return _collect(settled, answered)


def settle_deferred(
    requests: DeferredToolRequests, tools: ToolsLike
) -> tuple[DeferredToolResults, list[PendingEffect]]:
    """Re-read the ledger for each deferred ``@effect`` call: the results, and what still waits.

    ``tools`` names the ``@effect`` functions: the functions, a name-to-function
    mapping, or the tools :func:`as_tool` made. Each deferred call is judged
    by the ledger, never by what the paused run recorded: a QUARANTINED
    operation stays waiting and nothing is called; an OUTCOME_UNKNOWN one is
    probed again; a CONFIRMED one gives its output and a REJECTED one a
    :class:`pydantic_ai.ToolFailed`, both replayed, never re-sent; one an
    operator authorized to retry is sent once more. Each approval request
    (``requests.approvals``) is answered as the ledger has decided it: still
    AWAITING_APPROVAL waits (its ``operator_command`` approves it), denied is
    a ``ToolDenied`` that invites no retry, approved is a ``ToolApproved``
    (the resumed run sends it once; the tool reads the ledger again first).
    Resume with ``agent.run(message_history=..., deferred_tool_results=results)``
    when ``still_waiting`` is empty: Pydantic AI needs a result for every
    deferred call. Deferred calls of other tools are left for the caller to answer.

    Raises, before anything is sent, :class:`~effectguard.errors.OperationNotFoundError`
    when this process's ledger does not hold a paused operation, and
    :class:`~effectguard.ConfigurationError` when the requests lost their
    metadata or an async tool is settled inside a running event loop (use
    :func:`asettle_deferred` there).
    """
    return _settle(requests, _registry(tools))


async def asettle_deferred(
    requests: DeferredToolRequests, tools: ToolsLike
) -> tuple[DeferredToolResults, list[PendingEffect]]:
    """:func:`settle_deferred` in an event loop: async tools awaited, sync ones run in a thread."""
    return await _asettle(requests, _registry(tools))


# -- the application's approvals, recorded in the ledger ---------------------------------

#: One decision to write: the ledger, the request decided, approve (True) or deny (False).
_Decision = tuple[Any, ApprovalRequest, bool]


def _decisions(asked: list[_Asked], results: DeferredToolResults) -> list[_Decision]:
    """The application's answers to the ledger's approval requests, all checked before any write."""
    found = []
    for fn, call, _, request in asked:
        if call.tool_call_id not in results.approvals:
            continue
        answer = results.approvals[call.tool_call_id]
        if answer is True or isinstance(answer, ToolApproved):
            if isinstance(answer, ToolApproved) and answer.override_args is not None:
                msg = (
                    f"the approval of tool call {call.tool_call_id!r} ({call.tool_name}) carries "
                    "override_args: the ledger approves exactly the request it holds, never "
                    "other arguments; nothing was written"
                )
                raise InvalidRequestError(msg)
            found.append((executor_of(fn).ledger, request, True))
        elif answer is False or isinstance(answer, ToolDenied):
            found.append((executor_of(fn).ledger, request, False))
        else:
            msg = (
                f"the approval of tool call {call.tool_call_id!r} is {answer!r}, not True, "
                "False, ToolApproved or ToolDenied; nothing was written"
            )
            raise InvalidRequestError(msg)
    return found


def _merged(
    given: DeferredToolResults,
    ours: DeferredToolResults,
    requests: DeferredToolRequests,
    registry: Mapping[str, Tool[Any]],
) -> DeferredToolResults:
    """``given``'s answers for other tools' calls, and the ledger's for ours."""
    deferred = {call.tool_call_id for call in requests.calls if call.tool_name in registry}
    asked = {
        call.tool_call_id
        for call in requests.approvals
        if call.tool_name in registry
        and is_approval_payload(requests.metadata.get(call.tool_call_id) or {})
    }
    mine = deferred | asked
    return DeferredToolResults(
        calls={**{k: v for k, v in given.calls.items() if k not in mine}, **ours.calls},
        approvals={**{k: v for k, v in given.approvals.items() if k not in mine}, **ours.approvals},
        metadata=dict(given.metadata),
        answered_by=dict(given.answered_by),
    )


def record_approvals(
    requests: DeferredToolRequests,
    results: DeferredToolResults,
    tools: ToolsLike,
    *,
    actor: str,
    reason: str,
    evidence_reference: str,
    expires_in: float | None = None,
) -> tuple[DeferredToolResults, list[PendingEffect]]:
    """Write the application's approvals in ``results`` to the ledger; the results to resume with.

    For each approval request the ledger made (an ``@effect`` call that
    awaits approval raises ``ApprovalRequired``, so it is in
    ``requests.approvals``), ``results.approvals[tool_call_id]`` is the
    person's decision: ``True`` or ``ToolApproved()`` approves exactly the
    request the ledger holds (``expires_in`` seconds voids it unused), ``False``
    or ``ToolDenied`` denies it (REJECTED, never sent). Each write is bound
    to the state shown in the request's metadata and audited (actor, reason,
    evidence reference, OS user, host, the fingerprint decided); deciding
    again what the ledger already holds writes nothing. A ``ToolApproved``
    with ``override_args`` is refused before anything is written: it would
    send arguments nobody approved.

    Then every deferred call of ``tools`` is settled as :func:`settle_deferred`
    settles it, so the results carry the ledger's answer, not the one given
    (a denial reaches the model as a ``ToolDenied`` that invites no retry);
    answers for other tools' calls are passed through. Resume with
    ``agent.run(message_history=..., deferred_tool_results=results)`` when
    ``still_waiting`` is empty; the resumed run sends each approved request
    once.

    An approval given to Pydantic AI without this (a ``ToolApproved`` the
    ledger does not hold) sends nothing: the tool finds the request still
    AWAITING_APPROVAL and asks again. Raises
    :class:`~effectguard.errors.OperationChangedError` when a request moved on
    since it was shown (nothing written for it), and what
    :func:`settle_deferred` raises.
    """
    registry = _registry(tools)
    for ledger, request, approve in _decisions(_asked(requests, registry), results):
        decide(
            ledger,
            request,
            approve=approve,
            actor=actor,
            reason=reason,
            evidence_reference=evidence_reference,
            expires_in=expires_in if approve else None,
        )
    ours, waiting = _settle(requests, registry)
    return _merged(results, ours, requests, registry), waiting


async def arecord_approvals(
    requests: DeferredToolRequests,
    results: DeferredToolResults,
    tools: ToolsLike,
    *,
    actor: str,
    reason: str,
    evidence_reference: str,
    expires_in: float | None = None,
) -> tuple[DeferredToolResults, list[PendingEffect]]:
    """:func:`record_approvals` in an event loop: ledger writes in a thread, async tools awaited."""
    registry = _registry(tools)
    for ledger, request, approve in _decisions(_asked(requests, registry), results):
        await asyncio.to_thread(
            decide,
            ledger,
            request,
            approve=approve,
            actor=actor,
            reason=reason,
            evidence_reference=evidence_reference,
            expires_in=expires_in if approve else None,
        )
    ours, waiting = await _asettle(requests, registry)
    return _merged(results, ours, requests, registry), waiting
