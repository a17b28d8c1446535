"""``@effect`` tools in Google's Agent Development Kit (``google-adk`` 2.15), paused by ADK itself.

:func:`as_tool` turns an ``@effect`` function (sync or async) into an ADK
tool (:class:`EffectTool`, a ``BaseTool``). Each call runs under the call
scope ``run_id`` = ``"<app name>/<user id>/<session id>"`` and ``call_id`` =
ADK's function-call id (``ToolContext.function_call_id``); both are kept in
the session's events, so ``call_scoped(prefix)`` operation ids are the same
when the call is resumed, in this process or another. The invocation id is
not part of the scope: a new turn of the same session gets a new one.

What the model and the host see of each outcome:

- confirmed (fresh or replayed): the tool's output (a dict as it is, any
  other value as ``{"result": value}``);
- REJECTED, a request conflicting with the one recorded under its operation
  id, or an output that took effect but could not be stored:
  ``{"error": message}``, a message that does not invite a retry;
- a request that provably never left: ``{"error": message}`` saying that
  calling again sends it once;
- anything else (unknown outcome, quarantined, a peer still dispatching, a
  request awaiting a person's approval): ADK's own tool-confirmation pause.
  The tool calls ``ToolContext.request_confirmation`` with the pending
  payload (:class:`~effectguard.adapters.PendingEffect`) or, for a request
  awaiting approval, the approval payload
  (:class:`~effectguard.adapters.ApprovalRequest`) as its ``payload`` and sets
  ``skip_summarization``, so the model does not read it and the invocation
  ends on an ``adk_request_confirmation`` call the session keeps.

To resume, :func:`settle_confirmations` reads the ledger (it sends nothing)
for every paused call of a session and builds the user message answering the
confirmations of those that can go on; ``runner.run_async(...,
new_message=message)`` makes ADK run the tool again under the same
function-call id, and the tool re-reads the ledger, never trusting the
confirmation it was given: a CONFIRMED operation is replayed, an
OUTCOME_UNKNOWN one probed, one an operator authorized sent once more, an
approved request sent once; a QUARANTINED operation or a request still
awaiting approval is never dispatched, and the tool raises
:class:`EffectStillPending` to the host instead, which leaves the pause open
(ADK records no response for the call, so the same confirmation can be
answered again once the operator has acted). A confirmation answered
``confirmed: False`` sends nothing either: the model reads that the call was
not resumed.

A person's decision on an approval request is written to the ledger by
:func:`decide_approval` (or ``agent-effect-ops approve|deny``), never taken
from the confirmation ADK hands back: only an approval the ledger holds lets
the tool send.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from effectguard._decorator import executor_of, get_contract, operation_id_of
from effectguard._model import EffectStatus, OperationRecord
from effectguard._scope import CallScope, call_scope
from effectguard.adapters._approval import (
    ApprovalRequest,
    approval_request,
    decide,
    denial_message,
    is_approval_payload,
    record_payload,
)
from effectguard.adapters._common import (
    Confirmed,
    Outcome,
    Pending,
    PendingEffect,
    PublicSignature,
    Refused,
    is_pending_payload,
    operator_command,
    public_signature,
    require_effect,
    resume_effect_async,
    run_effect_async,
)
from effectguard.errors import ConfigurationError, OperationNotFoundError, RuntimeStateError

try:
    from google.adk.sessions import Session
    from google.adk.tools.base_tool import BaseTool
    from google.adk.tools.tool_context import ToolContext
    from google.genai import types
    from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
except ModuleNotFoundError as exc:  # pragma: no cover - exercised without the extra
    msg = (
        "effectguard.adapters.google_adk needs the 'google-adk' extra "
        f"({exc.name} is not installed): pip install 'effectguard[google-adk]'"
    )
    raise ImportError(msg, name=exc.name) from exc

__all__ = [
    "CONFIRMATION_CALL",
    "EffectStillPending",
    "EffectTool",
    "PausedCall",
    "approval_requests",
    "as_tool",
    "decide_approval",
    "paused_calls",
    "settle_confirmations",
]

logger = logging.getLogger("effectguard.adapters.google_adk")

#: The name of the function call ADK pauses a tool call with (``adk_request_confirmation``).
CONFIRMATION_CALL = "adk_request_confirmation"

#: Ledger statuses in which resuming a paused call can only pause it again.
_WAITING = frozenset(
    {EffectStatus.QUARANTINED, EffectStatus.AWAITING_APPROVAL, EffectStatus.DISPATCHED}
)


class EffectStillPending(RuntimeStateError):
    """A paused call was resumed, and the ledger still does not let it complete.

    Raised out of ``runner.run_async`` by the tool ADK re-ran: the operation
    is QUARANTINED (an operator must resolve it), a request still awaits a
    person's approval, or another worker is dispatching it. ``sent`` says
    whether this resume sent anything (only an operator's authorized retry
    can: the retry's outcome was not confirmed either). ADK records no
    response for the call, so the pause stays open: answer the same
    confirmation again (:func:`settle_confirmations`) once
    :attr:`effect`'s ``operator_command`` has been run.
    """

    def __init__(self, effect: PendingEffect, *, sent: bool = False) -> None:
        self.effect = effect
        self.sent = sent
        what = (
            "This resume sent the authorized retry, whose outcome is not confirmed either."
            if sent
            else "Nothing was sent."
        )
        super().__init__(
            f"{effect.message()} {what} The ADK pause stays open: resume again once it is resolved."
        )


def _scope(tool_context: ToolContext) -> CallScope:
    """The call scope of one tool call: the session (kept across turns) and the call id."""
    session = tool_context.session
    call_id = tool_context.function_call_id
    if not call_id:
        msg = "an effectguard ADK tool was called without a function-call id; nothing was sent"
        raise ConfigurationError(msg)
    return CallScope(run_id=_run_id(session), call_id=call_id)


def _run_id(session: Session) -> str:
    return f"{session.app_name}/{session.user_id}/{session.id}"


def _arguments_model(public: PublicSignature) -> type[BaseModel]:
    """A pydantic model of the public parameters: the schema and the validation of a call."""
    fields: dict[str, Any] = {}
    for parameter in public.signature.parameters.values():
        hint = public.hints.get(parameter.name, Any)
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[parameter.name] = (
            hint,
            Field(default=default, description=public.descriptions.get(parameter.name)),
        )
    return create_model(f"{public.name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    for spec in schema.get("properties", {}).values():
        if isinstance(spec, dict):
            spec.pop("title", None)
    return schema


def _response(output: Any) -> dict[str, Any]:
    """A confirmed output as ADK's function response: a dict as it is, else under ``result``."""
    if isinstance(output, dict):
        return output
    try:
        json.dumps(output)
    except (TypeError, ValueError):
        return {"result": str(output)}
    return {"result": output}


class EffectTool(BaseTool):
    """An ADK tool running one ``@effect`` function under its contract (made by :func:`as_tool`)."""

    def __init__(self, fn: Any, *, name: str | None = None, description: str | None = None) -> None:
        require_effect(fn, "effectguard.adapters.google_adk.as_tool()")
        public = public_signature(fn, name=name)
        super().__init__(name=public.name, description=description or public.description)
        self.effect = fn
        self._model = _arguments_model(public)

    def _get_declaration(self) -> types.FunctionDeclaration:
        """The declaration the model is offered: exactly the business parameters, described."""
        return types.FunctionDeclaration(
            name=self.name,
            description=self.description,
            parameters_json_schema=_schema(self._model),
        )

    def arguments(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """The call's arguments, validated by the tool's schema, as the ``@effect`` tool gets them.

        Raises :class:`pydantic.ValidationError` when they do not fit.
        """
        validated = self._model.model_validate(dict(args))
        return {name: getattr(validated, name) for name in type(validated).model_fields}

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        """Run the call (or, when ADK resumes it after a confirmation, re-read the ledger)."""
        try:
            arguments = self.arguments(args)
        except ValidationError as exc:
            return {"error": f"{self.name} was not called, its arguments are invalid: {exc}"}
        scope = _scope(tool_context)
        confirmation = tool_context.tool_confirmation
        if confirmation is None:
            outcome = await run_effect_async(
                self.effect, arguments, scope=scope, tool=self.name, tool_call_id=scope.call_id
            )
            return await self._answer(outcome, arguments, scope, tool_context)
        return await self._resumed(arguments, scope, tool_context, confirmed=confirmation.confirmed)

    async def _resumed(
        self,
        arguments: Mapping[str, Any],
        scope: CallScope,
        tool_context: ToolContext,
        *,
        confirmed: bool,
    ) -> Any:
        """The paused call run again by ADK: the ledger's word, whatever the confirmation says."""
        with call_scope(run_id=scope.run_id, call_id=scope.call_id):
            operation = operation_id_of(self.effect, **arguments)
        record = await _read(self.effect, operation)
        if record is None:
            msg = (
                f"{self.name}: tool call {scope.call_id} is being resumed, but its operation "
                f"{operation!r} is not in the ledger; nothing was sent. Resume with the ledger "
                "the session paused with"
            )
            raise OperationNotFoundError(operation) from ConfigurationError(msg)
        if not confirmed:
            return self._declined(record)
        pending = _pending(self.effect, record, tool=self.name, scope=scope)
        outcome = await resume_effect_async(self.effect, arguments, pending=pending, scope=scope)
        if isinstance(outcome, Pending):
            sent = outcome.effect.attempts > record.attempts
            logger.warning(
                "tool %s (call %s): resumed, operation %s is still %s; the pause stays open",
                self.name,
                scope.call_id,
                outcome.effect.operation_id,
                outcome.effect.status.value,
            )
            raise EffectStillPending(outcome.effect, sent=sent)
        return await self._answer(outcome, arguments, scope, tool_context)

    def _declined(self, record: OperationRecord) -> Any:
        """A confirmation answered ``confirmed: False``: nothing sent, a settled outcome stands."""
        if record.status is EffectStatus.CONFIRMED:
            return _response(record.output)
        return {
            "error": (
                f"{self.name} was not resumed: the host declined it. Operation "
                f"{record.operation_id!r} stays {record.status.value} in the ledger and nothing "
                "more was sent. Do not call it again for this request; tell the user."
            )
        }

    async def _answer(
        self,
        outcome: Outcome,
        arguments: Mapping[str, Any],
        scope: CallScope,
        tool_context: ToolContext,
    ) -> Any:
        """The function response of an outcome; a pending one pauses on ADK's confirmation."""
        del arguments  # the payloads carry the ledger's copy of the request, never the model's
        if isinstance(outcome, Confirmed):
            return _response(outcome.output)
        if isinstance(outcome, Refused):
            if outcome.operation_id is not None and not outcome.retry_safe:
                record = await _read(self.effect, outcome.operation_id)
                if record is not None and "denied_fingerprint" in record.evidence:
                    return {"error": denial_message(self.name, record)}
            return {"error": outcome.message}
        effect = outcome.effect
        if effect.status is EffectStatus.AWAITING_APPROVAL:
            request = await _in_thread(approval_request, self.effect, effect)
            payload = request.to_json()
            message = request.message()
        else:
            payload = effect.to_json()
            message = effect.message()
        logger.warning(
            "tool %s (call %s): operation %s is %s; pausing the call",
            self.name,
            scope.call_id,
            effect.operation_id,
            effect.status.value,
        )
        tool_context.request_confirmation(hint=message, payload=payload)
        tool_context.actions.skip_summarization = True
        return {"error": f"{message} Do not call {self.name} again for it.", **payload}


def as_tool(fn: Any, *, name: str | None = None, description: str | None = None) -> EffectTool:
    """Return ``fn``, an ``@effect`` function (sync or async), as an ADK tool.

    Its declaration holds exactly ``fn``'s business parameters (never
    ``idempotency_key``, never the tool context), each described by the
    docstring's ``Args:`` section; ADK's arguments are validated against it
    before anything is recorded. A confirmed effect returns its output; a
    rejected or conflicting one an error that invites no retry; any other
    outcome pauses the call with ADK's tool confirmation, so the invocation
    ends and nothing is sent again until the ledger lets it go on (see
    :func:`settle_confirmations`). Raises
    :class:`~effectguard.ConfigurationError` when ``fn`` is not an ``@effect`` tool.
    """
    return EffectTool(fn, name=name, description=description)


async def _in_thread(func: Any, /, *args: Any) -> Any:
    return await asyncio.to_thread(func, *args)


async def _read(fn: Any, operation_id: str) -> OperationRecord | None:
    return await _in_thread(executor_of(fn).ledger.get, operation_id)  # type: ignore[no-any-return]  # asyncio.to_thread of Any


def _pending(fn: Any, record: OperationRecord, *, tool: str, scope: CallScope) -> PendingEffect:
    """The pending payload of ``record``, as the ledger holds it now."""
    return PendingEffect(
        tool=tool,
        tool_call_id=scope.call_id,
        operation_id=record.operation_id,
        status=record.status,
        reason=record.reason,
        attempts=record.attempts,
        operator_command=operator_command(fn, record.operation_id, record.status),
        run_id=scope.run_id,
    )


# -- the host's side: what is paused, what may go on -------------------------------------


@dataclass(frozen=True, slots=True)
class PausedCall:
    """One tool call of a session paused on ADK's confirmation, and what the ledger says of it.

    ``confirmation_id`` is the ``adk_request_confirmation`` call to answer;
    ``function_call_id`` and ``arguments`` the paused call's own (arguments
    validated by the tool's schema); ``record`` the ledger's record of its
    operation, read now (None when the ledger does not hold it).
    """

    tool: EffectTool
    confirmation_id: str
    function_call_id: str
    arguments: Mapping[str, Any]
    scope: CallScope
    operation_id: str
    record: OperationRecord | None

    @property
    def waiting(self) -> bool:
        """True while resuming can only pause again (quarantined, awaiting approval, in flight)."""
        return self.record is None or self.record.status in _WAITING

    def pending(self) -> PendingEffect:
        """The call's pending payload, from the ledger's record."""
        if self.record is None:
            raise OperationNotFoundError(self.operation_id)
        return _pending(self.tool.effect, self.record, tool=self.tool.name, scope=self.scope)


def _tool_table(tools: Iterable[Any]) -> dict[str, EffectTool]:
    table = {}
    for given in tools:
        tool = given if isinstance(given, EffectTool) else None
        if tool is None and get_contract(given) is not None:
            tool = as_tool(given)
        if tool is None:
            msg = f"tools= takes EffectTools (as_tool) or @effect functions, not {given!r}"
            raise ConfigurationError(msg)
        table[tool.name] = tool
    return table


def _answered(events: Sequence[Any]) -> set[str]:
    """Function-call ids a tool (not the user) has responded to after a user's confirmation.

    A call the tool re-ran and that raised :class:`EffectStillPending` has no
    such response, so it counts as still paused.
    """
    confirmations: dict[str, str] = {}
    answered_by_user: set[str] = set()
    done: set[str] = set()
    for event in events:
        for call in event.get_function_calls():
            if call.name == CONFIRMATION_CALL and call.id and isinstance(call.args, Mapping):
                original = call.args.get("originalFunctionCall")
                if isinstance(original, Mapping) and original.get("id"):
                    confirmations[str(original["id"])] = call.id
        for response in event.get_function_responses():
            if event.author == "user":
                if response.name == CONFIRMATION_CALL and response.id:
                    answered_by_user.add(response.id)
            elif response.id and confirmations.get(response.id) in answered_by_user:
                done.add(response.id)
    return done


def paused_calls(session: Session, tools: Iterable[Any]) -> list[PausedCall]:
    """Every call of ``tools`` in ``session`` paused on ADK's confirmation and not yet resumed.

    ``tools`` are the tools :func:`as_tool` made (or their ``@effect``
    functions). The operation of each is computed from the paused call's own
    arguments and ids, as the tool computes it, never taken from the
    confirmation payload; its record is read from the ledger. Sends nothing.
    """
    table = _tool_table(tools)
    events = list(session.events)
    done = _answered(events)
    found = []
    for event in events:
        for call in event.get_function_calls():
            if call.name != CONFIRMATION_CALL or not call.id or not isinstance(call.args, Mapping):
                continue
            original = call.args.get("originalFunctionCall")
            confirmation = call.args.get("toolConfirmation")
            payload = confirmation.get("payload") if isinstance(confirmation, Mapping) else None
            if not isinstance(original, Mapping) or not (
                is_pending_payload(payload) or is_approval_payload(payload)
            ):
                continue
            tool = table.get(str(original.get("name")))
            call_id = original.get("id")
            if tool is None or not isinstance(call_id, str) or call_id in done:
                continue
            try:
                arguments = tool.arguments(original.get("args") or {})
            except ValidationError as exc:
                msg = (
                    f"paused call {call_id!r} of {tool.name}: its arguments do not fit the "
                    f"tool's schema ({exc}); nothing was sent"
                )
                raise ConfigurationError(msg) from exc
            scope = CallScope(run_id=_run_id(session), call_id=call_id)
            with call_scope(run_id=scope.run_id, call_id=scope.call_id):
                operation = operation_id_of(tool.effect, **arguments)
            record = executor_of(tool.effect).ledger.get(operation)
            found.append(PausedCall(tool, call.id, call_id, arguments, scope, operation, record))
    return found


def settle_confirmations(
    session: Session, tools: Iterable[Any]
) -> tuple[types.Content | None, list[PendingEffect]]:
    """The message resuming every paused call the ledger lets go on, and the payloads of the rest.

    Reads the ledger only. A call whose operation is QUARANTINED, awaiting
    approval or in flight is left paused (its
    :class:`~effectguard.adapters.PendingEffect` is returned, with the
    operator's command); every other paused call gets a confirmation
    (``confirmed: True``) in the returned user message, or None when there is
    none. Pass it as ``new_message`` to ``runner.run_async`` with the same
    user and session: ADK runs each confirmed call again, and the tool reads
    the ledger again before it does anything. Raises
    :class:`~effectguard.errors.OperationNotFoundError` when the ledger does
    not hold a paused call's operation (another ledger than the session's).
    """
    paused = paused_calls(session, tools)
    for call in paused:
        if call.record is None:
            raise OperationNotFoundError(call.operation_id)
    waiting = [call.pending() for call in paused if call.waiting]
    parts = [
        types.Part(
            function_response=types.FunctionResponse(
                name=CONFIRMATION_CALL, id=call.confirmation_id, response={"confirmed": True}
            )
        )
        for call in paused
        if not call.waiting
    ]
    message = types.Content(role="user", parts=parts) if parts else None
    return message, waiting


def approval_requests(session: Session, tools: Iterable[Any]) -> list[ApprovalRequest]:
    """What a person must see to decide: each paused call whose request awaits approval.

    The arguments are the ledger's copy of the request (redacted values
    masked), bound to its fingerprint and to the state shown (its event
    count), never the session's copy. Reads the ledger only.
    """
    return [
        record_payload(
            call.tool.effect,
            call.record,
            tool=call.tool.name,
            tool_call_id=call.function_call_id,
            run_id=call.scope.run_id,
        )
        for call in paused_calls(session, tools)
        if call.record is not None and call.record.status is EffectStatus.AWAITING_APPROVAL
    ]


def decide_approval(
    tool: EffectTool | Any,
    request: ApprovalRequest,
    *,
    approve: bool,
    actor: str,
    reason: str,
    evidence_reference: str,
    expires_in: float | None = None,
) -> OperationRecord:
    """Write a person's decision on ``request`` to the ledger of ``tool``; the record as it stands.

    ``approve=True`` approves exactly the request the ledger holds (the
    resumed call sends it once); ``False`` denies it (REJECTED: never sent,
    and the model reads a denial that invites no retry). Bound to the state
    the person was shown: a request that has moved on since is refused with
    :class:`~effectguard.errors.OperationChangedError`, nothing written.
    Blocks on the ledger; from async code run it in a thread.
    """
    fn = tool.effect if isinstance(tool, EffectTool) else tool
    require_effect(fn, "decide_approval()")
    return decide(
        executor_of(fn).ledger,
        request,
        approve=approve,
        actor=actor,
        reason=reason,
        evidence_reference=evidence_reference,
        expires_in=expires_in if approve else None,
    )
