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
- A tool whose contract requires approval for a call's arguments uses the
  SDK's approval flow: the gate records the request unsent
  (AWAITING_APPROVAL, bound to its fingerprint) and interrupts;
  :func:`approval_requests` shows what a person must see (the ledger's
  arguments, redacted values masked); ``state.approve`` / ``state.reject``
  is their decision and :func:`record_decisions` writes it into the ledger.
  The body sends only what the ledger approved, once: an approval that
  exists only in the ``RunState`` sends nothing.

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
from dataclasses import dataclass
from typing import Any

from effectguard._decorator import executor_of, request_of
from effectguard._model import EffectStatus, OperationRecord
from effectguard._scope import CallScope, call_scope
from effectguard.adapters._approval import (
    ApprovalRequest,
    is_approval_payload,
    record_decision,
    record_payload,
    request_payload,
)
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
    from agents import (
        FunctionTool,
        RunContextWrapper,
        RunState,
        ToolsToFinalOutputResult,
        function_tool,
    )
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
    "RecordedDecision",
    "RunId",
    "approval_requests",
    "as_function_tool",
    "asettle_input",
    "ledger_gate",
    "pending_effects",
    "record_decisions",
    "settle_input",
    "stop_on_unconfirmed",
]

logger = logging.getLogger("effectguard.adapters.openai_agents")

#: The run id of the call scope when none is given: OpenAI tool call ids are unique by themselves.
DEFAULT_RUN_ID = "openai-agents"

#: A run id, or how to read one from the run context (e.g. a conversation id in your context).
RunId = str | Callable[[RunContextWrapper[Any]], str]

_TOOL_ATTRIBUTE = "_effectguard_effect"
_RUN_ID_ATTRIBUTE = "_effectguard_run_id"


def _run_id(run_id: RunId, ctx: RunContextWrapper[Any]) -> str:
    value = run_id(ctx) if callable(run_id) else run_id
    if not isinstance(value, str) or not value:
        msg = f"run_id= must give a non-empty string, not {value!r}"
        raise ConfigurationError(msg)
    return value


def _text(outcome: Outcome, approval: ApprovalRequest | None = None) -> str:
    """What the model reads: the output, a refusal, the pending payload or the approval payload.

    Either payload keeps the call scope's ``run_id``, so a later
    :func:`settle_input` recomputes the same operation id.
    """
    if approval is not None:
        logger.warning(
            "tool %s (call %s): operation %s awaits a person's approval in the ledger; "
            "nothing was sent",
            approval.tool,
            approval.tool_call_id,
            approval.operation_id,
        )
        message = (
            f"{approval.tool} was not sent: operation {approval.operation_id} needs a person's "
            f"approval of exactly this request. Do not call {approval.tool} again for it and do "
            "not report it as done: the host asks a person, then resumes this call."
        )
        return json.dumps({**approval.to_json(), "message": message}, ensure_ascii=False)
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


def _awaiting(
    fn: Any, arguments: Mapping[str, Any], scope: CallScope, outcome: Outcome
) -> ApprovalRequest | None:
    """The approval payload of a call that came back AWAITING_APPROVAL; None for any other.

    Its arguments and fingerprint are computed as the executor computed the
    ones it recorded (the call would have been a conflict otherwise).
    """
    if not isinstance(outcome, Pending) or outcome.effect.status is not _AWAITING:
        return None
    effect = outcome.effect
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
        run_id=scope.run_id,
    )


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
    not settled, or of a request awaiting approval, is interrupted before
    dispatch (:func:`ledger_gate`). A request the ledger holds
    AWAITING_APPROVAL when the body runs is not sent: the output is the
    approval payload (:class:`~effectguard.adapters.ApprovalRequest`), which
    :func:`stop_on_unconfirmed` ends the run on.
    """
    public = public_signature(fn, name=name)

    async def invoke(ctx: ToolContext[Any], **arguments: Any) -> str:
        scope = CallScope(_run_id(run_id, ctx), ctx.tool_call_id)
        outcome = await run_effect_async(
            fn, arguments, scope=scope, tool=public.name, tool_call_id=ctx.tool_call_id
        )
        return _text(outcome, _awaiting(fn, arguments, scope, outcome))

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
    setattr(made, _RUN_ID_ATTRIBUTE, run_id)
    return made


_AWAITING = EffectStatus.AWAITING_APPROVAL

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
    """A ``needs_approval=`` policy: True when the ledger says the call must not run yet.

    The call's request is computed as the tool body computes it (same run id,
    the SDK's ``call_id``, the arguments as the tool's schema validates them).
    Two kinds of call are interrupted before anything is dispatched:

    - one whose contract requires approval for these arguments and that the
      ledger holds AWAITING_APPROVAL. A new such request is recorded there
      first, unsent (the same write the tool body would make), so the SDK's
      approval interruption and the ledger name the same request, bound to
      its fingerprint; :func:`record_decisions` writes the decision taken
      through the SDK, and only the ledger's approval lets the body send;
    - one of an operation that was sent and is not settled (DISPATCHED,
      OUTCOME_UNKNOWN, RECONCILING, QUARANTINED).

    Any other call runs: an approved request (the body sends it once), a
    settled one (replayed), one whose arguments differ from the recorded
    request (the body refuses it as a conflict, sending nothing), or
    arguments that do not fit the tool (the body reports them).
    """
    public = public_signature(fn)
    parse = _argument_parser(fn)

    async def needs_approval(
        ctx: RunContextWrapper[Any], parameters: dict[str, Any], call_id: str
    ) -> bool:
        arguments = parse(parameters)
        if arguments is None:
            return False
        scope = CallScope(_run_id(run_id, ctx), call_id)
        with call_scope(run_id=scope.run_id, call_id=scope.call_id):
            try:
                request = request_of(fn, **arguments)
            except TypeError:
                return False
        ledger = executor_of(fn).ledger
        record = await asyncio.to_thread(ledger.get, request.operation_id)
        if record is None and request.needs_approval:
            # No record: the executor records this request AWAITING_APPROVAL and sends nothing.
            await run_effect_async(
                fn, arguments, scope=scope, tool=public.name, tool_call_id=call_id
            )
            record = await asyncio.to_thread(ledger.get, request.operation_id)
        if record is None or record.fingerprint != request.fingerprint:
            return False
        if record.status is _AWAITING:
            logger.info(
                "tool %s: operation %s awaits approval; interrupting",
                public.name,
                record.operation_id,
            )
            return True
        unsettled = record.status in _UNSETTLED
        if unsettled:
            logger.info(
                "tool %s: operation %s is unsettled; interrupting", public.name, record.operation_id
            )
        return unsettled

    return needs_approval


def stop_on_unconfirmed(
    ctx: RunContextWrapper[Any],  # noqa: ARG001 - the SDK's tool_use_behavior signature
    results: list[FunctionToolResult],
) -> ToolsToFinalOutputResult:
    """A ``tool_use_behavior`` ending the run when a tool's effect is not confirmed.

    The model never reads the pending output (or an approval payload: a
    request awaiting approval), so it can neither answer "done" nor call
    again; ``final_output`` is a text naming each waiting operation, and
    :func:`pending_effects` / :func:`approval_requests` give their payloads.
    """
    pending = [p for r in results if (p := _waiting(r.output)) is not None]
    if not pending:
        return ToolsToFinalOutputResult(is_final_output=False)
    listed = "; ".join(f"{p.tool}: {p.operation_id} ({p.status.value})" for p in pending)
    return ToolsToFinalOutputResult(
        is_final_output=True,
        final_output=f"Paused: {len(pending)} effect(s) await an operator: {listed}",
    )


def _payload(output: object) -> object:
    """The JSON object a tool output holds, or None for any other output."""
    if not isinstance(output, str) or not output.startswith("{"):
        return None
    try:
        return json.loads(output)
    except ValueError:
        return None


def _pending(output: object) -> PendingEffect | None:
    """The pending effect a tool output holds, or None for any other output."""
    found = _payload(output)
    return PendingEffect.from_json(found) if is_pending_payload(found) else None


def _approval(output: object) -> ApprovalRequest | None:
    """The approval payload a tool output holds, or None for any other output."""
    found = _payload(output)
    return ApprovalRequest.from_json(found) if is_approval_payload(found) else None


def _waiting(output: object) -> PendingEffect | None:
    """A tool output the run must not continue on: a pending effect or an approval payload.

    An approval payload is given as the :class:`PendingEffect` of its
    AWAITING_APPROVAL operation (nothing sent, no attempt), so one resume
    step serves both.
    """
    pending = _pending(output)
    if pending is not None:
        return pending
    approval = _approval(output)
    if approval is None:
        return None
    return PendingEffect(
        tool=approval.tool,
        tool_call_id=approval.tool_call_id,
        operation_id=approval.operation_id,
        status=_AWAITING,
        reason=approval.reason,
        attempts=0,
        operator_command=approval.operator_command,
        run_id=approval.run_id,
    )


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
        pending = _waiting(item.get("output"))
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


def _argument_parser(fn: Any) -> Callable[[Mapping[str, Any]], dict[str, Any] | None]:
    """Parse a call's JSON arguments as the SDK does before the tool body: None if they do not fit.

    The operation's fingerprint is taken from the parsed values (``20`` for a
    ``float`` is ``20.0``); the raw JSON would be another request, a conflict.
    """
    public = public_signature(fn)

    def body(**_: Any) -> None:  # pragma: no cover - only its signature is read
        return None

    schema = function_schema(
        stand_in(body, public, keyword_parameters(public, Field), str), use_docstring_info=False
    )

    def parse(raw: Mapping[str, Any]) -> dict[str, Any] | None:
        try:
            parsed = schema.params_pydantic_model(**raw)
        except ValidationError:
            return None
        _, kwargs = schema.to_call_args(parsed)
        return kwargs

    return parse


def _call_arguments(fn: Any, arguments: str | None, pending: PendingEffect) -> dict[str, Any]:
    """The arguments the SDK passed the tool body for the call's JSON: validated by its schema."""
    raw = json.loads(arguments or "{}")
    parsed = _argument_parser(fn)(raw) if isinstance(raw, Mapping) else None
    if parsed is None:
        msg = (
            f"call {pending.tool_call_id} of {pending.tool!r}: its arguments do not fit the "
            "tool's parameters; nothing was sent"
        )
        raise ConfigurationError(msg)
    return parsed


def _settled(
    items: Sequence[Any], pending: list[_Call], outcomes: list[Outcome]
) -> tuple[list[Any], list[PendingEffect]]:
    settled = list(items)
    waiting = []
    for (index, fn, arguments, _, scope), outcome in zip(pending, outcomes, strict=True):
        text = _text(outcome, _awaiting(fn, arguments, scope, outcome))
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
    OUTCOME_UNKNOWN one is probed again, a CONFIRMED or REJECTED one replayed;
    a request that awaited approval is sent once if the ledger now holds its
    approval, and stays waiting (nothing sent) while it does not.
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


# -- approvals through the SDK's own flow -------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordedDecision:
    """A decision taken through the SDK (``RunState.approve`` / ``reject``) and the ledger's state.

    ``status`` is the operation's status in the ledger after
    :func:`record_decisions`: PREPARED for a recorded approval (the resumed
    run sends it once), REJECTED for a denial (never sent). Another status
    means the ledger already held a decision, which stands.
    """

    tool: str
    tool_call_id: str
    operation_id: str
    approved: bool
    status: EffectStatus


_Interrupted = tuple[Any, dict[str, Any], CallScope, str, str]


def _interrupted_call(item: Any, ctx: RunContextWrapper[Any]) -> _Interrupted | None:
    """An interruption of a tool :func:`as_function_tool` made: fn, arguments, scope, name, id.

    None for any other interruption (another tool, a hosted or nested one),
    which is left to the SDK.
    """
    raw = item.raw_item
    call_id = raw.get("call_id") if isinstance(raw, Mapping) else getattr(raw, "call_id", None)
    text = raw.get("arguments") if isinstance(raw, Mapping) else getattr(raw, "arguments", None)
    agent = getattr(item, "agent", None)
    if not isinstance(call_id, str) or not isinstance(text, str) or agent is None:
        return None
    tool = next(
        (
            t
            for t in getattr(agent, "tools", ())
            if isinstance(t, FunctionTool) and t.name == item.tool_name
        ),
        None,
    )
    fn = getattr(tool, _TOOL_ATTRIBUTE, None)
    if tool is None or fn is None:
        return None
    try:
        raw_arguments = json.loads(text or "{}")
    except ValueError:
        return None
    arguments = _argument_parser(fn)(raw_arguments) if isinstance(raw_arguments, Mapping) else None
    if arguments is None:
        return None
    scope = CallScope(_run_id(getattr(tool, _RUN_ID_ATTRIBUTE), ctx), call_id)
    return fn, arguments, scope, tool.name, call_id


def _awaiting_record(
    fn: Any, arguments: Mapping[str, Any], scope: CallScope
) -> OperationRecord | None:
    """The ledger's record of this request while it awaits approval; None otherwise."""
    with call_scope(run_id=scope.run_id, call_id=scope.call_id):
        request = request_of(fn, **arguments)
    record = executor_of(fn).ledger.get(request.operation_id)
    if (
        record is None
        or record.status is not _AWAITING
        or record.fingerprint != request.fingerprint
    ):
        return None
    return record


#: Told apart from a ``None`` context: the attribute itself is absent.
_MISSING = object()


def _interruptions(given: Any) -> tuple[list[Any], RunContextWrapper[Any]]:
    """A run result's or a ``RunState``'s interruptions, and the run context they belong to."""
    if isinstance(given, RunState):
        # RunState keeps its context private; the decisions of RunState.approve live there.
        # Read defensively: a release that renames it is a clear error, never a wrong answer.
        context = getattr(given, "_context", _MISSING)
        if context is _MISSING or not (context is None or isinstance(context, RunContextWrapper)):
            msg = (
                "this openai-agents release keeps a RunState's run context where effectguard "
                "does not look (RunState._context): pass the run result instead of its state, "
                "or use the openai-agents version pyproject.toml allows; nothing was written"
            )
            raise ConfigurationError(msg)
        if context is None:
            msg = "the RunState has no run context: it holds no interruptions to decide"
            raise ConfigurationError(msg)
        return list(given.get_interruptions()), context
    return list(getattr(given, "interruptions", ())), given.context_wrapper


def approval_requests(result_or_state: Any) -> list[ApprovalRequest]:
    """What a person must see to decide: each request of the run awaiting approval.

    From the SDK's interruptions of a run result or a ``RunState``, each one
    whose request the ledger holds AWAITING_APPROVAL, with the arguments as the
    ledger recorded them (a redacted value is ``"[redacted]"``; the SDK's own
    item still holds the model's raw arguments), its fingerprint and the
    ``agent-effect-ops approve`` command; then, for a run result, each approval
    payload among its tool outputs (a tool made with ``gate=False``, or an
    approval the SDK gave and the ledger does not hold). Reads the ledger only.
    """
    interruptions, ctx = _interruptions(result_or_state)
    found = []
    for item in interruptions:
        call = _interrupted_call(item, ctx)
        if call is None:
            continue
        fn, arguments, scope, tool, call_id = call
        record = _awaiting_record(fn, arguments, scope)
        if record is not None:
            found.append(
                record_payload(fn, record, tool=tool, tool_call_id=call_id, run_id=scope.run_id)
            )
    for item in getattr(result_or_state, "new_items", None) or ():
        approval = _approval(getattr(item, "output", None))
        if approval is not None:
            found.append(approval)
    return found


def record_decisions(
    state: Any,
    *,
    actor: str,
    reason: str,
    evidence_reference: str,
    expires_in: float | None = None,
) -> list[RecordedDecision]:
    """Record in the ledger each decision taken through ``state.approve`` / ``state.reject``.

    For every interruption of ``state`` (a ``RunState``) of a tool whose
    contract requires approval for the call's arguments and that the SDK has
    a decision for, while the ledger holds the request AWAITING_APPROVAL, the
    ledger's ``approve`` (with ``expires_in`` seconds, if given) or ``deny``
    is written with ``actor``, ``reason`` and ``evidence_reference`` (the OS
    user and host are added by the ledger), bound to the request's
    fingerprint as computed from the call's own arguments and fenced on the
    state read: an approval can never land on another request. Undecided
    interruptions are left alone, and so is a request the ledger already
    decided (its :class:`RecordedDecision` reports the ledger's status, which
    stands), so recording twice writes once.

    Call it before ``Runner.run(agent, state)``: the resumed tool body sends
    a request only if the ledger holds its approval, so an approval given in
    the SDK and not recorded sends nothing (the run pauses again with the
    approval payload). Blocks on the ledger's writes; from async code,
    ``await asyncio.to_thread(record_decisions, state, ...)``.
    Returns one :class:`RecordedDecision` per decided approval interruption.
    Raises :class:`~effectguard.OperationNotFoundError` when the ledger holds
    no such request (another ledger than the run's) and
    :class:`~effectguard.OperationConflictError` when it holds another
    request under the operation id; nothing is written for that call.
    """
    if not isinstance(state, RunState):
        msg = f"record_decisions takes a RunState (result.to_state()), not {type(state).__name__}"
        raise TypeError(msg)
    interruptions, ctx = _interruptions(state)
    decisions = []
    for item in interruptions:
        call = _interrupted_call(item, ctx)
        if call is None:
            continue
        fn, arguments, scope, tool, call_id = call
        decided = ctx.get_approval_status(item.tool_name, call_id, existing_pending=item)
        if decided is None:
            continue
        with call_scope(run_id=scope.run_id, call_id=scope.call_id):
            if not request_of(fn, **arguments).needs_approval:
                continue  # the gate's pause on an unsettled outcome: not an approval
        record = record_decision(
            fn,
            arguments,
            scope=scope,
            approved=decided,
            actor=actor,
            reason=reason,
            evidence_reference=evidence_reference,
            expires_in=expires_in,
        )
        decisions.append(
            RecordedDecision(tool, call_id, record.operation_id, decided, record.status)
        )
    return decisions
