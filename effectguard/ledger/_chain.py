"""The event chain and the claims anchor, once, for both backends and ``verify``.

Every event's hash covers its document (operation, sequence, type, statuses,
attempt, time, evidence and what it commits to of the row) and the previous
hash; the head is kept on the operation row. The claims anchor is a running
hash over every claim, so ``verify`` also detects a deleted operation. Here:
the document and its hash, what an event commits to, appending and checking a
chain, the ``verify`` walk, and the anchor with its exported head.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from effectguard._fingerprint import canonical_json, request_text
from effectguard._model import EffectEvent, EffectStatus, EventType, VerifyProblem, VerifyReport
from effectguard.errors import InvalidRequestError

if TYPE_CHECKING:
    from effectguard.ledger._protocol import EventDraft

__all__ = [
    "COMMITTED",
    "FORMAT",
    "GENESIS",
    "HEAD_COLUMNS",
    "START",
    "AnchorHead",
    "ChainedEvent",
    "Head",
    "UnreadableEvent",
    "advance",
    "append",
    "chain_document",
    "chain_hash",
    "check",
    "check_anchor",
    "check_row",
    "check_shards",
    "commitments",
    "compare",
    "digest",
    "document_text",
    "event_document",
    "from_micros",
    "item",
    "joined",
    "merged",
    "relink",
    "shards_of",
    "to_micros",
    "verify",
]


# ---- The document an event's hash covers, and the hash ----

#: What an operation's first event is linked to, in place of a predecessor's hash.
GENESIS = b"effectguard-event-chain-v1"


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


_MICROSECOND = timedelta(microseconds=1)


def from_micros(micros: int) -> datetime:
    """Return the timezone-aware UTC datetime ``micros`` microseconds after the epoch."""
    # Positionally, as microseconds alone: timedelta carries them into seconds and days
    # exactly (integer arithmetic), and a keyword or a divmod first costs a quarter more.
    return _EPOCH + timedelta(0, 0, micros)


def to_micros(moment: datetime) -> int:
    """Return whole microseconds since the epoch, exactly (no float rounding)."""
    return (moment - _EPOCH) // _MICROSECOND


def chain_document(
    operation_id: str,
    seq: int,
    type_: EventType,
    from_status: EffectStatus | None,
    to_status: EffectStatus,
    attempt: int,
    at_micros: int,
    evidence: Mapping[str, Any],
    commits: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Return the document an event's chain hash is computed over.

    ``commits`` (see :func:`commitments`) is hashed only when there are some,
    so every event written before they existed keeps its hash.
    """
    document = {
        "at": at_micros,
        "attempt": attempt,
        "evidence": dict(evidence),
        "from": None if from_status is None else from_status.value,
        "operation_id": operation_id,
        "seq": seq,
        "to": to_status.value,
        "type": type_.value,
    }
    if commits:
        document["commits"] = dict(commits)
    return document


def event_document(event: EffectEvent) -> dict[str, Any]:
    """Return the document ``event``'s hash covers."""
    return chain_document(
        event.operation_id,
        event.seq,
        event.type,
        event.from_status,
        event.to_status,
        event.attempt,
        to_micros(event.at),
        event.evidence,
        event.commits,
    )


def chain_hash(previous: bytes | None, document: Mapping[str, Any] | str) -> bytes:
    """Return the hash that links the event ``document`` to the hash of the event before it.

    ``previous`` is None for an operation's first event. ``document`` is the
    dict :func:`chain_document` returns, or its canonical JSON text as
    :func:`document_text` writes it (the same bytes, so the same hash).
    Editing, reordering or removing any event changes every hash after it, so
    the head kept on the operation no longer matches.
    """
    text = document if isinstance(document, str) else canonical_json(document)
    digest = hashlib.sha256(previous if previous is not None else GENESIS)
    digest.update(text.encode("utf-8"))
    return digest.digest()


# A JSON string exactly as the canonical encoder writes it (ensure_ascii=False).
_quoted: Any = (
    getattr(json.encoder, "c_encode_basestring", None) or json.encoder.py_encode_basestring
)


_STATUS_TEXT = {status: _quoted(status.value) for status in EffectStatus}


_TYPE_TEXT = {kind: _quoted(kind.value) for kind in EventType}


def document_text(
    operation_id: str,
    seq: int,
    type_: EventType,
    from_status: EffectStatus | None,
    to_status: EffectStatus,
    attempt: int,
    at_micros: int,
    evidence_json: str | None,
    commits_json: str | None = None,
) -> str:
    """Return ``canonical_json(chain_document(...))`` written from a fixed template.

    The same text, byte for byte, as the general encoder gives the dict: the
    keys in sorted order, no whitespace, ``evidence_json`` and
    ``commits_json`` being the canonical JSON of the evidence and the
    commitments (None: none), so a chain written either way verifies either way.
    """
    if type(seq) is not int or type(attempt) is not int or type(at_micros) is not int:
        # bool or an int subclass: the general encoder decides how it is written.
        commits = None if commits_json is None else json.loads(commits_json)
        return canonical_json(
            chain_document(
                operation_id,
                seq,
                type_,
                from_status,
                to_status,
                attempt,
                at_micros,
                json.loads(evidence_json) if evidence_json else {},
                commits,
            )
        )
    source = "null" if from_status is None else _STATUS_TEXT[from_status]
    carried = f'"commits":{commits_json},' if commits_json and commits_json != "{}" else ""
    return (
        f'{{"at":{at_micros},"attempt":{attempt},{carried}"evidence":{evidence_json or "{}"},'
        f'"from":{source},"operation_id":{_quoted(operation_id)},"seq":{seq},'
        f'"to":{_STATUS_TEXT[to_status]},"type":{_TYPE_TEXT[type_]}}}'
    )


# ---- What an event commits to of its operation's row ----

#: The operation fields a write commits to, in the event it appends first.
COMMITTED = (
    "fingerprint",
    "provider_key",
    "attempts",
    "attempt_budget",
    "arguments",
    "output",
    "provider_operation_id",
    "lease",
)


_AS_STORED = ("provider_key", "attempts", "attempt_budget", "provider_operation_id")


# Digests are cut to 64 bits: every event carries some, and the chain is tamper-evidence
# against edits made without effectguard, not a defence against forged collisions.
_DIGEST_HEX = 16


def digest(text: str | None) -> str | None:
    """Return a digest (16 hex digits of SHA-256) of ``text`` exactly as stored, None for None."""
    if text is None:
        return None
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:_DIGEST_HEX]


def commitments(columns: Mapping[str, Any]) -> dict[str, Any]:
    """Return what a write commits to, in the first format (events written before 0.1.0).

    Small values are kept as they are; the fingerprint, the arguments, the
    output and the lease (token and owner) as a :func:`digest` of their stored
    text. ``verify`` still checks events written so; new writes commit in the
    second format (:func:`commits_of`).
    """
    found = {name: columns[name] for name in _AS_STORED if name in columns}
    if "fingerprint" in columns:
        found["fingerprint"] = digest(columns["fingerprint"])
    if "arguments" in columns:
        found["arguments"] = digest(columns["arguments"])
    if "output" in columns:
        found["output"] = digest(columns["output"])
    if "lease_token" in columns:
        token = columns["lease_token"]
        found["lease"] = (
            None if token is None else digest(canonical_json([token, columns["lease_owner"]]))
        )
    return found


#: The value of a second-format ``arguments`` commitment when the stored arguments are the
#: very text the fingerprint hashed (nothing redacted): the fingerprint commits to them.
BY_FINGERPRINT = "fingerprint"
#: The ``v`` of a second-format commitment.
COMMITS_V2 = 2
#: What a second-format claim commits to without writing it down: a new row has neither.
_CLAIM_LEAVES: Mapping[str, None] = {"output": None, "provider_operation_id": None}


@functools.lru_cache(maxsize=64)
def owner_digest(owner_text: str) -> str:
    """The 16-hex-digit digest of a stored lease owner (a process writes one, again and again)."""
    return hashlib.sha256(owner_text.encode("utf-8")).hexdigest()[:_DIGEST_HEX]


def lease_commitment(token: str | None, owner_text: str | None) -> str | None:
    """The second-format commitment to a lease: its token and its owner's digest, None for none.

    The token is random and unique already, so it is committed as it is; the
    owner by a digest that a process computes once.
    """
    if token is None:
        return None
    return f"{token}/{owner_digest(owner_text or '')}"


def commits_of(columns: Mapping[str, Any], *, covered: bool = False) -> dict[str, Any]:
    """Return what a write commits to of the operation columns it stores (the second format).

    The fingerprint (itself a SHA-256) by its first 16 hex digits; the
    arguments as :data:`BY_FINGERPRINT` when ``covered`` (the stored text is
    what the fingerprint hashed, so ``verify`` recomputes it), else by
    :func:`digest`; the output by :func:`digest`; the lease by
    :func:`lease_commitment`; small values as they are. Marked ``"v": 2``.
    """
    found: dict[str, Any] = {name: columns[name] for name in _AS_STORED if name in columns}
    if "fingerprint" in columns:
        found["fingerprint"] = columns["fingerprint"][:_DIGEST_HEX]
    if "arguments" in columns:
        found["arguments"] = BY_FINGERPRINT if covered else digest(columns["arguments"])
    if "output" in columns:
        found["output"] = digest(columns["output"])
    if "lease_token" in columns:
        found["lease"] = lease_commitment(columns["lease_token"], columns["lease_owner"])
    if found:
        found["v"] = COMMITS_V2
    return found


def _matches(  # noqa: PLR0911 - one return per kind of committed field
    name: str, committed: Mapping[str, Any], row: Mapping[str, Any]
) -> bool:
    """Whether ``row``'s field ``name`` is what the event's ``committed`` mapping says of it.

    ``row`` holds the stored columns :data:`HEAD_COLUMNS` names. A second-format
    ``arguments`` commitment by the fingerprint is checked by recomputing the
    fingerprint from the stored arguments, contract, version and the committed
    key, against the committed fingerprint; an edited contract name or version
    shows there too.
    """
    value = committed[name]
    if committed.get("v") != COMMITS_V2:
        return bool(value == commitments(row).get(name))
    if name == "fingerprint":
        return isinstance(row["fingerprint"], str) and row["fingerprint"][:_DIGEST_HEX] == value
    if name == "arguments" and value == BY_FINGERPRINT:
        key = committed.get("provider_key", row["provider_key"])
        try:
            text = request_text(row["contract"], row["contract_version"], row["arguments"], key)
            again = hashlib.sha256(text.encode("utf-8")).hexdigest()[:_DIGEST_HEX]
        except (TypeError, ValueError):
            return False
        return again == committed.get("fingerprint")
    if name == "lease":
        return bool(value == lease_commitment(row["lease_token"], row["lease_owner"]))
    if name in ("arguments", "output"):
        return bool(value == digest(row[name if name == "arguments" else "output"]))
    return bool(value == row.get(name))


# ---- The event chain: append, relink, check, and the verify walk ----

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
    row: Mapping[str, Any],
    events: Iterable[EffectEvent | UnreadableEvent],
) -> tuple[list[VerifyProblem], bool]:
    """Return every row field that differs from what its latest committing event says.

    ``row`` holds the operation's stored columns :data:`HEAD_COLUMNS` names.
    Also returns whether some field was never committed to (events written
    before commitments existed): such a field cannot be checked, and is no problem.
    """
    latest: dict[str, tuple[int, Mapping[str, Any]]] = {}
    for event in events:
        if not isinstance(event, EffectEvent):
            # What an unreadable event committed to is unknown, so what came before it no
            # longer says what the row holds: the event itself is reported by ``check``.
            latest.clear()
        else:
            commits = event.commits
            if event.type is EventType.CLAIMED and commits.get("v") == COMMITS_V2:
                # A claim stores no output and no provider id: it commits to their absence.
                commits = {**_CLAIM_LEAVES, **commits}
            for name in commits:
                latest[name] = (event.seq, commits)
    problems = [
        VerifyProblem(
            operation_id,
            latest[name][0],
            f"operation field {name!r} does not match what event {latest[name][0]} committed "
            "to (the operation row was edited)",
        )
        for name in COMMITTED
        if name in latest and not _matches(name, latest[name][1], row)
    ]
    return problems, any(name not in latest for name in COMMITTED)


#: What :func:`verify` reads of an operation row: id, event count, chain head, status, then
#: the committed columns (:data:`HEAD_COLUMNS`).
Head = tuple[Any, ...]


#: The committed columns :func:`verify` reads after id, count, head and status, in order.
HEAD_COLUMNS = (
    "contract",
    "contract_version",
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
        edited, partial = check_row(
            operation_id, dict(zip(HEAD_COLUMNS, fields, strict=True)), chain
        )
        problems.extend(edited)
        uncovered += partial
    while pending is not None:
        problems.extend(check(pending.operation_id, 0, b"", [pending]))
        pending = next(stream, None)
    return VerifyReport(operations, events_checked, tuple(problems), uncovered)


# ---- The claims anchor: a running hash over every claim, and its exported head ----

#: The running hash before the first claim.
START = b""


#: The ``format`` of an exported head.
FORMAT = "effectguard-anchor-v1"


#: Bytes one shard's head takes in a sharded anchor's ``running``: its count, then its hash.
_SHARD_HEAD = 8 + 32


def item(operation_id: str, claim_hash: bytes) -> bytes:
    """Return the digest one claim adds to the running hash."""
    return hashlib.sha256(operation_id.encode("utf-8") + b"\0" + bytes(claim_hash)).digest()


def advance(running: bytes, operation_id: str, claim_hash: bytes) -> bytes:
    """Return the running hash after the claim of ``operation_id`` (PostgreSQL computes the same).

    ``sha256(running || item)``: PostgreSQL's ``sha256(bytea)`` gives the same
    bytes, so its claim statement advances the hash in SQL.
    """
    return hashlib.sha256(bytes(running) + item(operation_id, claim_hash)).digest()


@dataclass(frozen=True, slots=True)
class AnchorHead:
    """How many claims a ledger's anchor held at one moment, and the running hash over them."""

    count: int
    running: bytes

    def to_json(self) -> dict[str, Any]:
        """Return the head as the JSON object ``anchor export`` writes."""
        return {"format": FORMAT, "count": self.count, "running": self.running.hex()}

    @classmethod
    def from_json(cls, data: object) -> AnchorHead:
        """Return the head in ``data`` (as :meth:`to_json` wrote it); InvalidRequestError if not."""
        try:
            if not isinstance(data, dict) or data.get("format") != FORMAT:
                msg = f"not an effectguard anchor (expected format {FORMAT!r})"
                raise ValueError(msg)  # noqa: TRY301 - one message for every malformed head
            count, running = data["count"], bytes.fromhex(data["running"])
            if not isinstance(count, int) or count < 0:
                msg = f"count must be a whole number >= 0, not {count!r}"
                raise ValueError(msg)  # noqa: TRY301 - one message for every malformed head
        except (KeyError, TypeError, ValueError) as exc:
            msg = f"cannot read the anchor head: {exc}"
            raise InvalidRequestError(msg) from exc
        return cls(count, running)

    @classmethod
    def loads(cls, text: str) -> AnchorHead:
        """Return the head in JSON ``text``."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            msg = f"cannot read the anchor head: {exc}"
            raise InvalidRequestError(msg) from exc
        return cls.from_json(data)


#: One anchor row as :func:`check` reads it: seq, operation id, running hash, whether the
#: operation row exists, and the hash of its first event (None if it has none).
AnchorRow = tuple[int, str, bytes, bool, "bytes | None"]


def check_anchor(
    claims: Iterable[Sequence[Any]], unanchored: Iterable[str], expected: AnchorHead | None = None
) -> tuple[list[VerifyProblem], AnchorHead]:
    """Walk the anchor in ``seq`` order; return its problems and its head.

    ``claims`` yields :data:`AnchorRow` rows (a running hash None: not filled in
    yet); ``unanchored`` names operations that have a row but no claim in the
    anchor (inserted behind the ledger's back). With ``expected`` (a head
    exported earlier), also reports an anchor that no longer extends it.
    """
    problems: list[VerifyProblem] = []
    running = START
    count = 0
    at_expected: bytes | None = START if expected is not None and expected.count == 0 else None
    for seq, operation_id, stored, exists, first in claims:
        count += 1
        if seq != count:
            problems.append(
                VerifyProblem(
                    operation_id, None, f"anchor claim {count} is missing (found {seq} instead)"
                )
            )
            count = seq
        if not exists and stored is not None:
            # Its first event is gone with it: trust the stored hash to check the claims after.
            running = bytes(stored)
        else:
            # A claim whose running hash is not filled in yet (it is filled in later, in
            # order) is hashed here as it will be: what the anchor's head will say.
            running = advance(running, operation_id, b"" if first is None else bytes(first))
        if stored is not None and bytes(stored) != running:
            problems.append(
                VerifyProblem(
                    operation_id,
                    None,
                    f"anchor running hash breaks at claim {seq} (the anchor table or the "
                    "operation's first event was edited)",
                )
            )
            running = bytes(stored)
        if expected is not None and seq == expected.count:
            at_expected = running
        if not exists:
            problems.append(
                VerifyProblem(
                    operation_id,
                    None,
                    f"operation was claimed (anchor claim {seq}) but its row is gone (deleted)",
                )
            )
    problems.extend(
        VerifyProblem(operation_id, None, "operation is not in the claims anchor")
        for operation_id in unanchored
    )
    head = AnchorHead(count, running)
    if expected is not None:
        problem = compare(expected, at_expected, head)
        if problem is not None:
            problems.append(VerifyProblem("(anchor)", None, problem))
    return problems, head


def compare(expected: AnchorHead, running_then: bytes | None, current: AnchorHead) -> str | None:
    """Return why the anchor no longer extends the ``expected`` head (None if it does).

    ``running_then`` is the anchor's running hash now at claim ``expected.count``.
    """
    if expected.count > current.count:
        return (
            f"the anchor holds {current.count} claims but the exported head had "
            f"{expected.count}: claims were deleted and the anchor rewound"
        )
    if running_then != expected.running:
        return (
            f"the running hash at claim {expected.count} differs from the exported head: "
            "the anchor was rewritten"
        )
    return None


def joined(heads: Sequence[AnchorHead]) -> AnchorHead:
    """Return the head of an anchor kept in shards, from each shard's head in shard order.

    Its ``count`` is every shard's claims; its ``running`` is each shard's
    count (8 bytes, big-endian) and running hash (32 bytes, zeros while the
    shard is empty), in order, so an exported head still pins every shard.
    """
    encoded = b"".join(
        head.count.to_bytes(8, "big") + bytes(head.running)[:32].ljust(32, b"\0") for head in heads
    )
    return AnchorHead(sum(head.count for head in heads), encoded)


def shards_of(head: AnchorHead) -> tuple[AnchorHead, ...] | None:
    """Return the shard heads a :func:`joined` head holds, or None for a single chain's head."""
    running = bytes(head.running)
    if len(running) in (0, 32) or len(running) % _SHARD_HEAD:
        return None
    shards = []
    for start in range(0, len(running), _SHARD_HEAD):
        count = int.from_bytes(running[start : start + 8], "big")
        hashed = running[start + 8 : start + _SHARD_HEAD] if count else START
        shards.append(AnchorHead(count, hashed))
    return tuple(shards)


def check_shards(
    claims: Iterable[Sequence[Any]],
    unanchored: Iterable[str],
    shards: int,
    expected: AnchorHead | None = None,
) -> tuple[list[VerifyProblem], AnchorHead]:
    """Walk an anchor kept in ``shards`` chains; return its problems and its :func:`joined` head.

    ``claims`` yields ``(shard, *AnchorRow)`` rows ordered by shard, then
    ``seq``; each shard is one chain, checked as :func:`check_anchor` checks the
    whole anchor. ``expected`` is a head exported earlier: a joined one pins
    every shard; a single chain's (exported before the anchor was sharded)
    pins shard 0, which continues that chain.
    """
    pinned = shards_of(expected) if expected is not None else None
    if expected is not None and pinned is None:
        pinned = (expected,)
    problems: list[VerifyProblem] = []
    if pinned is not None and len(pinned) > shards:
        problems.append(
            VerifyProblem(
                "(anchor)",
                None,
                f"the exported head has {len(pinned)} anchor shards but the ledger has {shards}: "
                "the anchor was rewritten",
            )
        )
    heads = [AnchorHead(0, START)] * shards
    walked: set[int] = set()
    for shard, rows in itertools.groupby(claims, key=lambda row: int(row[0])):
        if not 0 <= shard < shards:
            msg = f"anchor shard {shard} is not one of the ledger's {shards} shards"
            problems.append(VerifyProblem("(anchor)", None, msg))
            continue
        walked.add(shard)
        found, heads[shard] = check_anchor((row[1:] for row in rows), (), _pin(pinned, shard))
        problems.extend(found)
    for shard in range(shards):
        if shard not in walked and _pin(pinned, shard) is not None:
            found, _ = check_anchor((), (), _pin(pinned, shard))
            problems.extend(found)
    problems.extend(
        VerifyProblem(operation_id, None, "operation is not in the claims anchor")
        for operation_id in unanchored
    )
    return problems, joined(heads)


def _pin(pinned: tuple[AnchorHead, ...] | None, shard: int) -> AnchorHead | None:
    return pinned[shard] if pinned is not None and shard < len(pinned) else None


def merged(
    report: VerifyReport, problems: Sequence[VerifyProblem], head: AnchorHead
) -> VerifyReport:
    """Return the chains' ``report`` with the anchor's ``problems`` and ``head`` added."""
    return dataclasses.replace(
        report,
        problems=(*report.problems, *problems),
        anchored=head.count,
        anchor_running=head.running,
    )
