"""The SQLite ledger's claims anchor: every claim appended, in its own commit, to a running hash.

The hashing is :mod:`effectguard.ledger.anchor`'s, shared with PostgreSQL;
this module holds the SQLite statements and the two writes that use them: a
claim's anchoring, and anchoring every operation not yet anchored (when the
anchor is created by a migration, and after a bulk load).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from effectguard.ledger import anchor as anchors

__all__ = ["LAST_CLAIM", "UNANCHORED", "VERIFY_CLAIMS", "anchor", "anchor_unanchored"]

LAST_CLAIM = "SELECT seq, running FROM claims ORDER BY seq DESC LIMIT 1"
_INSERT_CLAIM = "INSERT INTO claims (seq, operation_id, running) VALUES (?, ?, ?)"
#: Every claim in order, whether its operation exists, and its first event's hash.
# A pruned operation's tombstone stands for its row and keeps its first event's hash.
VERIFY_CLAIMS = (
    "SELECT c.seq, c.operation_id, c.running,"
    " o.operation_id IS NOT NULL OR t.operation_id IS NOT NULL, coalesce(e.hash, t.first_hash)"
    " FROM claims AS c LEFT JOIN operations AS o ON o.operation_id = c.operation_id"
    " LEFT JOIN events AS e ON e.operation_id = c.operation_id AND e.seq = 1"
    " LEFT JOIN tombstones AS t ON t.operation_id = c.operation_id ORDER BY c.seq"
)
# No index on claims.operation_id (it would cost every claim): a set difference instead.
UNANCHORED = (
    "SELECT u.operation_id, e.hash FROM (SELECT operation_id FROM operations"
    " EXCEPT SELECT operation_id FROM claims) AS u"
    " LEFT JOIN events AS e ON e.operation_id = u.operation_id AND e.seq = 1"
    " ORDER BY u.operation_id"
)


def anchor(conn: sqlite3.Connection, claimed: Sequence[tuple[str, bytes]]) -> None:
    """Append ``(operation id, first event hash)`` claims to the anchor, under the write lock."""
    last = conn.execute(LAST_CLAIM).fetchone()
    seq, running = (0, anchors.START) if last is None else (last[0], bytes(last[1]))
    anchored = []
    for operation_id, claim_hash in claimed:
        seq += 1
        running = anchors.advance(running, operation_id, claim_hash)
        anchored.append((seq, operation_id, running))
    conn.executemany(_INSERT_CLAIM, anchored)


def anchor_unanchored(conn: sqlite3.Connection) -> None:
    """Anchor every operation not yet anchored, in operation id order."""
    anchor(
        conn,
        [(op, b"" if first is None else bytes(first)) for op, first in conn.execute(UNANCHORED)],
    )
