"""What the SQLite ledger's storage costs a guarded call, part by part, with no Python around it.

Run from the repository root::

    python docs/storage_floor.py [ROUNDS]

One real guarded call writes the rows (its operation row, its chained events,
its claims-anchor entry) into a ledger file the ledger itself created. Then
each measure writes those same rows again, under new operation ids, with
plain ``sqlite3`` statements at the ledger's durability (WAL,
``synchronous=FULL``): a read, then the claim's commit, then the outcome's
commit, leaving out one part at a time. The floor is the bench's by-hand
baseline (a one-table insert + commit, update + commit). The measures are
interleaved in chunks of 50 calls, so a slow moment of the disk lands on all.
The output says how much of a guarded call's cost the stored guarantees
account for before any of effectguard's Python runs.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _checkout  # noqa: F401 - puts the checkout's benchmarks/ on sys.path

from benchmarks._calls import CONTRACT, arguments, handler, interleave_named
from benchmarks._sqlite_site import SQLiteRaw
from benchmarks._stats import floor_lines
from effectguard import EffectExecutor, SQLiteEffectLedger

# Calls of each measure per round, run in interleaved chunks of 50.
_CALLS = 800
#: The ledger's own indexes (not the primary keys' automatic ones), by name.
_INDEXES = "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"


def _ledger_file(path: Path) -> sqlite3.Connection:
    """A ledger file holding one real confirmed call, opened by plain sqlite3."""
    ledger = SQLiteEffectLedger(path)
    EffectExecutor(ledger).execute(CONTRACT, arguments("template", 0), handler)
    ledger.close()
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA busy_timeout = 10000")
    return conn


_IDS = itertools.count(1)


class Writer:
    """Writes a copy of the template call under a new id, with the parts asked for."""

    def __init__(self, conn: sqlite3.Connection, **parts: bool) -> None:
        self.conn, self.parts = conn, parts
        self.row = list(conn.execute("SELECT * FROM operations").fetchone())
        self.columns = [d[0] for d in conn.execute("SELECT * FROM operations").description]
        self.events = [list(e) for e in conn.execute("SELECT * FROM events ORDER BY seq")]
        # The claim commits the first event (claimed), the outcome the last (confirmed).
        self.claim_events, self.outcome_event = self.events[:-1], self.events[-1]
        names = [d[0] for d in conn.execute("SELECT * FROM events").description]
        self.insert_operation = _insert("operations", self.columns)
        self.insert_event = _insert("events", names)
        kept = [name for name in self.columns if name != "operation_id"]
        self.outcome = (
            f"UPDATE operations SET ({', '.join(kept)}) = ({', '.join('?' * len(kept))})"  # noqa: S608 - names from the ledger's own schema
            " WHERE operation_id = ? AND lease_token = ?"
        )

    def _wants(self, part: str) -> bool:
        return self.parts.get(part, True)

    def __call__(self) -> None:
        """One call's writes: read, claim and commit, outcome and commit."""
        number = next(_IDS)
        operation_id, token = f"floor:{number}", f"{number:032x}"
        claimed = [operation_id, *self.row[1:]]
        claimed[self.columns.index("lease_token")] = token
        execute, wants = self.conn.execute, self._wants
        if wants("read"):
            execute("SELECT * FROM operations WHERE operation_id = ?", (operation_id,)).fetchone()
        execute("BEGIN IMMEDIATE")
        if wants("tombstone"):
            execute("SELECT 1 FROM tombstones WHERE operation_id = ?", (operation_id,)).fetchone()
        execute(self.insert_operation, claimed)
        if wants("events"):
            for event in self.claim_events:
                execute(self.insert_event, _event(event, operation_id))
        if wants("anchor"):  # its running hash is filled in later, in batches, as the ledger does
            execute("INSERT INTO claims (operation_id) VALUES (?)", (operation_id,))
        execute("COMMIT")
        execute("BEGIN IMMEDIATE")
        execute(self.outcome, [*self.row[1:], operation_id, token])
        if wants("events"):
            execute(self.insert_event, _event(self.outcome_event, operation_id))
        execute("COMMIT")


def _insert(table: str, columns: list[str]) -> str:
    names, marks = ", ".join(columns), ", ".join("?" * len(columns))
    return f"INSERT INTO {table} ({names}) VALUES ({marks})"  # noqa: S608 - names from the ledger's own schema


def _event(event: list[Any], operation_id: str) -> list[Any]:
    """The template's event under ``operation_id``, with a hash of its own."""
    copied = [operation_id, *event[1:]]
    copied[8] = hashlib.sha256(f"{operation_id}:{event[1]}".encode()).digest()
    return copied


def measure(rounds: int) -> dict[str, list[float]]:
    """Microseconds per call of each measure, per round."""
    directory = Path(tempfile.mkdtemp(prefix="effectguard-floor-"))
    full = _ledger_file(directory / "full.db")
    bare = _ledger_file(directory / "bare.db")
    for (index,) in bare.execute(_INDEXES).fetchall():
        bare.execute(f"DROP INDEX {index}")
    raw, counter = SQLiteRaw(directory / "raw.db"), iter(range(10**9))

    def by_hand() -> None:
        n = next(counter)
        raw.record(f"raw:{n}", json.dumps(arguments("raw", n)), json.dumps({"n": n, "ok": True}))

    measures: dict[str, Callable[[], None]] = {
        "floor: by hand, one table, two commits": by_hand,
        "the ledger's rows, all of them": Writer(full),
        "  without the tombstone check": Writer(full, tombstone=False),
        "  without the claims anchor": Writer(full, anchor=False),
        "  without the chained events": Writer(full, events=False),
        "  without the secondary indexes": Writer(bare),
        "  the operation row alone": Writer(bare, tombstone=False, anchor=False, events=False),
    }
    return interleave_named(measures, rounds, _CALLS)


def main() -> None:
    """Print each measure's median microseconds per call and its ratio to the floor."""
    times = measure(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
    for line in floor_lines(times):
        sys.stdout.write(f"{line}\n")


if __name__ == "__main__":
    main()
