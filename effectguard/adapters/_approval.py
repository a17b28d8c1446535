"""Exact-call approvals in a framework's own pause: what a person is shown, and their decision.

A call of an ``@effect(requires_approval=...)`` tool that has no approval is
recorded AWAITING_APPROVAL, bound to its request fingerprint, and nothing is
sent (:func:`~effectguard.adapters.run_effect` classifies it as pending with
that status). An adapter pauses it with an :class:`ApprovalRequest` instead of
the pending-effect payload: the arguments a person must see are the ones the
ledger holds (redacted values masked), so what is shown is what the
fingerprint covers, never what the framework's state claims.

:func:`decide` writes the application's decision to the ledger (``approve`` or
``deny``), bound to the state the person was shown (its event count): a
decision on a request that has moved on since is refused, nothing written.
Neither the model nor a framework's resume value can approve anything: the
tool re-reads the ledger when the run resumes, and dispatches only an
operation the ledger holds approved.
"""

from __future__ import annotations

import shlex
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from effectguard._decorator import executor_of, ledger_reference, request_of
from effectguard._model import EffectStatus, EventType, OperationRecord
from effectguard._scope import CallScope, call_scope
from effectguard.adapters._common import PendingEffect
from effectguard.errors import (
    ConfigurationError,
    InvalidRequestError,
    OperationConflictError,
    OperationNotFoundError,
)
from effectguard.ledger import EffectLedger, Seen
from effectguard.ledger import _resolution as resolution

__all__ = [
    "APPROVAL_KIND",
    "ApprovalRequest",
    "approval_command",
    "approval_request",
    "decide",
    "denial_message",
    "is_approval_payload",
    "ledger_command",
    "record_decision",
    "record_payload",
    "request_payload",
]

T = TypeVar("T")

#: The ``kind`` of an approval payload, told apart from pending effects and other pauses.
APPROVAL_KIND = "effectguard.approval"


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A tool call waiting for a person's approval of exactly its request.

    The payload (:meth:`to_json`) a framework pauses with: which tool call, in
    which run, which operation; ``arguments`` as the ledger holds them (the
    request the approval is bound to, every redacted value masked);
    ``event_count``, the state shown, which a decision is checked against; and
    the ``agent-effect-ops`` commands that approve or deny it.
    """

    tool: str
    tool_call_id: str
    operation_id: str
    arguments: Mapping[str, Any]
    event_count: int | None
    approve_command: str
    deny_command: str
    reason: str | None = None
    run_id: str | None = None
    status: EffectStatus = field(default=EffectStatus.AWAITING_APPROVAL)
    fingerprint: str | None = None

    @property
    def operator_command(self) -> str:
        """The command that approves it from a shell (:attr:`approve_command`)."""
        return self.approve_command

    def to_json(self) -> dict[str, Any]:
        """The payload as plain JSON values, marked with ``kind``: :data:`APPROVAL_KIND`."""
        return {
            "kind": APPROVAL_KIND,
            "tool": self.tool,
            "tool_call_id": self.tool_call_id,
            "operation_id": self.operation_id,
            "status": self.status.value,
            "arguments": dict(self.arguments),
            "event_count": self.event_count,
            "fingerprint": self.fingerprint,
            "reason": self.reason,
            "approve_command": self.approve_command,
            "deny_command": self.deny_command,
            "operator_command": self.approve_command,
            "run_id": self.run_id,
        }

    @classmethod
    def from_json(cls, data: object) -> ApprovalRequest:
        """Rebuild a payload from :meth:`to_json`; :class:`InvalidRequestError` if it is not one."""
        if not is_approval_payload(data):
            msg = f"not an effectguard approval payload: {data!r}"
            raise InvalidRequestError(msg)
        fields = typing.cast("Mapping[str, Any]", data)
        try:
            arguments = fields["arguments"]
            if not isinstance(arguments, Mapping):
                raise TypeError("arguments is not a mapping")  # noqa: TRY301 - folded into the one error below
            return cls(
                tool=str(fields["tool"]),
                tool_call_id=str(fields["tool_call_id"]),
                operation_id=str(fields["operation_id"]),
                status=EffectStatus(fields.get("status", EffectStatus.AWAITING_APPROVAL.value)),
                arguments=dict(arguments),
                event_count=None
                if fields.get("event_count") is None
                else int(fields["event_count"]),
                reason=None if fields.get("reason") is None else str(fields["reason"]),
                approve_command=str(fields["approve_command"]),
                deny_command=str(fields["deny_command"]),
                run_id=None if fields.get("run_id") is None else str(fields["run_id"]),
                fingerprint=None
                if fields.get("fingerprint") is None
                else str(fields["fingerprint"]),
            )
        except (KeyError, ValueError, TypeError) as exc:
            msg = f"malformed effectguard approval payload ({exc!r}): {data!r}"
            raise InvalidRequestError(msg) from exc

    def message(self) -> str:
        """One line for a person: which request waits for them, and how to decide it."""
        return (
            f"{self.tool} (tool call {self.tool_call_id}) waits for a person's approval of "
            f"operation {self.operation_id!r} with arguments {dict(self.arguments)!r}; nothing "
            f"was sent. Approve it: {self.approve_command} (or deny it: {self.deny_command})"
        )


def _optional(fields: Mapping[str, Any], name: str, kind: Callable[[Any], T]) -> T | None:
    value = fields.get(name)
    return None if value is None else kind(value)


def is_approval_payload(data: object) -> bool:
    """True when ``data`` is a payload :meth:`ApprovalRequest.to_json` made."""
    return isinstance(data, Mapping) and data.get("kind") == APPROVAL_KIND


def _command(fn: Any, action: str, operation_id: str, event_count: int | None) -> str:
    """The ``agent-effect-ops`` command that decides it, bound to ``event_count`` when known.

    A SQLite ledger is named by its path, any other by ``LEDGER_URL``, so no
    connection string lands in a payload a framework checkpoints.
    """
    return ledger_command(executor_of(fn).ledger, action, operation_id, event_count)


def ledger_command(
    ledger: EffectLedger, action: str, operation_id: str, event_count: int | None
) -> str:
    """:func:`_command` for an operation of ``ledger`` (where there is no tool function)."""
    target = ledger_reference(ledger)
    expect = "" if event_count is None else f"--expect-events {event_count} "
    return (
        f"agent-effect-ops --db {target} {action} {shlex.quote(operation_id)} "
        f"{expect}--actor NAME --reason TEXT --evidence-reference REF"
    )


def approval_command(fn: Any, operation_id: str) -> str:
    """Return the ``agent-effect-ops approve`` command for ``operation_id`` of ``fn``."""
    return _command(fn, "approve", operation_id, None)


def request_payload(
    fn: Any,
    *,
    tool: str,
    tool_call_id: str,
    operation_id: str,
    arguments: Mapping[str, Any],
    fingerprint: str,
    reason: str | None,
    run_id: str | None = None,
    event_count: int | None = None,
) -> ApprovalRequest:
    """The :class:`ApprovalRequest` of a request whose ledger copy is known without a read.

    ``arguments`` and ``fingerprint`` must be the request's as the ledger
    records them (:func:`~effectguard._decorator.request_of` computes both).
    """
    return ApprovalRequest(
        tool=tool,
        tool_call_id=tool_call_id,
        operation_id=operation_id,
        arguments=dict(arguments),
        event_count=event_count,
        approve_command=_command(fn, "approve", operation_id, event_count),
        deny_command=_command(fn, "deny", operation_id, event_count),
        reason=reason,
        run_id=run_id,
        fingerprint=fingerprint,
    )


def record_payload(
    fn: Any, record: OperationRecord, *, tool: str, tool_call_id: str, run_id: str | None = None
) -> ApprovalRequest:
    """The :class:`ApprovalRequest` of ``record``, an operation of ``fn`` awaiting approval."""
    return request_payload(
        fn,
        tool=tool,
        tool_call_id=tool_call_id,
        operation_id=record.operation_id,
        arguments=record.arguments,
        fingerprint=record.fingerprint,
        reason=record.reason,
        run_id=run_id,
        event_count=record.event_count,
    )


def approval_request(fn: Any, pending: PendingEffect) -> ApprovalRequest:
    """The approval payload of a call ``pending`` on AWAITING_APPROVAL, read from the ledger.

    The arguments and event count are the ledger's record of the operation,
    not the framework's: what the person approves is what the fingerprint
    binds. Raises :class:`OperationNotFoundError` when the ledger does not hold it.
    """
    record = executor_of(fn).ledger.get(pending.operation_id)
    if record is None:
        raise OperationNotFoundError(pending.operation_id)
    count = record.event_count
    return ApprovalRequest(
        tool=pending.tool,
        tool_call_id=pending.tool_call_id,
        operation_id=record.operation_id,
        status=record.status,
        arguments=dict(record.arguments),
        event_count=count,
        reason=record.reason,
        approve_command=_command(fn, "approve", record.operation_id, count),
        deny_command=_command(fn, "deny", record.operation_id, count),
        run_id=pending.run_id,
        fingerprint=record.fingerprint,
    )


def denial_message(tool: str, record: OperationRecord) -> str:
    """What the model reads for a denied request: it is never sent, and no retry is invited."""
    why = record.reason or "no reason recorded"
    return (
        f"{tool} was not carried out: a person denied operation {record.operation_id!r} "
        f"({why}). It is never sent: do not retry it with the same arguments; tell the user."
    )


class _Deciding(Protocol):
    """The approval writes both ledger backends have (not part of :class:`EffectLedger`)."""

    def approve(
        self,
        operation_id: str,
        *,
        actor: str,
        reason: str,
        evidence_reference: str,
        expires_in: float | None = None,
        expected: Seen | None = None,
    ) -> OperationRecord: ...

    def deny(
        self,
        operation_id: str,
        *,
        actor: str,
        reason: str,
        evidence_reference: str,
        expected: Seen | None = None,
    ) -> OperationRecord: ...


def _decided(ledger: EffectLedger, record: OperationRecord, *, approve: bool) -> bool:
    """Whether the ledger already holds this decision on exactly ``record``'s request."""
    wanted = EventType.OPERATOR_APPROVED if approve else EventType.OPERATOR_DENIED
    key = "approved_fingerprint" if approve else "denied_fingerprint"
    if approve and record.status is EffectStatus.REJECTED:
        return False
    if not approve and record.status is not EffectStatus.REJECTED:
        return False
    return any(
        event.type is wanted and event.evidence.get(key) == record.fingerprint
        for event in ledger.events(record.operation_id)
    )


def decide(
    ledger: EffectLedger,
    request: ApprovalRequest,
    *,
    approve: bool,
    actor: str,
    reason: str,
    evidence_reference: str,
    expires_in: float | None = None,
) -> OperationRecord:
    """Write a person's decision on ``request`` to the ledger; the record as it now stands.

    ``approve=True`` approves exactly the request the ledger holds (PREPARED:
    the next call sends it once); ``False`` denies it (REJECTED, never sent).
    The write is bound to the state the person was shown
    (``request.event_count``): a request that has moved on since is refused
    with :class:`~effectguard.errors.OperationChangedError`, nothing written.
    Deciding again what the ledger already holds for this very request (the
    same decision recorded before a crash, or by an operator with the CLI)
    writes nothing. The audit (actor, reason, evidence reference, OS user,
    host, the fingerprint decided) is the ledger's, as for every resolution.
    """
    record = ledger.get(request.operation_id)
    if record is None:
        raise OperationNotFoundError(request.operation_id)
    if request.fingerprint is not None and record.fingerprint != request.fingerprint:
        raise OperationConflictError(record.operation_id, record.fingerprint, request.fingerprint)
    if record.event_count != request.event_count and _decided(ledger, record, approve=approve):
        return record
    writer = getattr(ledger, "approve", None), getattr(ledger, "deny", None)
    if not all(callable(method) for method in writer):
        msg = f"ledger {type(ledger).__name__} records no approvals; nothing was written"
        raise ConfigurationError(msg)
    deciding = typing.cast("_Deciding", ledger)
    expected = None if request.event_count is None else Seen(event_count=request.event_count)
    audit = {"actor": actor, "reason": reason, "evidence_reference": evidence_reference}
    if approve:
        return deciding.approve(
            request.operation_id, **audit, expires_in=expires_in, expected=expected
        )
    if expires_in is not None:
        msg = "a denial does not expire: expires_in applies to an approval only"
        raise InvalidRequestError(msg)
    return deciding.deny(request.operation_id, **audit, expected=expected)


def record_decision(
    fn: Any,
    arguments: Mapping[str, Any],
    *,
    scope: CallScope | None,
    approved: bool,
    actor: str,
    reason: str,
    evidence_reference: str,
    expires_in: float | None = None,
) -> OperationRecord:
    """Record a person's decision on the request ``arguments`` make, under ``scope``.

    For a framework that hands back the call's arguments, not the payload: the
    decision lands only on that exact request (the ledger's record must have
    the fingerprint these arguments have, else
    :class:`~effectguard.errors.OperationConflictError`, nothing written),
    fenced on the state read, so a request that moved meanwhile is refused
    rather than decided unseen. A request still AWAITING_APPROVAL is approved
    (PREPARED: the next call sends it once) or denied (REJECTED: never sent).
    One the ledger already holds a decision for is returned unchanged: the
    ledger's word stands, so recording the same decisions twice writes once.
    :class:`~effectguard.errors.OperationNotFoundError` when the ledger holds
    no such request.
    """
    if scope is None:
        request = request_of(fn, **arguments)
    else:
        with call_scope(run_id=scope.run_id, call_id=scope.call_id):
            request = request_of(fn, **arguments)
    ledger = executor_of(fn).ledger
    record = ledger.get(request.operation_id)
    if record is None:
        raise OperationNotFoundError(request.operation_id)
    if record.fingerprint != request.fingerprint:
        raise OperationConflictError(request.operation_id, record.fingerprint, request.fingerprint)
    if record.status is not EffectStatus.AWAITING_APPROVAL:
        return record
    seen = Seen(event_count=record.event_count, event_head=record.event_head.hex())
    if approved:
        return resolution.approve(
            ledger,
            request.operation_id,
            actor=actor,
            reason=reason,
            evidence_reference=evidence_reference,
            expires_in=expires_in,
            expected=seen,
        )
    return resolution.deny(
        ledger,
        request.operation_id,
        actor=actor,
        reason=reason,
        evidence_reference=evidence_reference,
        expected=seen,
    )
