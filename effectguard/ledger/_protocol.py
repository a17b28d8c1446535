"""The ledger protocol: the primitives every backend implements, and their write forms.

:class:`EffectLedger` is what the executor, the operator package and the CLIs
use: ``claim`` (insert with its claim event, or return the stored record),
fenced ``transition`` (written only while the caller's :class:`Expect` still
holds), ``renew``, reads, ``verify``. A backend may also offer async forms of
the per-call primitives; :func:`async_ledger` says whether it does.
"""

from __future__ import annotations

import enum
import re
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, cast, runtime_checkable

from effectguard._model import (
    EffectEvent,
    EffectStatus,
    EventType,
    LeaseOwner,
    OperationRecord,
    OverlapHolder,
    VerifyReport,
)
from effectguard.errors import InvalidRequestError
from effectguard.ledger._chain import AnchorHead

if TYPE_CHECKING:
    from effectguard._model import OperationRecord
    from effectguard.ledger._retention import PruneReport, Tombstone

__all__ = [
    "MIN_HEAD_PREFIX",
    "UNSET",
    "AsyncLedger",
    "Changes",
    "EffectLedger",
    "EventDraft",
    "Expect",
    "Lease",
    "NewOperation",
    "Prunable",
    "ReplayView",
    "Seen",
    "Unset",
    "Versioned",
    "announce_pruned",
    "async_ledger",
    "check_limit",
    "claims_first",
    "describe_mismatch",
    "read_commitments",
    "to_confirmed",
    "watch_prunes",
]


# ---- The protocol and its write primitives ----


class Unset(enum.Enum):
    """The type of :data:`UNSET`."""

    UNSET = "UNSET"


#: "Leave this field as it is" in :class:`Changes` and "do not check" in :class:`Expect`.
UNSET = Unset.UNSET


@dataclass(frozen=True, slots=True)
class Lease:
    """The right to write an operation: held by ``token`` until ``seconds`` pass unrenewed."""

    token: str
    owner: LeaseOwner
    seconds: float


@dataclass(frozen=True, slots=True)
class EventDraft:
    """An event to append; the ledger assigns its sequence number, time and hash."""

    type: EventType
    from_status: EffectStatus | None
    to_status: EffectStatus
    attempt: int
    evidence: Mapping[str, Any] = field(default_factory=dict)


class ReplayView(NamedTuple):
    """What replaying a settled operation needs of its row, read without building its record.

    ``commits`` is the JSON text of the commitments of the operation's last
    event (its confirmation, almost always), which the stored output is
    checked against before it is returned. A ledger's
    ``replay_view(operation_id)`` returns one of these, or None when there is
    no such operation. The executor uses it (or ``replay_view_async``, from
    an event loop) for the read before the claim of a call nobody watches
    whole, when the class that defines it also defines ``get_checked`` and
    the ledger's own ``get``; anything that is not a plain replay is then
    read again, whole.
    """

    operation_id: str
    status: EffectStatus
    fingerprint: str
    attempts: int
    output_json: str | None
    provider_operation_id: str | None
    reason: str | None
    evidence: dict[str, Any]
    commits: str | None


@dataclass(frozen=True, slots=True)
class NewOperation:
    """An operation as first claimed: DISPATCHED, attempt 1, under ``lease``.

    ``arguments`` must already have redacted values replaced. ``arguments_json``,
    when given, is their canonical JSON (the ledger stores it rather than
    encoding them again); ``fingerprinted`` says it is also the very text the
    fingerprint hashed (nothing was redacted), so the fingerprint commits to it.
    With ``awaiting_approval`` the claim records the request unsent instead:
    AWAITING_APPROVAL, attempt 0, no lease, in one
    :attr:`~effectguard.EventType.APPROVAL_REQUESTED` event.
    """

    operation_id: str
    contract: str
    contract_version: int
    fingerprint: str
    provider_key: str | None
    arguments: Mapping[str, Any]
    attempt_budget: int
    lease: Lease
    arguments_json: str | None = None
    fingerprinted: bool = False
    awaiting_approval: bool = False


@dataclass(frozen=True, slots=True)
class Expect:
    """What the row must still look like for a write to apply.

    ``lease_token`` must equal the stored token (None: no lease); this is the
    fence. ``lease_expired=True`` requires the lease to be absent or expired by
    the ledger's clock. ``event_count`` pins the row to the version the writer read.
    """

    statuses: frozenset[EffectStatus] | None = None
    lease_token: str | Unset | None = UNSET
    lease_expired: bool = False
    event_count: int | None = None


@dataclass(frozen=True, slots=True)
class Changes:
    """The new values of a row; :data:`UNSET` fields keep their value.

    ``lease`` set to a :class:`Lease` installs that token and owner with expiry
    ``now + seconds``; None releases the lease.
    """

    status: EffectStatus
    lease: Lease | Unset | None = UNSET
    attempts: int | Unset = UNSET
    attempt_budget: int | Unset = UNSET
    output_json: str | Unset | None = UNSET
    provider_operation_id: str | Unset | None = UNSET
    reason: str | Unset | None = UNSET
    evidence: Mapping[str, Any] | Unset = UNSET
    overlap: tuple[OverlapHolder, ...] | Unset = UNSET


@runtime_checkable
class EffectLedger(Protocol):
    """Durable storage of operations and their hash-chained events.

    Every write is atomic and durable when it returns: a row change and the
    events describing it commit together or not at all. A write whose
    :class:`Expect` no longer holds raises :class:`~effectguard.errors.FencedWriteError`
    and changes nothing. Driver errors surface as
    :class:`~effectguard.errors.LedgerUnavailableError` (or a subclass).
    """

    def claim(
        self, operation: NewOperation, *, now: float | None = None
    ) -> tuple[OperationRecord, bool]:
        """Insert ``operation`` with its claim event in one commit, or return the stored record.

        The claim event (:attr:`~effectguard.EventType.CLAIMED`: new to
        DISPATCHED, attempt 1) commits to the row's identity, budget and lease.
        Returns ``(record, True)`` when this call created it (the caller holds
        the lease, and the record is durable before it returns), else
        ``(existing record, False)`` with nothing written. An id that was
        pruned raises :class:`~effectguard.errors.EffectPruned` for the same
        request and :class:`~effectguard.errors.OperationConflictError` for
        another one, with nothing written.
        """
        ...

    def transition(
        self,
        operation_id: str,
        expect: Expect,
        changes: Changes,
        events: Sequence[EventDraft],
        *,
        now: float | None = None,
        known: OperationRecord | None = None,
    ) -> OperationRecord:
        """Apply ``changes`` and append ``events`` in one commit if ``expect`` holds.

        ``known`` is the record as the caller last received it from this
        ledger: a hint that lets a backend write without reading the row
        first. The write is fenced against the stored row either way; a stale
        hint costs a read, never a wrong write. Raises ``OperationNotFoundError``
        for an unknown id and ``FencedWriteError`` when the row no longer
        matches; in both cases nothing is written.
        """
        ...

    def renew(
        self, operation_id: str, lease_token: str, seconds: float, *, now: float | None = None
    ) -> None:
        """Extend the lease held by ``lease_token`` to ``now + seconds``.

        Raises ``FencedWriteError`` when that token no longer holds the lease.
        """
        ...

    def get(self, operation_id: str, *, now: float | None = None) -> OperationRecord | None:
        """Return the operation, or None; a plain read that takes no write lock.

        An id no operation can have (only whitespace, a NUL character, a lone
        surrogate) is an :class:`~effectguard.errors.InvalidRequestError`.
        """
        ...

    def list_operations(
        self,
        *,
        status: EffectStatus | None = None,
        contract: str | None = None,
        limit: int = 100,
    ) -> list[OperationRecord]:
        """Return up to ``limit`` operations, most recently updated first."""
        ...

    def events(self, operation_id: str) -> list[EffectEvent]:
        """Return the operation's events in order (empty for an unknown id).

        An id no operation can have is an :class:`~effectguard.errors.InvalidRequestError`.
        """
        ...

    def verify(self, *, anchor: AnchorHead | None = None) -> VerifyReport:
        """Check every chain, every row against its events, and the claims anchor.

        Reports an edited, reordered or deleted event; a row field that differs
        from what the latest event setting it committed to; an operation that
        was claimed but whose row is gone; and a broken anchor. With ``anchor``
        (a head exported earlier, kept outside the ledger) it also reports an
        anchor that no longer extends it: deletions that rewrote the anchor too.
        """
        ...

    def confirm(
        self,
        operation_id: str,
        *,
        output: Any,
        provider_operation_id: str | None,
        actor: str,
        reason: str,
        evidence_reference: str,
        expected: Seen | None = None,
    ) -> OperationRecord:
        """Record an operator's finding that the effect happened, with ``output`` to replay.

        ``expected`` (in every resolution) is the state the decision was made
        on; the resolution is refused with
        :class:`~effectguard.errors.OperationChangedError` when the operation
        is no longer that state, or changes before the write lands.
        """
        ...

    def reject(
        self,
        operation_id: str,
        *,
        actor: str,
        reason: str,
        evidence_reference: str,
        expected: Seen | None = None,
    ) -> OperationRecord:
        """Record an operator's finding that the effect did not and will not happen."""
        ...

    def authorize_retry(
        self,
        operation_id: str,
        *,
        actor: str,
        reason: str,
        evidence_reference: str,
        expected: Seen | None = None,
    ) -> OperationRecord:
        """Allow exactly one more dispatch, with the same provider key, on the next execute."""
        ...

    def close(self) -> None:
        """Release connections; the ledger is unusable afterwards."""
        ...


@runtime_checkable
class Prunable(Protocol):
    """A ledger that can prune settled operations to tombstones (both backends can)."""

    def prune(
        self,
        *,
        older_than: float,
        statuses: Iterable[EffectStatus] = ...,
        archive: str | None = None,
        dry_run: bool = False,
        force: bool = False,
        key_retention: Mapping[str, float] | None = None,
        now: float | None = None,
    ) -> PruneReport:
        """Prune CONFIRMED/REJECTED operations last changed over ``older_than`` seconds ago.

        Each leaves a tombstone: its id then never dispatches again (the same
        request raises :class:`~effectguard.errors.EffectPruned`, another one
        :class:`~effectguard.errors.OperationConflictError`), and ``verify``
        still checks the claims anchor through it. A non-terminal status in
        ``statuses`` is an :class:`~effectguard.errors.InvalidRequestError`
        and nothing is pruned. An operation whose contract is in
        ``key_retention`` (contract name -> the provider's key retention in
        seconds) and was first dispatched more recently than that is kept,
        unless ``force``. ``archive`` names a new file that receives every
        pruned record, its tombstone and its events (with their hashed
        documents) as JSON lines, durable before the prune commits.
        ``dry_run`` reports what would be pruned and writes nothing. Prunes in
        short batches, each its own transaction.
        """
        ...

    def tombstone(self, operation_id: str) -> Tombstone | None:
        """The tombstone a pruned ``operation_id`` left, or None if it was never pruned."""
        ...

    def tombstones(self) -> dict[str, Tombstone]:
        """Every tombstone, by operation id."""
        ...


_WATCHERS: weakref.WeakSet[Any] = weakref.WeakSet()


_WATCHERS_LOCK = threading.Lock()


def watch_prunes(watcher: Any) -> None:
    """Call ``watcher.forget(operation_id)`` for every operation pruned in this process."""
    with _WATCHERS_LOCK:
        _WATCHERS.add(watcher)


def announce_pruned(operation_ids: Iterable[str]) -> None:
    """Tell every watcher of this process that ``operation_ids`` were pruned (replay caches)."""
    with _WATCHERS_LOCK:
        watchers = list(_WATCHERS)
    for operation_id in operation_ids:
        for watcher in watchers:
            watcher.forget(operation_id)


class Versioned(Protocol):
    """What :func:`describe_mismatch` reads of a row: an OperationRecord, or less."""

    @property
    def status(self) -> EffectStatus:
        """The operation's status."""
        ...

    @property
    def lease_token(self) -> str | None:
        """The token of the lease on it, if any."""
        ...

    @property
    def event_count(self) -> int:
        """How many events it has."""
        ...


@dataclass(frozen=True, slots=True)
class Seen:
    """The state an operator decided on: the operation's event count, its chain head, or both.

    ``agent-effect-ops show`` prints both; the console's forms carry both. A
    head may be given as a prefix of at least :data:`MIN_HEAD_PREFIX` hex
    digits of the one ``show`` prints.
    """

    event_count: int | None = None
    event_head: str | None = None

    def __post_init__(self) -> None:
        count = self.event_count
        if count is not None and (
            isinstance(count, bool) or not isinstance(count, int) or count < 1
        ):
            msg = f"the expected event count must be a whole number of at least 1, not {count!r}"
            raise InvalidRequestError(msg)
        head = self.event_head
        if head is not None and (
            not isinstance(head, str)
            or len(head) < MIN_HEAD_PREFIX
            or len(head) > _HEAD_HEX
            or not _HEX.fullmatch(head)
        ):
            shown = (
                repr(head)
                if not isinstance(head, str) or len(head) <= _HEAD_HEX
                else (f"{head[:MIN_HEAD_PREFIX]!r}... ({len(head)} characters)")
            )
            msg = (
                f"the expected chain head must be {MIN_HEAD_PREFIX} to {_HEAD_HEX} hex digits "
                f"(as show prints it), not {shown}"
            )
            raise InvalidRequestError(msg)

    def matches(self, record: OperationRecord) -> bool:
        """Whether ``record`` is still the state this describes."""
        if self.event_count is not None and record.event_count != self.event_count:
            return False
        return self.event_head is None or record.event_head.hex().startswith(
            self.event_head.lower()
        )

    @classmethod
    def of(cls, record: OperationRecord) -> Seen:
        """What an operator looking at ``record`` saw."""
        return cls(record.event_count, record.event_head.hex())


#: The shortest chain-head prefix an expectation may give (64 bits).
MIN_HEAD_PREFIX = 16
_HEAD_HEX = 64
_HEX = re.compile(r"[0-9a-fA-F]+")


def claims_first(ledger: object) -> bool:
    """Whether a call should claim an operation before reading it (the ledger's ``claims_first``).

    A ledger whose ``claim`` costs no more than a read, and returns the row it
    finds without writing anything when the operation exists, sets
    ``claims_first = True``: a new operation then takes one round trip fewer,
    and an existing one is read by the claim. Every other ledger is read first.
    """
    return getattr(ledger, "claims_first", False) is True


def read_commitments(ledger: EffectLedger, operation_id: str) -> list[Mapping[str, Any]]:
    """The commitments of ``operation_id``'s events, oldest first, leaving out empty ones.

    The same mappings as the events' ``commits``. A ledger that can read them
    without decoding whole events offers ``commitments(operation_id)`` (both
    built-in ledgers do); any other ledger's events are read whole.
    """
    own = getattr(ledger, "commitments", None)
    if callable(own):
        found: list[Mapping[str, Any]] = own(operation_id)
        return found
    return [event.commits for event in ledger.events(operation_id) if event.commits]


_MAX_LIMIT = 2**63 - 1  # the largest integer SQLite and PostgreSQL store
_SHOWN = 40


def check_limit(limit: object) -> None:
    """Refuse a ``list_operations`` limit that is not a whole number >= 1, naming it."""
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= _MAX_LIMIT:
        shown = repr(limit) if len(repr(limit)) <= _SHOWN else f"{repr(limit)[:_SHOWN]}..."
        msg = f"limit must be a whole number from 1 to {_MAX_LIMIT}, not {shown}"
        raise InvalidRequestError(msg)


def describe_mismatch(record: Versioned, expect: Expect, *, lease_expired: bool) -> str | None:
    """Return why ``record`` fails ``expect`` (None when it matches).

    ``lease_expired`` is whether the record's lease is absent or expired at the
    ledger's current time.
    """
    if expect.statuses is not None and record.status not in expect.statuses:
        wanted = "/".join(sorted(status.value for status in expect.statuses))
        return f"status is {record.status.value}, expected {wanted}"
    if expect.lease_token is not UNSET and record.lease_token != expect.lease_token:
        return "lease token is not the writer's (the lease was taken over or released)"
    if expect.lease_expired and not lease_expired:
        return "lease is still live"
    if expect.event_count is not None and record.event_count != expect.event_count:
        return "operation changed since it was read"
    return None


# ---- The async forms of the calls every guarded call makes ----

_FORMS = (("get", "get_async"), ("claim", "claim_async"), ("transition", "transition_async"))


class AsyncLedger(Protocol):
    """The async forms of a ledger's read, claim and transition, awaited on a loop.

    Each returns what its sync form returns, with the same guarantees (a
    write returns only once it is durable), and raises what it raises.
    Cancelling the await does not withdraw a write: it is committed or not
    as if its caller had died.
    """

    async def get_async(
        self, operation_id: str, *, now: float | None = None
    ) -> OperationRecord | None:
        """See :meth:`~effectguard.ledger.protocol.EffectLedger.get`."""
        ...

    async def claim_async(
        self, operation: NewOperation, *, now: float | None = None
    ) -> tuple[OperationRecord, bool]:
        """See :meth:`EffectLedger.claim`."""
        ...

    async def transition_async(
        self,
        operation_id: str,
        expect: Expect,
        changes: Changes,
        events: Sequence[EventDraft],
        *,
        now: float | None = None,
        known: OperationRecord | None = None,
    ) -> OperationRecord:
        """See :meth:`~effectguard.ledger.protocol.EffectLedger.transition`."""
        ...


def async_ledger(ledger: object) -> AsyncLedger | None:
    """``ledger`` as :class:`AsyncLedger` when one class defines both forms of each call.

    None otherwise: its calls then run in worker threads, through their sync forms.
    """
    kind = type(ledger)
    for sync, asynchronous in _FORMS:
        defines = _defined_by(kind, sync)
        if defines is None or defines is not _defined_by(kind, asynchronous):
            return None
    return cast("AsyncLedger", ledger)


def _defined_by(kind: type, name: str) -> type | None:
    return next((owner for owner in kind.__mro__ if name in vars(owner)), None)


# ---- The move to CONFIRMED, built once ----


def to_confirmed(
    from_status: EffectStatus,
    attempt: int,
    *,
    output_json: str | None,
    provider_operation_id: str | None,
    reason: str | None,
    evidence: Mapping[str, Any],
    event: EventType = EventType.CONFIRMED,
) -> tuple[Changes, EventDraft]:
    """Return the change and the event that move an operation to CONFIRMED.

    The move always stores the output, the provider's id, the reason and the
    evidence given (the previous ones never linger on a confirmed record),
    releases the lease, and clears the overlap risk: once the effect is
    confirmed, what an earlier handler still does is evidence only (it is
    recorded as a late result and never changes the output). ``event`` names
    who confirmed it (the executor, a late handler, an operator); the event
    carries the same evidence as the record.
    """
    changes = Changes(
        EffectStatus.CONFIRMED,
        lease=None,
        output_json=output_json,
        provider_operation_id=provider_operation_id,
        reason=reason,
        evidence=evidence,
        overlap=(),
    )
    draft = EventDraft(event, from_status, EffectStatus.CONFIRMED, attempt, evidence)
    return changes, draft
