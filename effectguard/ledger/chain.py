"""The event chain: how an operation's events are hashed, appended, checked and verified.

Every fact of the chain lives here, and both backends' writes, ``verify()`` and
``bulk_load()`` use it:

* the document an event's hash covers (:func:`chain_document`, written by
  :mod:`effectguard.ledger.documents`), its time in
  whole microseconds since the epoch (:func:`to_micros`, :func:`from_micros`);
* the hash that links an event to the one before it (:func:`chain_hash`);
* appending drafted events to a chain (:func:`append`), or copying a chain
  under another operation id (:func:`relink`);
* checking one chain against the count, head and status kept on its
  operation's row (:func:`check`), and walking every chain of a ledger
  (:func:`verify`).

Each operation has its own chain, whose head and length are kept on its row,
so writers of different operations never queue behind one global chain.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from effectguard.fingerprint import canonical_json
from effectguard.ledger.committed import COMMITTED, commitments
from effectguard.ledger.documents import (
    GENESIS,
    chain_document,
    chain_hash,
    document_text,
    event_document,
    from_micros,
    to_micros,
)
from effectguard.model import EffectEvent, VerifyProblem, VerifyReport

if TYPE_CHECKING:
    from effectguard.ledger.protocol import EventDraft

__all__ = [
    "GENESIS",
    "HEAD_COLUMNS",
    "ChainedEvent",
    "Head",
    "UnreadableEvent",
    "append",
    "chain_document",
    "chain_hash",
    "check",
    "check_row",
    "document_text",
    "event_document",
    "from_micros",
    "relink",
    "to_micros",
    "verify",
]

#: One appended event as both backends store it: seq, type, from, to, attempt, evidence JSON,
#: hash, commits JSON.
ChainedEvent = tuple[int, str, str | None, str, int, str | None, bytes, str | None]


def append(
    operation_id: str,
    drafts: Sequence[EventDraft],
    count: int,
    head: bytes | None,
    at_micros: int,
    commits: Mapping[str, Any] | None = None,
) -> tuple[list[ChainedEvent], int, bytes | None]:
    """Hash ``drafts`` onto the chain of ``count`` events ending at ``head``, dated ``at_micros``.

    The one definition of the chain every backend writes and :func:`check`
    checks. The first draft carries ``commits``. Returns the events as stored,
    the new event count and the new head.
    """
    chained: list[ChainedEvent] = []
    carried = canonical_json(dict(commits)) if commits else None
    for draft in drafts:
        count += 1
        evidence = canonical_json(dict(draft.evidence)) if draft.evidence else None
        text = document_text(
            operation_id,
            count,
            draft.type,
            draft.from_status,
            draft.to_status,
            draft.attempt,
            at_micros,
            evidence,
            carried,
        )
        head = chain_hash(head, text)
        chained.append(
            (
                count,
                draft.type.value,
                None if draft.from_status is None else draft.from_status.value,
                draft.to_status.value,
                draft.attempt,
                evidence,
                head,
                carried,
            )
        )
        carried = None
    return chained, count, head


def relink(
    operation_id: str, events: Iterable[EffectEvent], *, shift: timedelta = timedelta(0)
) -> list[EffectEvent]:
    """Return ``events`` as the chain of ``operation_id``, each ``shift`` later, hashed afresh.

    Sequence numbers are renumbered from 1 in the given order; every other
    field is kept. The result passes :func:`check` against its own last hash.
    """
    linked: list[EffectEvent] = []
    head: bytes | None = None
    for seq, event in enumerate(events, start=1):
        at = event.at + shift
        document = chain_document(
            operation_id,
            seq,
            event.type,
            event.from_status,
            event.to_status,
            event.attempt,
            to_micros(at),
            event.evidence,
            event.commits,
        )
        head = chain_hash(head, document)
        linked.append(
            EffectEvent(
                operation_id,
                seq,
                event.type,
                event.from_status,
                event.to_status,
                event.attempt,
                at,
                event.evidence,
                head,
                event.commits,
            )
        )
    return linked


@dataclass(frozen=True, slots=True)
class UnreadableEvent:
    """A stored event whose columns no longer parse: an edit to report, never a crash."""

    operation_id: str
    seq: int
    hash: bytes
    error: str


def _event_problems(
    operation_id: str,
    event: EffectEvent | UnreadableEvent,
    expected_seq: int,
    previous: bytes | None,
) -> list[VerifyProblem]:
    """Return what breaks the chain at ``event``: its number, readability and hash.

    It is expected as number ``expected_seq``, hashed onto ``previous``.
    """
    problems: list[VerifyProblem] = []
    if event.seq != expected_seq:
        problems.append(
            VerifyProblem(
                operation_id, event.seq, f"event {expected_seq} is missing or out of order"
            )
        )
    if isinstance(event, UnreadableEvent):
        problems.append(
            VerifyProblem(operation_id, event.seq, f"event cannot be read: {event.error}")
        )
    elif event.operation_id != operation_id or (
        chain_hash(previous, event_document(event)) != event.hash
    ):
        problems.append(
            VerifyProblem(
                operation_id,
                event.seq,
                "event hash does not match its contents and predecessor (edited or reordered)",
            )
        )
    return problems


def check(
    operation_id: str,
    event_count: int,
    event_head: bytes,
    events: Iterable[EffectEvent | UnreadableEvent],
    status: str | None = None,
) -> list[VerifyProblem]:
    """Return every break between ``events`` and the count, head and status on their operation.

    An empty list means the chain is whole: numbered from 1 without gaps, every
    hash recomputed from its event and predecessor matches, the last one is
    ``event_head``, there are ``event_count`` of them and (when ``status`` is
    given) the last one leaves the operation in ``status``.
    """
    problems: list[VerifyProblem] = []
    previous: bytes | None = None
    expected_seq = 1
    seen = 0
    last: EffectEvent | UnreadableEvent | None = None
    for event in events:
        seen += 1
        last = event
        problems.extend(_event_problems(operation_id, event, expected_seq, previous))
        # A gap is reported once: the events after it are numbered from this one.
        expected_seq = event.seq + 1
        previous = event.hash
    if seen != event_count:
        problems.append(
            VerifyProblem(
                operation_id, None, f"operation records {event_count} events but {seen} are stored"
            )
        )
    if (previous or b"") != event_head:
        problems.append(
            VerifyProblem(
                operation_id, None, "last event does not match the chain head on the operation"
            )
        )
    if status is not None and isinstance(last, EffectEvent) and last.to_status.value != status:
        problems.append(
            VerifyProblem(
                operation_id,
                None,
                f"operation is {status} but its last event leaves it {last.to_status.value}",
            )
        )
    return problems


def check_row(
    operation_id: str,
    stored: Mapping[str, Any],
    events: Iterable[EffectEvent | UnreadableEvent],
) -> tuple[list[VerifyProblem], bool]:
    """Return every row field that differs from what its latest committing event says.

    ``stored`` is :func:`commitments` of the operation's row as stored. Also
    returns whether some field was never committed to (events written before
    commitments existed): such a field cannot be checked, and is no problem.
    """
    latest: dict[str, tuple[int, Any]] = {}
    for event in events:
        if isinstance(event, EffectEvent):
            for name, value in event.commits.items():
                latest[name] = (event.seq, value)
    problems = [
        VerifyProblem(
            operation_id,
            latest[name][0],
            f"operation field {name!r} does not match what event {latest[name][0]} committed "
            "to (the operation row was edited)",
        )
        for name in COMMITTED
        if name in latest and latest[name][1] != stored.get(name)
    ]
    return problems, any(name not in latest for name in COMMITTED)


#: What :func:`verify` reads of an operation row: id, event count, chain head, status, then
#: the committed columns (:data:`HEAD_COLUMNS`).
Head = tuple[Any, ...]
#: The committed columns :func:`verify` reads after id, count, head and status, in order.
HEAD_COLUMNS = (
    "fingerprint",
    "provider_key",
    "attempts",
    "attempt_budget",
    "arguments",
    "output",
    "provider_operation_id",
    "lease_token",
    "lease_owner",
)


def verify(
    heads: Iterable[Sequence[Any]], events: Iterable[EffectEvent | UnreadableEvent]
) -> VerifyReport:
    """Check every chain, walking operation heads and events, both in operation-id order.

    ``heads`` yields :data:`Head` rows; ``events`` yields every event ordered
    by operation id and seq. Both are streamed, so memory holds one chain at a
    time. Events whose operation row is missing are reported as orphans; a row
    field that differs from what its latest committing event says is reported
    by name.
    """
    problems: list[VerifyProblem] = []
    operations = events_checked = uncovered = 0
    stream: Iterator[EffectEvent | UnreadableEvent] = iter(events)
    pending = next(stream, None)
    for operation_id, count, head, status, *fields in heads:
        operations += 1
        chain = []
        while pending is not None and pending.operation_id < operation_id:
            problems.extend(check(pending.operation_id, 0, b"", [pending]))
            pending = next(stream, None)
        while pending is not None and pending.operation_id == operation_id:
            chain.append(pending)
            pending = next(stream, None)
        events_checked += len(chain)
        problems.extend(check(operation_id, count, bytes(head), chain, status))
        stored = commitments(dict(zip(HEAD_COLUMNS, fields, strict=True)))
        edited, partial = check_row(operation_id, stored, chain)
        problems.extend(edited)
        uncovered += partial
    while pending is not None:
        problems.extend(check(pending.operation_id, 0, b"", [pending]))
        pending = next(stream, None)
    return VerifyReport(operations, events_checked, tuple(problems), uncovered)
