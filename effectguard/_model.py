"""Statuses, probe results, call results and the records a ledger keeps."""

from __future__ import annotations

import dataclasses
import enum
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from effectguard._fingerprint import read_json

__all__ = [
    "EffectEvent",
    "EffectResult",
    "EffectStatus",
    "EventType",
    "LeaseOwner",
    "OperationRecord",
    "OutcomeProbeResult",
    "OverlapHolder",
    "ProbeStatus",
    "VerifyProblem",
    "VerifyReport",
    "frozen_builder",
]

T = TypeVar("T")


class EffectStatus(enum.StrEnum):
    """Where an operation stands.

    CONFIRMED and REJECTED are terminal and replayed to every later caller.
    QUARANTINED leaves only through an audited operator resolution, or when one
    of the operation's own handlers, past its deadline or its lease, returns an
    output that passes the postcondition (the provider's own acknowledgement).
    AWAITING_APPROVAL is a request recorded and never sent: a person's approval
    of exactly that request makes it PREPARED (sent by the next call), a denial
    REJECTED.
    """

    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    PREPARED = "PREPARED"
    DISPATCHED = "DISPATCHED"
    CONFIRMED = "CONFIRMED"
    REJECTED = "REJECTED"
    OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN"
    RECONCILING = "RECONCILING"
    QUARANTINED = "QUARANTINED"

    @property
    def terminal(self) -> bool:
        """True for CONFIRMED and REJECTED, which never change again."""
        return self in (EffectStatus.CONFIRMED, EffectStatus.REJECTED)

    @classmethod
    def parse(cls, name: str) -> EffectStatus:
        """Return the status called ``name``, in any case and with ``-`` for ``_``.

        Raises ``ValueError`` listing the valid names.
        """
        key = name.strip().upper().replace("-", "_")
        try:
            return cls[key]
        except KeyError:
            valid = ", ".join(status.value.lower() for status in cls)
            msg = f"unknown status {name!r}; expected one of: {valid}"
            raise ValueError(msg) from None


class ProbeStatus(enum.StrEnum):
    """What an outcome probe learned from the provider.

    NOT_COMMITTED must be authoritative and terminal: the earlier request can
    never commit later. A probe that cannot promise that returns UNKNOWN or PENDING.
    """

    COMMITTED = "COMMITTED"
    NOT_COMMITTED = "NOT_COMMITTED"
    PENDING = "PENDING"
    UNKNOWN = "UNKNOWN"


class EventType(enum.StrEnum):
    """The kinds of entries in an operation's hash-chained history."""

    #: A new operation recorded and dispatched in one commit (new -> DISPATCHED, attempt 1).
    CLAIMED = "claimed"
    #: A ledger written before effectguard 0.1.0 recorded a claim as PREPARED, then DISPATCHED.
    PREPARED = "prepared"
    DISPATCHED = "dispatched"
    CONFIRMED = "confirmed"
    REJECTED = "rejected"
    OUTCOME_UNKNOWN = "outcome_unknown"
    LEASE_EXPIRED = "lease_expired"
    OWNER_GONE = "owner_gone"
    RECONCILING = "reconciling"
    RETRY = "retry"
    NOT_SENT = "not_sent"
    QUARANTINED = "quarantined"
    LATE_RESULT = "late_result"
    OPERATOR_CONFIRMED = "operator_confirmed"
    OPERATOR_REJECTED = "operator_rejected"
    OPERATOR_RETRY_AUTHORIZED = "operator_retry_authorized"
    REPROBED = "reprobed"
    #: A request that needs a person's approval, recorded and not sent (new -> AWAITING_APPROVAL).
    APPROVAL_REQUESTED = "approval_requested"
    #: A person approved the exact request (AWAITING_APPROVAL -> PREPARED).
    OPERATOR_APPROVED = "operator_approved"
    #: A person denied it (AWAITING_APPROVAL -> REJECTED): it is never sent.
    OPERATOR_DENIED = "operator_denied"
    #: An approval ran out before a call used it (PREPARED -> AWAITING_APPROVAL).
    APPROVAL_EXPIRED = "approval_expired"


@dataclass(frozen=True, slots=True)
class OutcomeProbeResult:
    """The answer of a contract's outcome probe.

    ``output`` is what the caller receives when the probe finds the effect
    committed, so it should have the shape the handler returns.
    """

    status: ProbeStatus
    output: Any = None
    provider_operation_id: str | None = None
    evidence: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def committed(
        cls,
        output: Any = None,
        *,
        provider_operation_id: str | None = None,
        evidence: Mapping[str, Any] | None = None,
    ) -> OutcomeProbeResult:
        """The provider holds the effect; ``output`` stands in for the handler's return value."""
        return cls(ProbeStatus.COMMITTED, output, provider_operation_id, dict(evidence or {}))

    @classmethod
    def not_committed(cls, evidence: Mapping[str, Any] | None = None) -> OutcomeProbeResult:
        """The provider authoritatively holds no effect and never will for that request."""
        return cls(ProbeStatus.NOT_COMMITTED, evidence=dict(evidence or {}))

    @classmethod
    def pending(cls, evidence: Mapping[str, Any] | None = None) -> OutcomeProbeResult:
        """The provider is still processing the request."""
        return cls(ProbeStatus.PENDING, evidence=dict(evidence or {}))

    @classmethod
    def unknown(cls, evidence: Mapping[str, Any] | None = None) -> OutcomeProbeResult:
        """The evidence cannot settle whether the effect happened."""
        return cls(ProbeStatus.UNKNOWN, evidence=dict(evidence or {}))


@dataclass(frozen=True, slots=True)
class EffectResult(Generic[T]):
    """What one call of an effect learned, fresh or replayed.

    ``output`` is set only when ``status`` is CONFIRMED. ``replayed`` is True
    when the result came from the ledger without a dispatch in this call.
    ``handler_error`` is the exception the handler raised in this call's last
    attempt, if it raised: kept in memory only (never stored, None on a
    replay), so that an :class:`~effectguard.EffectNotConfirmed` can chain it.
    A fresh (not replayed) PREPARED result means the request provably was not
    sent (``reason`` says why): calling again with the same arguments sends it.
    """

    status: EffectStatus
    operation_id: str
    output: T | None = None
    provider_operation_id: str | None = None
    attempts: int = 0
    replayed: bool = False
    evidence: Mapping[str, Any] = field(default_factory=dict)
    reason: str | None = None
    handler_error: BaseException | None = field(default=None, compare=False, repr=False)

    @property
    def confirmed(self) -> bool:
        """True when the effect is known to have happened."""
        return self.status is EffectStatus.CONFIRMED


@dataclass(frozen=True, slots=True)
class LeaseOwner:
    """The process that holds, or held, a lease.

    ``host`` with ``boot_id`` and ``pid_namespace`` names one process table;
    ``pid`` with ``start_time`` names one process in it, so a reused pid is
    never mistaken for the owner.
    """

    host: str
    boot_id: str
    pid_namespace: str
    pid: int
    start_time: str

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form kept in a ledger."""
        return {
            "host": self.host,
            "boot_id": self.boot_id,
            "pid_namespace": self.pid_namespace,
            "pid": self.pid,
            "start_time": self.start_time,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LeaseOwner:
        """Rebuild an owner from :meth:`to_json` output."""
        return cls(
            host=str(data["host"]),
            boot_id=str(data["boot_id"]),
            pid_namespace=str(data["pid_namespace"]),
            pid=int(data["pid"]),
            start_time=str(data["start_time"]),
        )


@dataclass(frozen=True, slots=True)
class OverlapHolder:
    """A handler that passed its deadline, or lost its lease, and may still send."""

    token: str
    attempt: int
    owner: LeaseOwner

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form kept in a ledger."""
        return {"token": self.token, "attempt": self.attempt, "owner": self.owner.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OverlapHolder:
        """Rebuild a holder from :meth:`to_json` output."""
        return cls(
            token=str(data["token"]),
            attempt=int(data["attempt"]),
            owner=LeaseOwner.from_json(data["owner"]),
        )


@dataclass(frozen=True, slots=True)
class OperationRecord:
    """One operation as the ledger holds it.

    ``arguments`` are stored with redacted values replaced. ``output_json`` is the
    stored output's JSON text, or None when no output is recorded. ``lease_live``
    says whether the lease was unexpired by the ledger's clock when read.
    """

    operation_id: str
    contract: str
    contract_version: int
    fingerprint: str
    provider_key: str | None
    status: EffectStatus
    attempts: int
    attempt_budget: int
    arguments: Mapping[str, Any]
    output_json: str | None
    provider_operation_id: str | None
    reason: str | None
    evidence: Mapping[str, Any]
    lease_token: str | None
    lease_owner: LeaseOwner | None
    lease_expires_at: datetime | None
    lease_live: bool
    overlap: tuple[OverlapHolder, ...]
    created_at: datetime
    updated_at: datetime
    first_dispatched_at: datetime
    event_count: int
    event_head: bytes

    @property
    def output(self) -> Any:
        """The stored output decoded from JSON (None when none is stored)."""
        return None if self.output_json is None else read_json(self.output_json)

    @property
    def overlap_risk(self) -> bool:
        """True while some handler of this operation may still be sending."""
        return bool(self.overlap)


@dataclass(frozen=True, slots=True)
class EffectEvent:
    """One entry of an operation's history; ``hash`` links it to the entry before."""

    operation_id: str
    seq: int
    type: EventType
    from_status: EffectStatus | None
    to_status: EffectStatus
    attempt: int
    at: datetime
    evidence: Mapping[str, Any]
    hash: bytes
    #: What the write that appended this event left in its operation's row (see
    #: ``effectguard.ledger.committed.commitments``); empty on all but a write's first event,
    #: and on every event written before effectguard recorded them.
    commits: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class VerifyProblem:
    """One break in an operation's event chain."""

    operation_id: str
    seq: int | None
    problem: str


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The result of checking every operation's event chain."""

    operations_checked: int
    events_checked: int
    problems: tuple[VerifyProblem, ...]
    #: Operations with a row field no event committed to: written before
    #: effectguard recorded row commitments, so edits to that field go unseen.
    operations_uncovered: int = 0
    #: Claims in the ledger's anchor table, and the running hash over them.
    anchored: int = 0
    anchor_running: bytes = b""

    @property
    def ok(self) -> bool:
        """True when no chain is broken."""
        return not self.problems


def frozen_builder(cls: type[T]) -> Callable[..., T]:
    """A positional constructor of the frozen, slotted dataclass ``cls``, past its ``__init__``.

    The instance it returns is an ordinary ``cls``: frozen, compared and shown
    as any other. It is built in a mutable twin class with the same slots and
    then given its class, because a frozen dataclass's own ``__init__`` sets
    each field through ``object.__setattr__``, which made building records and
    results a tenth of a guarded call. Fields are taken in declaration order,
    every one given, no default applied and nothing checked: for values
    effectguard built itself.
    """
    names = tuple(item.name for item in dataclasses.fields(cls))  # type: ignore[arg-type]  # a dataclass, per the docstring
    if getattr(cls, "__slots__", None) != names:
        msg = f"{cls.__qualname__} must be a slotted dataclass to be built by frozen_builder"
        raise TypeError(msg)
    assignments = "".join(f"    self.{name} = {name}\n" for name in names) or "    pass\n"
    source = f"def __init__(self, {', '.join(names)}):\n{assignments}"
    namespace: dict[str, Any] = {}
    exec(source, namespace)  # noqa: S102 - a constructor written from the class's own field names
    body = {"__slots__": names, "__init__": namespace["__init__"]}
    bases = getattr(cls, "__orig_bases__", cls.__bases__)  # Generic[T], where cls is generic
    twin = types.new_class(f"_{cls.__name__}Builder", bases, exec_body=lambda ns: ns.update(body))

    def build(*values: Any) -> T:
        made = twin(*values)
        made.__class__ = cls
        return made  # type: ignore[no-any-return]  # its class is cls now

    build.__doc__ = f"A {cls.__qualname__} from its fields' values, in declaration order."
    return build
