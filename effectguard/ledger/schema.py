"""The ledger's row schema: one column list, one row mapper, one ``changed_columns``.

Both backends store the same two tables, operations and events, with the
same columns in the same order; they differ only in how a time is stored
(SQLite: whole microseconds since the epoch in a ``*_us`` column; PostgreSQL:
``timestamptz`` in a ``*_at`` column) and in that PostgreSQL declares JSON
columns ``json`` (stored as given, selected as text). :data:`OPERATION_COLUMNS`
and :data:`EVENT_COLUMNS` say, once, what each column holds and what it is
called in each backend; :class:`Rows` (:data:`SQLITE` and :data:`POSTGRES`)
turns rows into :class:`~effectguard.model.OperationRecord` and
:class:`~effectguard.model.EffectEvent` and back.

Adding a column means adding it here (operations columns are in
``OperationRecord`` field order) and to each backend's DDL, as a migration.

Driver-free: every value is already what the driver returns or accepts.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from effectguard.ledger import chain, committed
from effectguard.ledger.protocol import UNSET, Changes, EventDraft, NewOperation
from effectguard.ledger.reader import READER_ORDER, filled, record_reader
from effectguard.ledger.values import Kind, as_utc, dumper, loader, same_micros, status
from effectguard.model import EffectEvent, EffectStatus, OperationRecord

__all__ = [
    "EVENT_COLUMNS",
    "OPERATION_COLUMNS",
    "POSTGRES",
    "SQLITE",
    "Column",
    "Kind",
    "Rows",
    "Version",
]


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
        self, operation: NewOperation, drafts: Sequence[EventDraft], now_us: int
    ) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]]:
        """Return the row of ``operation`` as first claimed at ``now_us``, and its event rows.

        The claim's first event commits to the row's identity and budget
        (:func:`~effectguard.ledger.committed.commitments`).
        """
        lease = operation.lease
        fields: dict[str, Any] = {
            "operation_id": operation.operation_id,
            "contract": operation.contract,
            "contract_version": operation.contract_version,
            "fingerprint": operation.fingerprint,
            "provider_key": operation.provider_key,
            "status": EffectStatus.DISPATCHED,
            "attempts": 1,
            "attempt_budget": operation.attempt_budget,
            "arguments": operation.arguments,
            "output_json": None,
            "provider_operation_id": None,
            "reason": None,
            "evidence": None,
            "lease_token": lease.token,
            "lease_owner": lease.owner,
            "lease_expires_at": now_us + round(lease.seconds * 1_000_000),
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
        events, count, head = self.appended(
            operation.operation_id, drafts, 0, None, now_us, committed.commitments(stored)
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
            committed.commitments(changed),
        )
        values[head] = new_head or b""
        values[self.name("updated_at")] = self.store_time(now_us)
        return tuple(values.values()), events


#: SQLite's rows: times as whole microseconds since the epoch.
SQLITE = Rows("sqlite", store_time=same_micros, load_time=chain.from_micros)
#: PostgreSQL's rows: times as aware datetimes (``timestamptz``).
POSTGRES = Rows("postgres", store_time=chain.from_micros, load_time=as_utc)
