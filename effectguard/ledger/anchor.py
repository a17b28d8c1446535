"""The claims anchor: an append-only, hash-linked list of every operation ever claimed.

Each operation's events form their own chain, so deleting an operation row
together with all its events leaves nothing behind in that chain to notice.
The anchor closes that gap: every claim appends, in the claim's own commit,
``(seq, operation_id, running)`` to a ledger-wide table, where ``running`` is
the hash over every claim so far, each claim being its operation id and the
hash of its first event (:func:`advance`). ``verify`` then reports an
operation that is anchored but gone, a gap in the sequence, and a running hash
that no longer recomputes (the anchor, or an operation's first event, was edited).

What it cannot see alone: someone who deletes operations *and* rewrites the
anchor table consistently (recomputing every running hash after them). An
:class:`AnchorHead` exported to a place that writer cannot reach (``agent-effect-ops
anchor export``) catches that too: the head a ledger had once must still be
a prefix of its anchor (:func:`compare`).

Driver-free: both backends read and write the rows; the rules live here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from effectguard.errors import InvalidRequestError
from effectguard.model import VerifyProblem, VerifyReport

__all__ = [
    "FORMAT",
    "START",
    "AnchorHead",
    "advance",
    "check",
    "check_shards",
    "compare",
    "item",
    "joined",
    "merged",
    "shards_of",
]

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


def check(
    claims: Iterable[Sequence[Any]], unanchored: Iterable[str], expected: AnchorHead | None = None
) -> tuple[list[VerifyProblem], AnchorHead]:
    """Walk the anchor in ``seq`` order; return its problems and its head.

    ``claims`` yields :data:`AnchorRow` rows; ``unanchored`` names operations
    that have a row but no claim in the anchor (inserted behind the ledger's
    back). With ``expected`` (a head exported earlier), also reports an anchor
    that no longer extends it.
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
        if not exists:
            # Its first event is gone with it: trust the stored hash to check the claims after.
            running = bytes(stored)
        else:
            running = advance(running, operation_id, b"" if first is None else bytes(first))
        if bytes(stored) != running:
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
    ``seq``; each shard is one chain, checked as :func:`check` checks the
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
        found, heads[shard] = check((row[1:] for row in rows), (), _pin(pinned, shard))
        problems.extend(found)
    for shard in range(shards):
        if shard not in walked and _pin(pinned, shard) is not None:
            found, _ = check((), (), _pin(pinned, shard))
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
