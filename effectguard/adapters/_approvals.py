"""A request awaiting a person's approval, as every adapter shows it, and recording the decision.

A tool whose contract requires approval (``@effect(requires_approval=...)``)
records a new request unsent, AWAITING_APPROVAL, bound to its fingerprint.
An adapter pauses on it with an :class:`ApprovalRequest`: which tool call,
which operation, the arguments exactly as the ledger recorded them (redacted
values masked, so a person is shown what is approved and no secret), the
fingerprint, and the ``agent-effect-ops approve`` command.

:func:`record_decision` writes the application's decision (taken through the
framework's own approval flow) into the ledger: only onto the very request
the arguments make (same operation id, same fingerprint), only onto the state
it read, and only while the request still awaits a decision. The framework's
word alone never sends anything: the tool body sends only what the ledger
approved, once, and a request the ledger still holds as awaiting is never
sent, whatever the framework resumed with.
"""

from __future__ import annotations

import shlex
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from effectguard._decorator import executor_of, ledger_reference, request_of
from effectguard._model import EffectStatus, OperationRecord
from effectguard._scope import CallScope, call_scope
from effectguard.errors import (
    InvalidRequestError,
    OperationConflictError,
    OperationNotFoundError,
)
from effectguard.ledger._protocol import Seen
from effectguard.ledger._resolution import approve, deny

__all__ = [
    "APPROVAL_KIND",
    "ApprovalRequest",
    "approval_command",
    "approval_request",
    "is_approval_payload",
    "record_decision",
]

#: The ``kind`` of an approval payload, told apart from a pending effect and the framework's pauses.
APPROVAL_KIND = "effectguard.approval"

_AWAITING = EffectStatus.AWAITING_APPROVAL


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A request recorded unsent that waits for a person's approval of exactly it.

    ``arguments`` are the ledger's copy of the request (a redacted value is
    ``"[redacted]"``): what the person approves is what the ledger holds, and
    ``fingerprint`` is the request's, which the approval is bound to.
    ``operator_command`` approves it from a shell (``deny`` takes the same
    ``--actor``, ``--reason`` and ``--evidence-reference``). ``run_id`` is the
    call scope's, None where the framework has none (MCP).
    """

    tool: str
    tool_call_id: str
    operation_id: str
    arguments: Mapping[str, Any]
    fingerprint: str
    operator_command: str
    reason: str | None = None
    run_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the payload as plain JSON values, marked with ``kind``: :data:`APPROVAL_KIND`."""
        return {
            "kind": APPROVAL_KIND,
            "tool": self.tool,
            "tool_call_id": self.tool_call_id,
            "operation_id": self.operation_id,
            "status": _AWAITING.value,
            "arguments": dict(self.arguments),
            "fingerprint": self.fingerprint,
            "reason": self.reason,
            "operator_command": self.operator_command,
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
                msg = f"arguments must be an object, not {arguments!r}"
                raise TypeError(msg)  # noqa: TRY301 - folded into the one malformed-payload error
            return cls(
                tool=str(fields["tool"]),
                tool_call_id=str(fields["tool_call_id"]),
                operation_id=str(fields["operation_id"]),
                arguments=dict(arguments),
                fingerprint=str(fields["fingerprint"]),
                operator_command=str(fields["operator_command"]),
                reason=None if fields.get("reason") is None else str(fields["reason"]),
                run_id=None if fields.get("run_id") is None else str(fields["run_id"]),
            )
        except (KeyError, TypeError) as exc:
            msg = f"malformed effectguard approval payload ({exc!r}): {data!r}"
            raise InvalidRequestError(msg) from exc

    def message(self) -> str:
        """One line for a person: which request waits, and how to approve it."""
        return (
            f"{self.tool} (tool call {self.tool_call_id}) needs a person's approval of "
            f"operation {self.operation_id!r} with arguments {dict(self.arguments)!r}; nothing "
            f"was sent. Approve exactly this request: {self.operator_command}"
        )


def is_approval_payload(data: object) -> bool:
    """True when ``data`` is a payload :meth:`ApprovalRequest.to_json` made."""
    return isinstance(data, Mapping) and data.get("kind") == APPROVAL_KIND


def approval_command(fn: Any, operation_id: str) -> str:
    """Return the ``agent-effect-ops approve`` command for ``operation_id`` of ``fn``.

    A SQLite ledger is named by its path, any other by ``LEDGER_URL``, so no
    connection string lands in a payload a framework checkpoints.
    """
    target = ledger_reference(executor_of(fn).ledger)
    return (
        f"agent-effect-ops --db {target} approve {shlex.quote(operation_id)} "
        "--actor NAME --reason TEXT --evidence-reference REF"
    )


def approval_request(
    fn: Any, record: OperationRecord, *, tool: str, tool_call_id: str, run_id: str | None = None
) -> ApprovalRequest:
    """The :class:`ApprovalRequest` of ``record``, an operation of ``fn`` awaiting approval."""
    return ApprovalRequest(
        tool=tool,
        tool_call_id=tool_call_id,
        operation_id=record.operation_id,
        arguments=dict(record.arguments),
        fingerprint=record.fingerprint,
        operator_command=approval_command(fn, record.operation_id),
        reason=record.reason,
        run_id=run_id,
    )


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

    The decision lands only on that exact request: the ledger's record must
    have the fingerprint these arguments have (else
    :class:`OperationConflictError`, nothing written) and is written fenced on
    the state read, so a request that moved meanwhile is refused rather than
    decided unseen. A request still AWAITING_APPROVAL is approved (PREPARED:
    the next call sends it once) or denied (REJECTED: never sent). One the
    ledger already holds a decision for is returned unchanged: the ledger's
    word stands, so recording the same decisions twice writes once.
    :class:`OperationNotFoundError` when the ledger holds no such request.
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
    if record.status is not _AWAITING:
        return record
    seen = Seen(event_count=record.event_count, event_head=record.event_head.hex())
    if approved:
        return approve(
            ledger,
            request.operation_id,
            actor=actor,
            reason=reason,
            evidence_reference=evidence_reference,
            expires_in=expires_in,
            expected=seen,
        )
    return deny(
        ledger,
        request.operation_id,
        actor=actor,
        reason=reason,
        evidence_reference=evidence_reference,
        expected=seen,
    )
