"""Retention: what may be pruned, the tombstone a pruned operation leaves, and the prune loop.

A pruned operation's id keeps refusing a new claim (its tombstone), ``verify``
still checks the claims anchor over it, and an archive is made durable before
the page it holds is deleted. Backends supply a page's statements and its
transaction; the loop, its checks and its cut-off are written here once.
"""

from __future__ import annotations

import abc
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import IO, Any, Generic, TypeVar

from effectguard._fingerprint import canonical_json
from effectguard._model import EffectEvent, EffectStatus, OperationRecord, VerifyProblem
from effectguard.errors import EffectPruned, InvalidRequestError, OperationConflictError
from effectguard.ledger._chain import chain_hash, event_document, to_micros
from effectguard.ledger._protocol import announce_pruned

__all__ = [
    "ARCHIVE_FORMAT",
    "PRUNABLE",
    "After",
    "BatchPruning",
    "CutOff",
    "PrunePass",
    "PruneReport",
    "Tombstone",
    "check_archive",
    "check_statuses",
    "check_tombstone",
    "close_archive",
    "cut_off",
    "kept_for_key",
    "open_archive",
    "refusal",
    "sync_archive",
    "tombstone_of",
    "write_archived",
]


# ---- Retention: what may be pruned, tombstones, the archive ----

#: The statuses an operation may be pruned from: the terminal ones.
PRUNABLE = frozenset({EffectStatus.CONFIRMED, EffectStatus.REJECTED})


#: The ``format`` of an archive's first line.
ARCHIVE_FORMAT = "effectguard-archive-v1"


#: Operations pruned per transaction: short locks on a busy ledger.
BATCH = 500


@dataclass(frozen=True, slots=True)
class Tombstone:
    """What is left of a pruned operation: enough to refuse its id and check its chain."""

    operation_id: str
    contract: str
    contract_version: int
    fingerprint: str
    status: EffectStatus
    provider_operation_id: str | None
    event_count: int
    event_head: bytes
    first_hash: bytes
    pruned_at: datetime
    digest: bytes

    def document(self) -> dict[str, Any]:
        """Return the fields the digest covers, as JSON values."""
        return {
            "operation_id": self.operation_id,
            "contract": self.contract,
            "contract_version": self.contract_version,
            "fingerprint": self.fingerprint,
            "status": self.status.value,
            "provider_operation_id": self.provider_operation_id,
            "event_count": self.event_count,
            "event_head": bytes(self.event_head).hex(),
            "first_hash": bytes(self.first_hash).hex(),
            "pruned_us": to_micros(self.pruned_at),
        }

    def expected_digest(self) -> bytes:
        """Return the digest the fields hold now (differs from :attr:`digest` once edited)."""
        return hashlib.sha256(canonical_json(self.document()).encode("utf-8")).digest()


def tombstone_of(record: OperationRecord, first_hash: bytes, pruned_at: datetime) -> Tombstone:
    """Return the tombstone ``record`` leaves when pruned at ``pruned_at``."""
    stone = Tombstone(
        record.operation_id,
        record.contract,
        record.contract_version,
        record.fingerprint,
        record.status,
        record.provider_operation_id,
        record.event_count,
        bytes(record.event_head),
        bytes(first_hash),
        pruned_at,
        b"",
    )
    return Tombstone(*[*_fields(stone)[:-1], stone.expected_digest()])


def _fields(stone: Tombstone) -> list[Any]:
    return [getattr(stone, name) for name in Tombstone.__slots__]


def refusal(stone: Tombstone, fingerprint: str) -> EffectPruned | OperationConflictError:
    """Return what a claim of ``stone``'s id for a request of ``fingerprint`` raises."""
    if stone.fingerprint != fingerprint:
        why = (
            f"it was {stone.status.value} and pruned at {stone.pruned_at.isoformat()}: only "
            f"its request's fingerprint is kept ({stone.fingerprint[:12]}…, this call "
            f"{fingerprint[:12]}…)"
        )
        return OperationConflictError(stone.operation_id, stone.fingerprint, fingerprint, (why,))
    return EffectPruned(stone.operation_id, stone.status.value, stone.pruned_at.isoformat())


def check_statuses(statuses: Iterable[EffectStatus]) -> tuple[EffectStatus, ...]:
    """Return ``statuses`` if all are terminal; else InvalidRequestError naming the others."""
    given = tuple(statuses)
    wrong = sorted(s.value for s in given if s not in PRUNABLE)
    if wrong or not given:
        msg = (
            f"cannot prune {', '.join(wrong) or 'no status'}: only settled operations "
            "(CONFIRMED, REJECTED) are ever pruned"
        )
        raise InvalidRequestError(msg)
    return given


def kept_for_key(
    record: OperationRecord, key_retention: Mapping[str, float], now: datetime
) -> bool:
    """Whether the provider may still remember ``record``'s key, so the prune keeps it."""
    seconds = key_retention.get(record.contract)
    if seconds is None or record.provider_key is None:
        return False
    return (now - record.first_dispatched_at).total_seconds() < seconds


@dataclass(frozen=True, slots=True)
class CutOff:
    """A prune's moment (``now``) and the last update time it prunes before (``before``)."""

    now: datetime
    before: datetime


def cut_off(older_than: float, now: float) -> CutOff:
    """Return the cut-off ``older_than`` seconds before ``now``; InvalidRequestError if negative."""
    if (
        isinstance(older_than, bool)
        or not isinstance(older_than, (int, float))
        or not older_than >= 0
    ):
        msg = f"older_than must be a number of seconds >= 0, not {older_than!r}"
        raise InvalidRequestError(msg)
    moment = datetime.fromtimestamp(now, UTC)
    return CutOff(moment, moment - timedelta(seconds=older_than))


@dataclass(frozen=True, slots=True)
class PruneReport:
    """What a prune did (or, with ``dry_run``, would do)."""

    #: The operations pruned (or that would be), each now a tombstone.
    pruned: tuple[str, ...]
    #: Operations old enough but kept: their provider may still remember their key.
    kept: tuple[str, ...]
    dry_run: bool
    archive: str | None = None


def check_tombstone(stone: Tombstone, has_row: bool) -> list[VerifyProblem]:
    """Return what is wrong with ``stone``: edited fields, or a live row under its id."""
    problems = []
    if bytes(stone.digest) != stone.expected_digest():
        problems.append(
            VerifyProblem(
                stone.operation_id,
                None,
                "tombstone does not match its digest (the tombstone was edited)",
            )
        )
    if has_row:
        problems.append(
            VerifyProblem(
                stone.operation_id, None, "operation has both a tombstone and a row (re-inserted)"
            )
        )
    return problems


def open_archive(path: str) -> IO[str]:
    """Create ``path`` (0600, never overwritten) and write the archive's first line."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        msg = f"archive {path!r} already exists: name a new file (an archive never overwrites)"
        raise InvalidRequestError(msg) from exc
    except OSError as exc:
        msg = f"cannot create archive {path!r}: {exc.strerror}"
        raise InvalidRequestError(msg) from exc
    target = os.fdopen(descriptor, "w", encoding="utf-8")
    target.write(json.dumps({"kind": "archive", "format": ARCHIVE_FORMAT}) + "\n")
    return target


def sync_archive(target: IO[str]) -> None:
    """Make what was written to the archive durable (before the prune that wrote it commits)."""
    target.flush()
    os.fsync(target.fileno())


def close_archive(target: IO[str]) -> None:
    """Make the archive durable and close it."""
    try:
        sync_archive(target)
    finally:
        target.close()


def _plain(value: Any) -> Any:
    """A JSON form of a record field json cannot encode itself (times, hashes)."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    return str(value)


def write_archived(
    target: IO[str], record: OperationRecord, events: Sequence[EffectEvent], stone: Tombstone
) -> None:
    """Write ``record``, its tombstone and its ``events`` (with their hashed documents)."""
    fields = {name: getattr(record, name) for name in record.__dataclass_fields__}
    fields["output"] = record.output  # what a replay returned, readable beside the stored text
    line = {"kind": "operation", "record": fields, "tombstone": stone.document()}
    target.write(json.dumps(line, sort_keys=True, default=_plain) + "\n")
    for event in events:
        entry = {
            "kind": "event",
            "operation_id": record.operation_id,
            "seq": event.seq,
            "type": str(event.type),
            "to_status": event.to_status.value,
            "document": canonical_json(event_document(event)),
            "hash": bytes(event.hash).hex(),
        }
        target.write(json.dumps(entry, sort_keys=True) + "\n")


def _read_archive(lines: Iterable[str]) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    operation: dict[str, Any] | None = None
    events: list[dict[str, Any]] = []
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            entry = json.loads(text)
            kind = entry["kind"]
        except (ValueError, TypeError, KeyError) as exc:
            msg = f"archive line {number} is not an archive entry: {exc}"
            raise InvalidRequestError(msg) from exc
        if kind == "archive":
            if entry.get("format") != ARCHIVE_FORMAT:
                msg = f"archive line {number}: not an {ARCHIVE_FORMAT} archive"
                raise InvalidRequestError(msg)
        elif kind == "operation":
            if operation is not None:
                yield operation, events
            operation, events = entry, []
        elif kind == "event" and operation is not None:
            events.append(entry)
        else:
            msg = f"archive line {number}: unexpected {kind!r} entry"
            raise InvalidRequestError(msg)
    if operation is not None:
        yield operation, events


def check_archive(
    lines: Iterable[str], tombstones: Mapping[str, Tombstone]
) -> tuple[int, list[VerifyProblem]]:
    """Check each archived chain against its tombstone; return how many and the problems."""
    problems: list[VerifyProblem] = []
    checked = 0
    for operation, events in _read_archive(lines):
        checked += 1
        record = operation.get("record", {})
        operation_id = str(record.get("operation_id"))
        stone = tombstones.get(operation_id)
        if stone is None:
            problems.append(VerifyProblem(operation_id, None, "archived but has no tombstone"))
            continue
        problems.extend(_check_chain(stone, events))
        problems.extend(
            VerifyProblem(operation_id, None, f"archived {name} differs from its tombstone's")
            for name in ("contract", "fingerprint", "provider_operation_id")
            if record.get(name) != getattr(stone, name)
        )
        if record.get("status") != stone.status.value:
            problems.append(
                VerifyProblem(operation_id, None, "archived status differs from its tombstone's")
            )
    return checked, problems


def _check_chain(stone: Tombstone, events: Sequence[dict[str, Any]]) -> list[VerifyProblem]:
    problems: list[VerifyProblem] = []
    previous: bytes | None = None
    first: bytes | None = None
    for expected_seq, entry in enumerate(events, 1):
        document = str(entry.get("document", ""))
        try:
            parsed = json.loads(document)
            stored = bytes.fromhex(str(entry.get("hash", "")))
        except ValueError:
            parsed, stored = {}, b""
        if (
            parsed.get("operation_id") != stone.operation_id
            or parsed.get("seq") != expected_seq
            or chain_hash(previous, document) != stored
            # The readable fields beside the document must say what the hashed document says.
            or entry.get("operation_id") != stone.operation_id
            or entry.get("seq") != expected_seq
            or entry.get("type") != parsed.get("type")
            or entry.get("to_status") != parsed.get("to")
        ):
            problems.append(
                VerifyProblem(
                    stone.operation_id,
                    expected_seq,
                    "archived event does not hash to its chain (edited, reordered or missing)",
                )
            )
        previous = stored
        first = stored if first is None else first
    if len(events) != stone.event_count or (previous or b"") != bytes(stone.event_head):
        problems.append(
            VerifyProblem(
                stone.operation_id, None, "archived chain does not end at the tombstone's head"
            )
        )
    if (first or b"") != bytes(stone.first_hash):
        problems.append(
            VerifyProblem(
                stone.operation_id, None, "archived first event differs from the tombstone's"
            )
        )
    return problems


# ---- The prune loop, once; backends supply a page's statements ----

C = TypeVar("C")


T = TypeVar("T")


#: Where a page starts: after this (last update, operation id); None for the first page.
After = tuple[datetime, str] | None


@dataclass(frozen=True, slots=True)
class PrunePass:
    """One prune call, checked: what it prunes, before when, what it keeps, where it archives."""

    statuses: tuple[EffectStatus, ...]
    cut: CutOff
    key_retention: Mapping[str, float]
    """Contract name -> the provider's key retention in seconds (empty when forced)."""
    archive: IO[str] | None
    dry_run: bool


@dataclass(frozen=True, slots=True)
class _Page:
    after: After
    pruned: list[str]
    kept: list[str]


class BatchPruning(abc.ABC, Generic[C]):
    """``prune`` for a backend whose connections are ``C``; the backend supplies the hooks."""

    def prune(
        self,
        *,
        older_than: float,
        statuses: Iterable[EffectStatus] = PRUNABLE,
        archive: str | None = None,
        dry_run: bool = False,
        force: bool = False,
        key_retention: Mapping[str, float] | None = None,
        now: float | None = None,
    ) -> PruneReport:
        """See :meth:`~effectguard.ledger.protocol.Prunable.prune`."""
        wanted = check_statuses(statuses)
        cut = cut_off(older_than, self._prune_now() if now is None else now)
        keys = {} if force else dict(key_retention or {})
        target = None if dry_run or archive is None else open_archive(archive)
        plan = PrunePass(wanted, cut, keys, target, dry_run)
        pruned: list[str] = []
        kept: list[str] = []
        after: After = None
        try:
            while True:
                page = self._prune_transaction(self._page_work(plan, after), write=not dry_run)
                if page is None:
                    break
                after = page.after
                pruned.extend(page.pruned)
                kept.extend(page.kept)
        finally:
            if target is not None:
                close_archive(target)
            if not dry_run:
                announce_pruned(pruned)
        return PruneReport(tuple(pruned), tuple(kept), dry_run, archive)

    def _page_work(self, plan: PrunePass, after: After) -> Callable[[C], _Page | None]:
        """One page's work inside its transaction; None when no operation is left to read."""

        def work(conn: C) -> _Page | None:
            records = self._prune_page(conn, plan, after)
            if not records:
                return None
            done: list[OperationRecord] = []
            held: list[str] = []
            for record in records:
                if kept_for_key(record, plan.key_retention, plan.cut.now):
                    held.append(record.operation_id)
                else:
                    done.append(record)
            if done and not plan.dry_run:
                self._prune_records(conn, done, plan)
                if plan.archive is not None:
                    sync_archive(plan.archive)
            last = records[-1]
            return _Page((last.updated_at, last.operation_id), [r.operation_id for r in done], held)

        return work

    @abc.abstractmethod
    def _prune_now(self) -> float:
        """The ledger's time now, in epoch seconds: where a prune's cut-off is counted from."""
        ...

    @abc.abstractmethod
    def _prune_page(self, conn: C, plan: PrunePass, after: After) -> list[OperationRecord]:
        """Up to ``BATCH`` operations in ``plan.statuses`` last changed before ``plan.cut.before``.

        Ordered by (last update, operation id), each after ``after``; locked
        against other writers unless ``plan.dry_run``.
        """
        ...

    @abc.abstractmethod
    def _prune_records(self, conn: C, records: Sequence[OperationRecord], plan: PrunePass) -> None:
        """Archive (when ``plan.archive``), tombstone and delete ``records`` and their events."""
        ...

    @abc.abstractmethod
    def _prune_transaction(self, work: Callable[[C], T], *, write: bool) -> T | None:
        """Run ``work`` in one transaction (a read-only one unless ``write``) and commit it.

        May return None without running ``work`` when the ledger holds nothing yet.
        """
        ...
