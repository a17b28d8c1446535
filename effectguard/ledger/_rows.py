"""The row schema, once: the columns both tables hold, how values are stored, and the row mapper.

Every read and listing turns a stored row into an
:class:`~effectguard.ledger.OperationRecord` here, and every write takes its
column lists from here, so the two backends cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from effectguard._fingerprint import canonical_json, read_json
from effectguard._model import (
    EffectEvent,
    EffectStatus,
    EventType,
    LeaseOwner,
    OperationRecord,
    OverlapHolder,
    frozen_builder,
)
from effectguard.errors import InvalidRequestError
from effectguard.ledger import _chain as chain
from effectguard.ledger import _chain as committed
from effectguard.ledger._protocol import UNSET, Changes, EventDraft, NewOperation

__all__ = [
    "CHUNK",
    "EVENT_COLUMNS",
    "OPERATION_COLUMNS",
    "POSTGRES",
    "READER_ORDER",
    "SQLITE",
    "STATUSES",
    "Column",
    "Convert",
    "Kind",
    "Loadable",
    "Rows",
    "Version",
    "as_utc",
    "chunks",
    "dumper",
    "duplicate_error",
    "filled",
    "loader",
    "record_reader",
    "same_micros",
    "status",
]


# ---- How each kind of column value is stored and read back ----


class Kind(enum.Enum):
    """What a column holds, which decides how its value is stored and read back."""

    VALUE = "value"  # text or integer, stored as it is
    STATUS = "status"  # an EffectStatus (or None), by its value
    EVENT_TYPE = "event_type"  # an EventType, by its value
    DOCUMENT = "document"  # a JSON object, as canonical JSON text
    JSON_TEXT = "json_text"  # JSON text, stored and returned as the very same text
    EVIDENCE = "evidence"  # a JSON object; empty is stored as NULL
    OWNER = "owner"  # a LeaseOwner (or None), as canonical JSON text
    OVERLAP = "overlap"  # a tuple of OverlapHolders; empty is stored as NULL
    TIME = "time"  # an aware datetime (or None): microseconds, or timestamptz
    BYTES = "bytes"  # a hash


# Rows are read and written on every call: these skip Enum.__call__ and the
# reparsing of the one lease owner a process writes again and again.
#: Each EffectStatus by its stored value.
STATUSES = {status.value: status for status in EffectStatus}


_EVENT_TYPES = {kind.value: kind for kind in EventType}


def status(text: str) -> EffectStatus:
    """The :class:`EffectStatus` stored as ``text``."""
    # An unknown name still raises EffectStatus's own ValueError.
    return STATUSES.get(text) or EffectStatus(text)


def _event_type(text: str) -> EventType:
    return _EVENT_TYPES.get(text) or EventType(text)


@functools.lru_cache(maxsize=256)
def _owner(text: str) -> LeaseOwner:
    return LeaseOwner.from_json(read_json(text))


@functools.lru_cache(maxsize=256)
def _owner_text(owner: LeaseOwner) -> str:
    return canonical_json(owner.to_json())


def same_micros(micros: int) -> int:
    """A time stored as it is given: whole microseconds since the epoch (SQLite)."""
    return micros


def as_utc(value: datetime) -> datetime:
    """An aware datetime read back in UTC (PostgreSQL's ``timestamptz``)."""
    return value if value.tzinfo is UTC else value.astimezone(UTC)


#: How one value is converted; None: stored or read as it is.
Convert = Callable[[Any], Any] | None


def loader(kind: Kind, load_time: Callable[[Any], datetime]) -> Convert:
    """How a stored value of ``kind`` becomes a record's (None: as it is)."""
    return {
        Kind.VALUE: None,
        Kind.JSON_TEXT: None,
        Kind.STATUS: lambda text: None if text is None else status(text),
        Kind.EVENT_TYPE: _event_type,
        Kind.DOCUMENT: read_json,
        Kind.EVIDENCE: lambda text: (None if text is None else read_json(text)) or {},
        Kind.OWNER: lambda text: None if text is None else _owner(text),
        Kind.OVERLAP: lambda text: tuple(
            OverlapHolder.from_json(item) for item in (read_json(text) if text else ())
        ),
        Kind.TIME: lambda value: None if value is None else load_time(value),
        Kind.BYTES: bytes,
    }[kind]


def dumper(kind: Kind, store_time: Callable[[int], Any]) -> Convert:
    """How a record's value of ``kind`` is stored (None: as it is); a time may be micros."""
    return {
        Kind.VALUE: None,
        Kind.JSON_TEXT: None,
        Kind.STATUS: lambda status: None if status is None else status.value,
        Kind.EVENT_TYPE: lambda kind: kind.value,
        Kind.DOCUMENT: canonical_json,
        Kind.EVIDENCE: lambda value: canonical_json(dict(value)) if value else None,
        Kind.OWNER: lambda owner: None if owner is None else _owner_text(owner),
        Kind.OVERLAP: lambda holders: (
            canonical_json([holder.to_json() for holder in holders]) if holders else None
        ),
        Kind.TIME: lambda value: (
            value
            if value is None or (type(value) is int and store_time is same_micros)
            else store_time(value if type(value) is int else chain.to_micros(value))
        ),
        Kind.BYTES: bytes,
    }[kind]


# ---- A stored row read back as an OperationRecord ----

#: The columns :func:`record_reader` unpacks, in order, with their kinds (the schema checks them).
READER_ORDER = (
    ("operation_id", Kind.VALUE), ("contract", Kind.VALUE), ("contract_version", Kind.VALUE),
    ("fingerprint", Kind.VALUE), ("provider_key", Kind.VALUE), ("status", Kind.STATUS),
    ("attempts", Kind.VALUE), ("attempt_budget", Kind.VALUE), ("arguments", Kind.DOCUMENT),
    ("output_json", Kind.JSON_TEXT), ("provider_operation_id", Kind.VALUE),
    ("reason", Kind.VALUE), ("evidence", Kind.EVIDENCE), ("lease_token", Kind.VALUE),
    ("lease_owner", Kind.OWNER), ("lease_expires_at", Kind.TIME), ("overlap", Kind.OVERLAP),
    ("created_at", Kind.TIME), ("updated_at", Kind.TIME), ("first_dispatched_at", Kind.TIME),
    ("event_count", Kind.VALUE), ("event_head", Kind.BYTES),
)  # fmt: skip


#: An OperationRecord from its fields' values, in field order, exactly as given.
build_record = frozen_builder(OperationRecord)


def filled(values: Iterable[Any]) -> OperationRecord:
    """Return the record whose fields are ``values``, in field order, exactly as given."""
    return build_record(*values)


def owner_text(owner: LeaseOwner | None) -> str | None:
    """A lease owner as stored: canonical JSON, computed once per owner."""
    return None if owner is None else _owner_text(owner)


def overlap_text(holders: Sequence[OverlapHolder]) -> str | None:
    """Overlap holders as stored: canonical JSON, None for none."""
    return canonical_json([holder.to_json() for holder in holders]) if holders else None


def record_reader(
    load_time: Callable[[Any], datetime],
) -> Callable[[Sequence[Any], Any], OperationRecord]:
    """Return the row-to-record conversion, spelled out column by column.

    The record has each column's :func:`~effectguard.ledger.values.loader`
    applied, and its lease judged live when the stored expiry is after
    ``now`` (in the same storage form). Written out rather than looped over
    the loaders because listing a thousand operations spends most of its
    time here.
    """
    load_owner = loader(Kind.OWNER, load_time)
    load_overlap = loader(Kind.OVERLAP, load_time)
    if load_owner is None or load_overlap is None:
        msg = "a lease owner and an overlap are always converted when read"
        raise TypeError(msg)
    loads = read_json

    def read(row: Sequence[Any], now: Any) -> OperationRecord:
        (
            operation_id, contract, contract_version, fingerprint, provider_key, stored_status,
            attempts, attempt_budget, arguments, output_json, provider_operation_id, reason,
            evidence, lease_token, lease_owner, lease_expires, overlap, created, updated,
            first_dispatched, event_count, event_head,
        ) = row  # fmt: skip
        created_at = load_time(created)
        return build_record(
            operation_id,
            contract,
            contract_version,
            fingerprint,
            provider_key,
            STATUSES.get(stored_status) or status(stored_status),
            attempts,
            attempt_budget,
            loads(arguments),
            output_json,
            provider_operation_id,
            reason,
            (None if evidence is None else loads(evidence)) or {},
            lease_token,
            None if lease_owner is None else load_owner(lease_owner),
            None if lease_expires is None else load_time(lease_expires),
            lease_token is not None and lease_expires is not None and lease_expires > now,
            () if overlap is None else load_overlap(overlap),
            created_at,
            created_at if updated == created else load_time(updated),
            created_at if first_dispatched == created else load_time(first_dispatched),
            event_count,
            bytes(event_head),
        )

    return read


# ---- The row schema, once: column lists and the row mapper ----

_JSON_KINDS = frozenset({Kind.DOCUMENT, Kind.JSON_TEXT, Kind.EVIDENCE, Kind.OWNER, Kind.OVERLAP})


@dataclass(frozen=True, slots=True)
class Column:
    """One column: the record field it holds, its kind, and its name in each backend."""

    field: str
    kind: Kind
    sqlite: str
    postgres: str

    def name_in(self, backend: str) -> str:
        """The column's name in ``backend`` ("sqlite" or "postgres")."""
        return self.sqlite if backend == "sqlite" else self.postgres

    @property
    def is_json(self) -> bool:
        """Whether the column holds JSON text (PostgreSQL declares it ``json``)."""
        return self.kind in _JSON_KINDS


def _column(field: str, kind: Kind = Kind.VALUE, name: str | None = None) -> Column:
    """A column called ``name`` (default ``field``); a time is ``*_us`` / ``*_at``."""
    if kind is Kind.TIME:
        stem = (name or field).removesuffix("_at")
        return Column(field, kind, f"{stem}_us", field if name is None else name)
    return Column(field, kind, name or field, name or field)


#: The operations table, in ``OperationRecord`` field order (``lease_live`` is computed on read).
OPERATION_COLUMNS: tuple[Column, ...] = (
    _column("operation_id"),
    _column("contract"),
    _column("contract_version"),
    _column("fingerprint"),
    _column("provider_key"),
    _column("status", Kind.STATUS),
    _column("attempts"),
    _column("attempt_budget"),
    _column("arguments", Kind.DOCUMENT),
    _column("output_json", Kind.JSON_TEXT, "output"),
    _column("provider_operation_id"),
    _column("reason"),
    _column("evidence", Kind.EVIDENCE),
    _column("lease_token"),
    _column("lease_owner", Kind.OWNER),
    _column("lease_expires_at", Kind.TIME),
    _column("overlap", Kind.OVERLAP),
    _column("created_at", Kind.TIME),
    _column("updated_at", Kind.TIME),
    _column("first_dispatched_at", Kind.TIME),
    _column("event_count"),
    _column("event_head", Kind.BYTES),
)


#: The events table, in ``EffectEvent`` field order.
EVENT_COLUMNS: tuple[Column, ...] = (
    _column("operation_id"),
    _column("seq"),
    _column("type", Kind.EVENT_TYPE),
    _column("from_status", Kind.STATUS),
    _column("to_status", Kind.STATUS),
    _column("attempt"),
    Column("at", Kind.TIME, "at_us", "at"),
    _column("evidence", Kind.EVIDENCE),
    _column("hash", Kind.BYTES),
    _column("commits", Kind.EVIDENCE),
)


_RECORD_FIELDS = tuple(field.name for field in dataclasses.fields(OperationRecord))


_LIVE_AT = _RECORD_FIELDS.index("lease_live")


_EVENT_FIELDS = tuple(field.name for field in dataclasses.fields(EffectEvent))


# The mapper builds records and events positionally, so the column lists must
# follow their field order; checked once, at import, rather than trusted.
if (
    tuple(c.field for c in OPERATION_COLUMNS)
    != tuple(name for name in _RECORD_FIELDS if name != "lease_live")
    or tuple(c.field for c in EVENT_COLUMNS) != _EVENT_FIELDS
):
    _msg = "ledger schema columns are out of step with OperationRecord / EffectEvent fields"
    raise TypeError(_msg)


# Where an unreadable event's identity is salvaged from.
_EVENT_ID, _EVENT_SEQ, _EVENT_HASH = (
    _EVENT_FIELDS.index(name) for name in ("operation_id", "seq", "hash")
)


if tuple((c.field, c.kind) for c in OPERATION_COLUMNS) != READER_ORDER or _RECORD_FIELDS.index(
    "lease_live"
) != READER_ORDER.index(("overlap", Kind.OVERLAP)):
    _msg = "ledger schema columns are out of step with the record reader"
    raise TypeError(_msg)


class Version(NamedTuple):
    """What a fenced write checks of a row: its status, lease and event count."""

    status: EffectStatus
    lease_token: str | None
    lease_live: bool
    event_count: int


#: The one event of every claim: a new operation recorded and dispatched in one commit.
CLAIM = EventDraft(EventType.CLAIMED, None, EffectStatus.DISPATCHED, 1)
#: The one event of a request recorded to wait for a person's approval, unsent.
AWAITING = EventDraft(EventType.APPROVAL_REQUESTED, None, EffectStatus.AWAITING_APPROVAL, 0)
#: The reason an operation waiting for approval carries.
APPROVAL_REASON = "waiting for a person's approval of this exact request; nothing was sent"


class Rows:
    """One backend's rows: column names in order, and rows to and from records and events.

    A time ``now`` passed in is in the backend's storage form (microseconds, or
    an aware datetime); ``now_us`` is always microseconds since the epoch.
    """

    def __init__(
        self,
        backend: str,
        *,
        store_time: Callable[[int], Any],
        load_time: Callable[[Any], datetime],
    ) -> None:
        self.backend = backend
        #: The operations table's column names, in the order of every row.
        self.operation_columns = tuple(c.name_in(backend) for c in OPERATION_COLUMNS)
        #: The events table's column names, in the order of every event row.
        self.event_columns = tuple(c.name_in(backend) for c in EVENT_COLUMNS)
        self.store_time = store_time
        self._by_field = {c.field: c.name_in(backend) for c in OPERATION_COLUMNS}
        self._load = tuple(loader(c.kind, load_time) for c in OPERATION_COLUMNS)
        self._read = record_reader(load_time)
        self._dump = tuple(dumper(c.kind, store_time) for c in OPERATION_COLUMNS)
        self._dump_by_name = dict(zip(self.operation_columns, self._dump, strict=True))
        # Each column's name, the record field it stores and how: worked out once, not per claim.
        self._storing = tuple(
            (c.name_in(backend), c.field, dump)
            for c, dump in zip(OPERATION_COLUMNS, self._dump, strict=True)
        )
        self._load_by_name = dict(zip(self.operation_columns, self._load, strict=True))
        self._load_event = tuple(loader(c.kind, load_time) for c in EVENT_COLUMNS)
        self._dump_event = tuple(dumper(c.kind, store_time) for c in EVENT_COLUMNS)
        fields = [c.field for c in OPERATION_COLUMNS]
        self._status, self._token, self._expires, self._count = (
            fields.index(name)
            for name in ("status", "lease_token", "lease_expires_at", "event_count")
        )

    def __repr__(self) -> str:
        return f"Rows({self.backend!r})"

    def name(self, field: str) -> str:
        """The column holding the record field ``field``."""
        return self._by_field[field]

    # -- reading -----------------------------------------------------------------------

    def version(self, row: Sequence[Any], now: Any) -> Version:
        """Return what a fenced write checks of operation ``row``, its lease judged at ``now``."""
        token, expires = row[self._token], row[self._expires]
        return Version(
            status(row[self._status]),
            token,
            token is not None and expires is not None and expires > now,
            row[self._count],
        )

    def record(self, row: Sequence[Any], now: Any) -> OperationRecord:
        """Return the operation in ``row``, its lease judged live or not at ``now``."""
        return self._read(row, now)

    def decoded(self, row: Sequence[Any]) -> list[Any]:
        """Return the record's values of operation ``row``, in column order."""
        return [
            value if load is None else load(value)
            for load, value in zip(self._load, row, strict=True)
        ]

    def decode(self, name: str, value: Any) -> Any:
        """Return the record's value of column ``name`` stored as ``value``."""
        load = self._load_by_name[name]
        return value if load is None else load(value)

    @staticmethod
    def assembled(
        values: Sequence[Any], token: str | None, expires: Any, now: Any
    ) -> OperationRecord:
        """Return the record of decoded ``values``, the lease judged live at ``now``."""
        live = token is not None and expires is not None and expires > now
        return filled(itertools.chain(values[:_LIVE_AT], (live,), values[_LIVE_AT:]))

    def event(self, row: Sequence[Any]) -> EffectEvent:
        """Return the event in ``row``."""
        return EffectEvent(
            *[
                value if load is None else load(value)
                for load, value in zip(self._load_event, row, strict=True)
            ]
        )

    def read_event(self, row: Sequence[Any]) -> EffectEvent | chain.UnreadableEvent:
        """Return the event in ``row``, or, when its columns no longer parse, why not."""
        try:
            return self.event(row)
        except Exception as exc:  # noqa: BLE001 - any edit that breaks parsing is a finding, not a crash
            try:
                seq = int(row[_EVENT_SEQ])
            except (TypeError, ValueError):
                seq = -1
            stored = row[_EVENT_HASH]
            return chain.UnreadableEvent(
                str(row[_EVENT_ID]), seq, bytes(stored) if stored is not None else b"", f"{exc}"
            )

    # -- writing -----------------------------------------------------------------------

    def row(self, record: OperationRecord) -> tuple[Any, ...]:
        """Return ``record`` as a row of the operations table."""
        return tuple(
            value if dump is None else dump(value)
            for dump, value in zip(
                self._dump, (getattr(record, c.field) for c in OPERATION_COLUMNS), strict=True
            )
        )

    def event_row(self, event: EffectEvent) -> tuple[Any, ...]:
        """Return ``event`` as a row of the events table."""
        return tuple(
            value if dump is None else dump(value)
            for dump, value in zip(
                self._dump_event, (getattr(event, c.field) for c in EVENT_COLUMNS), strict=True
            )
        )

    def appended(
        self,
        operation_id: str,
        drafts: Sequence[EventDraft],
        count: int,
        head: bytes | None,
        now_us: int,
        commits: Mapping[str, Any] | None = None,
    ) -> tuple[list[tuple[Any, ...]], int, bytes | None]:
        """Hash ``drafts`` onto the chain of ``count`` events ending at ``head``, dated ``now_us``.

        The first draft carries ``commits``. Returns their event rows, the new
        event count and the new chain head.
        """
        chained, count, head = chain.append(operation_id, drafts, count, head, now_us, commits)
        at = self.store_time(now_us)
        rows = [
            (operation_id, seq, kind, from_, to, attempt, at, evidence, digest, committed)
            for seq, kind, from_, to, attempt, evidence, digest, committed in chained
        ]
        return rows, count, head

    def created(
        self, operation: NewOperation, now_us: int
    ) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]]:
        """Return the row of ``operation`` as first claimed at ``now_us``, and its event rows.

        The claim is one event, :data:`CLAIM`, committing to the row's
        identity, budget and lease (:func:`~effectguard.ledger._chain.commits_of`).
        This is the general form; a backend's own claim statement writes the same.
        """
        lease = operation.lease
        waits = operation.awaiting_approval
        fields: dict[str, Any] = {
            "operation_id": operation.operation_id,
            "contract": operation.contract,
            "contract_version": operation.contract_version,
            "fingerprint": operation.fingerprint,
            "provider_key": operation.provider_key,
            "status": EffectStatus.AWAITING_APPROVAL if waits else EffectStatus.DISPATCHED,
            "attempts": 0 if waits else 1,
            "attempt_budget": operation.attempt_budget,
            "arguments": operation.arguments,
            "output_json": None,
            "provider_operation_id": None,
            "reason": APPROVAL_REASON if waits else None,
            "evidence": None,
            "lease_token": None if waits else lease.token,
            "lease_owner": None if waits else lease.owner,
            "lease_expires_at": None if waits else now_us + round(lease.seconds * 1_000_000),
            "overlap": (),
            "created_at": now_us,
            "updated_at": now_us,
            "first_dispatched_at": now_us,
            "event_count": 0,
            "event_head": b"",
        }
        stored = {
            name: fields[field] if dump is None else dump(fields[field])
            for name, field, dump in self._storing
        }
        if operation.arguments_json is not None:
            stored[self.name("arguments")] = operation.arguments_json
        commits = committed.commits_of(stored, covered=operation.fingerprinted)
        if not waits:
            # A claim commits to having no output and no provider id without writing them
            # down (``verify`` reads them into a claim): the bytes SQLite's own claim writes.
            del commits["output"], commits["provider_operation_id"]
        events, count, head = self.appended(
            operation.operation_id, (AWAITING if waits else CLAIM,), 0, None, now_us, commits
        )
        stored[self.name("event_count")] = count
        stored[self.name("event_head")] = head or b""
        return tuple(stored.values()), events

    def changed_columns(self, changes: Changes, now_us: int) -> dict[str, Any]:
        """Return each column ``changes`` sets, by name, as stored; a lease runs from ``now_us``."""
        fields: dict[str, Any] = {"status": changes.status}
        if changes.lease is not UNSET:
            lease = changes.lease
            fields.update(
                lease_token=None if lease is None else lease.token,
                lease_owner=None if lease is None else lease.owner,
                lease_expires_at=(
                    None if lease is None else now_us + round(lease.seconds * 1_000_000)
                ),
            )
        named: Mapping[str, Any] = {
            "attempts": changes.attempts,
            "attempt_budget": changes.attempt_budget,
            "output_json": changes.output_json,
            "provider_operation_id": changes.provider_operation_id,
            "reason": changes.reason,
            "evidence": changes.evidence,
            "overlap": changes.overlap,
        }
        fields.update({field: value for field, value in named.items() if value is not UNSET})
        columns = {}
        for field, value in fields.items():
            name = self._by_field[field]
            dump = self._dump_by_name[name]
            columns[name] = value if dump is None else dump(value)
        return columns

    def transitioned(
        self, row: Sequence[Any], changes: Changes, drafts: Sequence[EventDraft], now_us: int
    ) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]]:
        """Return operation ``row`` with ``changes`` and ``drafts`` applied at ``now_us``.

        Also returns the event rows, which extend the chain from the head kept on ``row``.
        """
        values = dict(zip(self.operation_columns, row, strict=True))
        changed = self.changed_columns(changes, now_us)
        values.update(changed)
        count, head = self.name("event_count"), self.name("event_head")
        events, values[count], new_head = self.appended(
            values[self.name("operation_id")],
            drafts,
            values[count],
            bytes(values[head]) or None,
            now_us,
            committed.commits_of(changed),
        )
        values[head] = new_head or b""
        values[self.name("updated_at")] = self.store_time(now_us)
        return tuple(values.values()), events


#: SQLite's rows: times as whole microseconds since the epoch.
SQLITE = Rows("sqlite", store_time=same_micros, load_time=chain.from_micros)


#: PostgreSQL's rows: times as aware datetimes (``timestamptz``).
POSTGRES = Rows("postgres", store_time=chain.from_micros, load_time=as_utc)


# ---- Bulk loads: every chain checked before anything is written ----

#: What ``bulk_load`` takes: each operation as it should be stored, with all its events in order.
Loadable = Iterable[tuple[OperationRecord, Sequence[EffectEvent]]]


#: Operations written per batch of statements (one transaction throughout).
CHUNK = 5000


def _checked(record: OperationRecord, events: Sequence[EffectEvent]) -> None:
    problems = [
        problem.problem if problem.seq is None else f"event {problem.seq}: {problem.problem}"
        for problem in chain.check(
            record.operation_id, record.event_count, record.event_head, events, record.status.value
        )
    ]
    if not events:
        # Every operation the ledger writes starts with its claim's events.
        problems.append("it has no events")
    if problems:
        details = "; ".join(problems[:3])
        msg = (
            f"bulk load refused: the event chain of operation {record.operation_id!r} does not "
            f"verify ({details}); nothing was loaded. Load the operation as the ledger wrote it "
            "(every event, unedited), or build its events with effectguard.ledger.chain"
        )
        raise InvalidRequestError(msg)


def chunks(
    rows: Rows, operations: Loadable, size: int = CHUNK
) -> Iterator[tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]]:
    """Yield ``(operation rows, event rows)`` for up to ``size`` operations at a time.

    Each operation's chain is checked before its rows are built: a broken one
    raises :class:`InvalidRequestError` naming it, so the caller's transaction
    is rolled back and nothing is written.
    """
    operation_rows: list[tuple[Any, ...]] = []
    event_rows: list[tuple[Any, ...]] = []
    for record, events in operations:
        _checked(record, events)
        operation_rows.append(rows.row(record))
        event_rows.extend(rows.event_row(event) for event in events)
        if len(operation_rows) >= size:
            yield operation_rows, event_rows
            operation_rows, event_rows = [], []
    if operation_rows:
        yield operation_rows, event_rows


def duplicate_error(where: str, exc: BaseException) -> InvalidRequestError:
    """The error for a load naming an operation id that is stored already (or twice)."""
    msg = (
        f"bulk load into {where} refused: an operation id in it is already in the ledger, or "
        f"given twice ({exc}); nothing was loaded. Load into a new, empty ledger"
    )
    return InvalidRequestError(msg)
