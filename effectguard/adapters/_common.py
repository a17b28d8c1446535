"""What every framework adapter shares: the scope, the signature, the outcome, the resume step.

An adapter turns one framework tool call into one call of an ``@effect`` tool:

- :func:`public_signature` says what the model is offered: the visible
  parameters (never ``idempotency_key``), their type hints, and the
  descriptions the docstring's ``Args:`` section gives them;
- :func:`run_effect` / :func:`run_effect_async` run the call under the call
  scope the framework identifies it by (:func:`effectguard.call_scope`, so
  ``call_scoped(prefix)`` operation ids work), wait for an identical call that
  is already dispatching (a peer) rather than fail, and classify what came
  back: :class:`Confirmed`, :class:`Pending` (the framework pauses with its
  :class:`PendingEffect` payload) or :class:`Refused` (a tool error the model
  must not answer by sending the same operation again);
- :func:`resume_effect` / :func:`resume_effect_async` are the step after a
  pause. They re-read the ledger by operation id and never trust the value the
  framework resumed with: a QUARANTINED operation stays paused and nothing is
  called; any other is run again, so an OUTCOME_UNKNOWN one is re-probed and a
  CONFIRMED one replayed, never re-sent.

Errors of the infrastructure (no executor, a ledger that cannot be reached,
arguments that do not fit the signature, a call scope that changed between
pause and resume) are raised to the adapter's caller, never shown to the model.
"""

from __future__ import annotations

import asyncio
import inspect
import shlex
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from effectguard._decorator import executor_of, ledger_reference, operation_id_of
from effectguard._describe import PublicSignature, public_signature, require_effect
from effectguard._model import EffectResult, EffectStatus, OperationRecord
from effectguard._scope import CallScope, call_scope
from effectguard.errors import (
    ConfigurationError,
    InvalidRequestError,
    OperationConflictError,
    OperationNotFoundError,
    OutputNotStored,
)

__all__ = [
    "PENDING_KIND",
    "Confirmed",
    "Outcome",
    "Pending",
    "PendingEffect",
    "PublicSignature",
    "Refused",
    "classify",
    "is_pending_payload",
    "ledger_command",
    "operator_command",
    "public_signature",
    "require_effect",
    "resume_effect",
    "resume_effect_async",
    "run_effect",
    "run_effect_async",
]

#: The ``kind`` of a pending payload, so it is told apart from a framework's other pauses.
PENDING_KIND = "effectguard.pending_effect"

# -- what a call came to ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PendingEffect:
    """An effect whose outcome is not confirmed: what a paused run waits on.

    The one pending shape of every adapter: LangGraph pauses with it,
    Pydantic AI defers with it as metadata, the OpenAI Agents SDK and MCP
    return it as the tool's output, and each adapter's ``pending_effects`` /
    ``settle_*`` gives it back as this class. The payload (:meth:`to_json`):
    which tool call, in which run (the call scope's ``run_id``; None for MCP,
    which has no scope), which operation, its status and why, how many
    attempts were made, and the ``agent-effect-ops`` command an operator runs
    to resolve it once they have checked the provider (``reject`` and
    ``authorize-retry`` take the same ``--actor``, ``--reason`` and
    ``--evidence-reference``).
    """

    tool: str
    tool_call_id: str
    operation_id: str
    status: EffectStatus
    reason: str | None
    attempts: int
    operator_command: str
    run_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the payload as plain JSON values, marked with ``kind``: :data:`PENDING_KIND`."""
        return {
            "kind": PENDING_KIND,
            "tool": self.tool,
            "tool_call_id": self.tool_call_id,
            "operation_id": self.operation_id,
            "status": self.status.value,
            "reason": self.reason,
            "attempts": self.attempts,
            "operator_command": self.operator_command,
            "run_id": self.run_id,
        }

    @classmethod
    def from_json(cls, data: object) -> PendingEffect:
        """Rebuild a payload from :meth:`to_json`; :class:`InvalidRequestError` if it is not one."""
        if not is_pending_payload(data):
            msg = f"not an effectguard pending-effect payload: {data!r}"
            raise InvalidRequestError(msg)
        fields = typing.cast("Mapping[str, Any]", data)
        try:
            return cls(
                tool=str(fields["tool"]),
                tool_call_id=str(fields["tool_call_id"]),
                operation_id=str(fields["operation_id"]),
                status=EffectStatus(fields["status"]),
                reason=None if fields.get("reason") is None else str(fields["reason"]),
                attempts=int(fields["attempts"]),
                operator_command=str(fields["operator_command"]),
                run_id=None if fields.get("run_id") is None else str(fields["run_id"]),
            )
        except (KeyError, ValueError, TypeError) as exc:
            msg = f"malformed effectguard pending-effect payload ({exc!r}): {data!r}"
            raise InvalidRequestError(msg) from exc

    def message(self) -> str:
        """One line for a person: which operation waits, why, and how to resolve it."""
        why = f": {self.reason}" if self.reason else ""
        return (
            f"{self.tool} (tool call {self.tool_call_id}) waits on operation "
            f"{self.operation_id!r}, {self.status.value} after {self.attempts} attempt(s){why}. "
            f"Check the provider, then resolve it: {self.operator_command}"
        )


def is_pending_payload(data: object) -> bool:
    """True when ``data`` is a payload :meth:`PendingEffect.to_json` made."""
    return isinstance(data, Mapping) and data.get("kind") == PENDING_KIND


@dataclass(frozen=True, slots=True)
class Confirmed:
    """The effect happened: ``output`` is what the tool returned (fresh or replayed)."""

    output: Any
    result: EffectResult[Any]


@dataclass(frozen=True, slots=True)
class Pending:
    """The outcome is not confirmed: the framework pauses with ``effect`` as its payload."""

    effect: PendingEffect


@dataclass(frozen=True, slots=True)
class Refused:
    """A tool error for the model.

    ``retry_safe`` is False for a rejected operation, a conflicting request or
    an output that could not be kept: sending the same operation again can
    only get the same answer, and ``message`` says so. It is True only when
    the request provably never left, so calling again sends it once.
    """

    message: str
    operation_id: str | None
    retry_safe: bool
    error: BaseException | None = None


Outcome: TypeAlias = Confirmed | Pending | Refused


def operator_command(fn: Any, operation_id: str, status: EffectStatus | None = None) -> str:
    """Return the ``agent-effect-ops confirm`` command resolving ``operation_id`` of ``fn``.

    For an operation AWAITING_APPROVAL it is the ``approve`` command instead
    (``deny`` takes the same options). A SQLite ledger is named by its
    absolute path; any other by the placeholder ``LEDGER_URL``, so no
    connection string (and no password) ever lands in a payload a framework
    checkpoints.
    """
    return ledger_command(executor_of(fn).ledger, operation_id, status)


def ledger_command(ledger: object, operation_id: str, status: EffectStatus | None = None) -> str:
    """Like :func:`operator_command`, for an operation of ``ledger`` run without an ``@effect``."""
    target = ledger_reference(ledger)
    if status is EffectStatus.AWAITING_APPROVAL:
        return (
            f"agent-effect-ops --db {target} approve {shlex.quote(operation_id)} "
            "--actor NAME --reason TEXT --evidence-reference REF"
        )
    return (
        f"agent-effect-ops --db {target} confirm {shlex.quote(operation_id)} "
        "--output-json JSON --provider-operation-id ID "
        "--actor NAME --reason TEXT --evidence-reference REF"
    )


def classify(
    fn: Any,
    result: EffectResult[Any],
    *,
    tool: str,
    tool_call_id: str,
    run_id: str | None = None,
    ledger: object | None = None,
) -> Outcome:
    """Return what ``result`` means for the framework: confirmed, pending, or refused.

    ``run_id`` is the call scope's, kept in a pending payload (None without a scope).
    ``ledger`` names the ledger in the operator command when ``fn`` is no
    ``@effect`` function (a contract run on an executor directly).
    """
    status, operation = result.status, result.operation_id
    if status is EffectStatus.CONFIRMED:
        return Confirmed(result.output, result)
    if status is EffectStatus.REJECTED:
        reason = result.reason or "no reason recorded"
        message = (
            f"{tool} was not carried out: operation {operation!r} was rejected ({reason}). "
            "It is never sent again: do not retry it with the same arguments; tell the user."
        )
        return Refused(message, operation, retry_safe=False)
    if status is EffectStatus.PREPARED and not result.replayed:
        message = (
            f"{tool} was not sent ({result.reason}); nothing happened, and calling it "
            "again with the same arguments sends it once"
        )
        return Refused(message, operation, retry_safe=True)
    return Pending(
        PendingEffect(
            tool=tool,
            tool_call_id=tool_call_id,
            operation_id=operation,
            status=status,
            reason=result.reason,
            attempts=result.attempts,
            operator_command=(
                operator_command(fn, operation, status)
                if ledger is None
                else ledger_command(ledger, operation, status)
            ),
            run_id=run_id,
        )
    )


def _refusal(error: OperationConflictError | OutputNotStored, tool: str) -> Refused:
    if isinstance(error, OperationConflictError):
        message = (
            f"{tool} was not carried out: {error}. Nothing was sent, and the same call gets "
            "the same answer: do not retry it; tell the user."
        )
        return Refused(message, error.operation_id, retry_safe=False, error=error)
    operation = error.result.operation_id
    message = (
        f"{tool} took effect (operation {operation!r} is confirmed), but its output could "
        f"not be kept: {error}. Do not call it again for this request."
    )
    return Refused(message, operation, retry_safe=False, error=error)


# -- running a call --------------------------------------------------------------------


def run_effect(
    fn: Any, arguments: Mapping[str, Any], *, scope: CallScope, tool: str, tool_call_id: str
) -> Outcome:
    """Run the sync ``@effect`` tool ``fn`` with ``arguments`` under ``scope``, and classify it.

    An identical call already dispatching is waited for (the tool's
    ``wait_for_peer``, 30 s unless configured) and its outcome shared, so two
    identical calls in one turn dispatch once.
    """
    with call_scope(run_id=scope.run_id, call_id=scope.call_id):
        try:
            result = fn.execute(**arguments)
        except (OperationConflictError, OutputNotStored) as exc:
            return _refusal(exc, tool)
    return classify(fn, result, tool=tool, tool_call_id=tool_call_id, run_id=scope.run_id)


async def run_effect_async(
    fn: Any, arguments: Mapping[str, Any], *, scope: CallScope, tool: str, tool_call_id: str
) -> Outcome:
    """Like :func:`run_effect`, awaiting an async tool; a sync one runs in a worker thread."""
    with call_scope(run_id=scope.run_id, call_id=scope.call_id):
        try:
            if inspect.iscoroutinefunction(fn):
                result = await fn.execute(**arguments)
            else:
                result = await _in_thread(fn.execute, **arguments)
        except (OperationConflictError, OutputNotStored) as exc:
            return _refusal(exc, tool)
    return classify(fn, result, tool=tool, tool_call_id=tool_call_id, run_id=scope.run_id)


async def _in_thread(func: Callable[..., Any], /, **kwargs: Any) -> Any:
    """Run ``func`` in a worker thread; ``to_thread`` copies this context, so the scope follows."""
    return await asyncio.to_thread(func, **kwargs)


# -- resuming after a pause ------------------------------------------------------------


def _resume_check(fn: Any, arguments: Mapping[str, Any], pending: PendingEffect) -> None:
    """Refuse to resume a call that would be another operation than the one paused on."""
    computed = operation_id_of(fn, **arguments)
    if computed != pending.operation_id:
        msg = (
            f"{pending.tool}: resuming tool call {pending.tool_call_id} would run operation "
            f"{computed!r}, but the run paused on {pending.operation_id!r}; nothing was sent. "
            "The call scope (thread or run id, tool call id) or the arguments changed: "
            "resume with the same ones"
        )
        raise ConfigurationError(msg)


def _still_pending(
    record: OperationRecord | None, fn: Any, pending: PendingEffect, scope: CallScope
) -> Outcome | None:
    """Return the outcome the ledger settles without a call, or None when the call must run."""
    if record is None:
        # The pause was for a recorded operation: without its record, running the call would
        # dispatch it afresh. A different or replaced ledger is an operator's problem.
        msg = (
            f"{pending.tool}: operation {pending.operation_id!r}, which the run paused on, is "
            "not in the ledger; nothing was sent. Resume with the ledger the run paused with"
        )
        raise OperationNotFoundError(pending.operation_id) from ConfigurationError(msg)
    if record.status is EffectStatus.QUARANTINED:
        return Pending(
            PendingEffect(
                tool=pending.tool,
                tool_call_id=pending.tool_call_id,
                operation_id=record.operation_id,
                status=record.status,
                reason=record.reason,
                attempts=record.attempts,
                operator_command=operator_command(fn, record.operation_id),
                run_id=scope.run_id,
            )
        )
    return None


def require_recorded(
    fn: Any, arguments: Mapping[str, Any], *, scope: CallScope, tool: str, tool_call_id: str
) -> str:
    """Refuse, before anything is sent, a resumed call whose operation the ledger does not hold.

    For a framework that re-runs a paused step from its start (LangGraph), so
    the call runs again before the resume step could check: the pause was for
    a recorded operation, and without its record running the call would
    dispatch it afresh. Returns the operation id; raises
    :class:`OperationNotFoundError` naming it otherwise.
    """
    with call_scope(run_id=scope.run_id, call_id=scope.call_id):
        operation_id = operation_id_of(fn, **arguments)
    if executor_of(fn).ledger.get(operation_id) is None:
        msg = (
            f"{tool}: tool call {tool_call_id} is being resumed, but its operation "
            f"{operation_id!r} is not in the ledger; nothing was sent. Resume with the ledger "
            "the run paused with (a sibling call cancelled before it was recorded, as a plain "
            "async ToolNode does, needs EffectToolNode)"
        )
        raise OperationNotFoundError(operation_id) from ConfigurationError(msg)
    return operation_id


def resume_effect(
    fn: Any, arguments: Mapping[str, Any], *, pending: PendingEffect, scope: CallScope
) -> Outcome:
    """The step after a pause on ``pending``: the ledger's word, whatever the resume value was.

    A QUARANTINED operation stays :class:`Pending` without any call; any other
    is run again (an OUTCOME_UNKNOWN one re-probed, a CONFIRMED or REJECTED
    one replayed, one an operator authorized sent once more). Raises
    :class:`ConfigurationError` when ``arguments`` under ``scope`` would be
    another operation, and :class:`OperationNotFoundError` when the ledger does
    not hold the operation; nothing is sent in either case.
    """
    with call_scope(run_id=scope.run_id, call_id=scope.call_id):
        _resume_check(fn, arguments, pending)
    record = executor_of(fn).ledger.get(pending.operation_id)
    settled = _still_pending(record, fn, pending, scope)
    if settled is not None:
        return settled
    return run_effect(
        fn, arguments, scope=scope, tool=pending.tool, tool_call_id=pending.tool_call_id
    )


async def resume_effect_async(
    fn: Any, arguments: Mapping[str, Any], *, pending: PendingEffect, scope: CallScope
) -> Outcome:
    """Like :func:`resume_effect`; the ledger is read in a worker thread."""
    with call_scope(run_id=scope.run_id, call_id=scope.call_id):
        _resume_check(fn, arguments, pending)
    ledger = executor_of(fn).ledger
    record = await _in_thread(ledger.get, operation_id=pending.operation_id)
    settled = _still_pending(record, fn, pending, scope)
    if settled is not None:
        return settled
    return await run_effect_async(
        fn, arguments, scope=scope, tool=pending.tool, tool_call_id=pending.tool_call_id
    )
