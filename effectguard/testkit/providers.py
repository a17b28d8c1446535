"""Fake providers that count what they really committed.

They are the ground truth of every fault test: the library's own report is
never trusted, the provider's committed-effect count is. State lives in a
SQLite file when ``path`` is given, so a provider can be shared by processes
(one of which may be killed with SIGKILL) and inspected afterwards.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import signal
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from effectguard.model import OutcomeProbeResult
from effectguard.testkit.faults import Fault, FaultPlan

__all__ = [
    "FakePaymentProvider",
    "Lookup",
    "ProviderConflict",
    "ProviderError",
    "ProviderKeyMismatch",
    "ProviderTimeout",
    "ProviderUnavailable",
]


class ProviderError(Exception):
    """A fake provider's failure, as a client library would raise it."""


class ProviderUnavailable(ProviderError):
    """The request failed; the client cannot tell whether anything committed."""


class ProviderTimeout(ProviderError):
    """No acknowledgement arrived in time; the request may have committed."""


class ProviderConflict(ProviderError):
    """A request with the same idempotency key is still being processed (HTTP 409)."""


class ProviderKeyMismatch(ProviderError):
    """The idempotency key was used before with different parameters (HTTP 422)."""


class Lookup(enum.StrEnum):
    """How far a provider's lookup can be trusted."""

    STRONG = "strong"
    """Read-your-writes: "not found" is authoritative."""

    EVENTUAL = "eventual"
    """A commit becomes visible only after some reads: "not found" proves nothing."""

    NONE = "none"
    """There is no lookup at all."""


_SCHEMA = """
CREATE TABLE IF NOT EXISTS effects (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    reference TEXT NOT NULL,
    idempotency_key TEXT,
    body TEXT NOT NULL,
    state TEXT NOT NULL,
    pending_reads INTEGER NOT NULL DEFAULT 0,
    reads INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS effects_by_reference ON effects (reference);
CREATE TABLE IF NOT EXISTS attempts (reference TEXT PRIMARY KEY, count INTEGER NOT NULL);
"""


class _Store:
    """The provider's own durable state, independent of any effectguard ledger."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = None if path is None else Path(path)
        self._lock = threading.RLock()
        self._local = threading.local()
        self._shared: sqlite3.Connection | None = None
        if self.path is None:
            self._shared = sqlite3.connect(
                ":memory:", isolation_level=None, check_same_thread=False
            )
            self._shared.executescript(_SCHEMA)
        else:
            with self._lock:
                # executescript manages its own transaction; the statements are idempotent.
                self._connection().executescript(_SCHEMA)

    def _connection(self) -> sqlite3.Connection:
        if self._shared is not None:
            return self._shared
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            assert self.path is not None  # noqa: S101 - set whenever there is no shared connection
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=30)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise


def _kill_this_process() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class _FakeProvider:
    """What the payment and email fakes share: durable effects, faults, lookups."""

    def __init__(
        self,
        *,
        lookup: Lookup,
        visible_after_reads: int,
        faults: FaultPlan | None,
        path: str | os.PathLike[str] | None,
        late_commit_after: float,
    ) -> None:
        self.lookup_mode = Lookup(lookup)
        self.visible_after_reads = visible_after_reads
        self.faults = faults or FaultPlan()
        self.late_commit_after = late_commit_after
        self._store = _Store(path)
        self._release = threading.Event()
        self._in_flight: set[str] = set()
        self._flight_lock = threading.Lock()
        self.requests = 0
        self.lookups = 0

    # -- ground truth ------------------------------------------------------------------

    def committed(self, reference: str | None = None) -> int:
        """Return how many effects are committed (for ``reference``, or in all)."""
        with self._store.transaction() as conn:
            if reference is None:
                row = conn.execute("SELECT count(*) FROM effects WHERE state = 'committed'")
            else:
                row = conn.execute(
                    "SELECT count(*) FROM effects WHERE state = 'committed' AND reference = ?",
                    (reference,),
                )
            count: int = row.fetchone()[0]
            return count

    def duplicates(self) -> int:
        """Return how many committed effects repeat a reference already committed."""
        with self._store.transaction() as conn:
            row = conn.execute(
                "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM effects "
                "WHERE state = 'committed' GROUP BY reference)"
            ).fetchone()
            count: int = row[0]
            return count

    def effects(self) -> list[dict[str, Any]]:
        """Return every committed effect's body, in commit order."""
        with self._store.transaction() as conn:
            rows = conn.execute(
                "SELECT body FROM effects WHERE state = 'committed' ORDER BY seq"
            ).fetchall()
        return [json.loads(body) for (body,) in rows]

    def release_late(self) -> None:
        """Let every request held by a LATE_COMMIT fault go through now."""
        self._release.set()

    # -- request path ------------------------------------------------------------------

    def _attempt(self, reference: str) -> int:
        with self._store.transaction() as conn:
            conn.execute(
                "INSERT INTO attempts (reference, count) VALUES (?, 1) "
                "ON CONFLICT (reference) DO UPDATE SET count = count + 1",
                (reference,),
            )
            count: int = conn.execute(
                "SELECT count FROM attempts WHERE reference = ?", (reference,)
            ).fetchone()[0]
            return count

    def _submit(
        self,
        reference: str,
        key: str | None,
        body: Mapping[str, Any],
        *,
        deduplicate: bool,
        make_response: Callable[[int], dict[str, Any]],
    ) -> dict[str, Any]:
        """Run one request through its planned fault; return the acknowledged response."""
        self.requests += 1
        fault = self.faults.fault_for(self._attempt(reference))
        if fault is Fault.CRASH_BEFORE_COMMIT:
            _kill_this_process()
        if fault is Fault.FAIL_BEFORE_COMMIT:
            msg = f"provider unavailable (request {reference!r} not processed)"
            raise ProviderUnavailable(msg)
        flight = key if (deduplicate and key is not None) else None
        if flight is not None:
            with self._flight_lock:
                if flight in self._in_flight:
                    msg = f"a request with key {flight!r} is still being processed"
                    raise ProviderConflict(msg)
                self._in_flight.add(flight)
        try:
            if fault is Fault.LATE_COMMIT:
                self._release.wait(self.late_commit_after)
            with self._store.transaction() as conn:
                if flight is not None:
                    row = conn.execute(
                        "SELECT body, state FROM effects WHERE idempotency_key = ? ORDER BY seq",
                        (flight,),
                    ).fetchone()
                    if row is not None:
                        stored = json.loads(row[0])
                        if stored["request"] != dict(body):
                            msg = f"key {flight!r} was used with different parameters"
                            raise ProviderKeyMismatch(msg)
                        if row[1] != "committed":
                            msg = f"a request with key {flight!r} is still being processed"
                            raise ProviderConflict(msg)
                        return dict(stored["response"])
                seq = conn.execute("SELECT coalesce(max(seq), 0) + 1 FROM effects").fetchone()[0]
                response = make_response(seq)
                state = "pending" if fault is Fault.PENDING else "committed"
                pending = self.faults.pending_probes if fault is Fault.PENDING else 0
                conn.execute(
                    "INSERT INTO effects (seq, reference, idempotency_key, body, state, "
                    "pending_reads) VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        seq,
                        reference,
                        key,
                        json.dumps({"request": dict(body), "response": response}),
                        state,
                        pending,
                    ),
                )
        finally:
            if flight is not None:
                with self._flight_lock:
                    self._in_flight.discard(flight)
        if fault in (Fault.LOSE_ACK, Fault.PENDING):
            msg = f"timed out waiting for the provider's answer to {reference!r}"
            raise ProviderTimeout(msg)
        if fault is Fault.CRASH_AFTER_COMMIT:
            _kill_this_process()
        return dict(response)

    def _find(self, reference: str) -> tuple[str, dict[str, Any]] | None:
        """Look ``reference`` up as the provider's lookup API would: ``(state, response)``."""
        self.lookups += 1
        with self._store.transaction() as conn:
            row = conn.execute(
                "SELECT seq, body, state, pending_reads, reads FROM effects "
                "WHERE reference = ? ORDER BY seq",
                (reference,),
            ).fetchone()
            if row is None:
                return None
            seq, body, state, pending_reads, reads = row
            conn.execute("UPDATE effects SET reads = reads + 1 WHERE seq = ?", (seq,))
            if state == "pending":
                if pending_reads > 0:
                    conn.execute(
                        "UPDATE effects SET pending_reads = pending_reads - 1 WHERE seq = ?", (seq,)
                    )
                    return "pending", {}
                conn.execute("UPDATE effects SET state = 'committed' WHERE seq = ?", (seq,))
            if self.lookup_mode is Lookup.EVENTUAL and reads < self.visible_after_reads:
                return None
            return "committed", json.loads(body)["response"]

    def _probe(self, reference: str) -> OutcomeProbeResult:
        if self.lookup_mode is Lookup.NONE:
            return OutcomeProbeResult.unknown({"lookup": "this provider has no lookup"})
        found = self._find(reference)
        if found is None:
            if self.lookup_mode is Lookup.STRONG:
                return OutcomeProbeResult.not_committed({"lookup": "not found (strong read)"})
            return OutcomeProbeResult.unknown({"lookup": "not found (eventually consistent read)"})
        state, response = found
        if state == "pending":
            return OutcomeProbeResult.pending({"lookup": "pending"})
        return OutcomeProbeResult.committed(
            response,
            provider_operation_id=str(response.get("id")),
            evidence={"lookup": "found", "id": response.get("id")},
        )


class FakePaymentProvider(_FakeProvider):
    """A payment API with Stripe-like idempotency keys, or none, and a lookup of chosen strength.

    With ``idempotency_guaranteed=True`` a capture resent with the same key
    returns the first response and commits nothing new; the same key with other
    parameters is refused; the same key while the first is still processing is
    a conflict. Without it, every request that reaches the provider commits.
    """

    def __init__(
        self,
        *,
        idempotency_guaranteed: bool = True,
        lookup: Lookup = Lookup.STRONG,
        visible_after_reads: int = 0,
        faults: FaultPlan | None = None,
        path: str | os.PathLike[str] | None = None,
        late_commit_after: float = 5.0,
    ) -> None:
        super().__init__(
            lookup=lookup,
            visible_after_reads=visible_after_reads,
            faults=faults,
            path=path,
            late_commit_after=late_commit_after,
        )
        self.idempotency_guaranteed = idempotency_guaranteed

    def capture(
        self, invoice_id: str, amount_cents: int, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Capture ``amount_cents`` for ``invoice_id``; returns the capture on acknowledgement."""
        reference = idempotency_key or f"invoice:{invoice_id}"
        body = {"invoice_id": invoice_id, "amount_cents": amount_cents}

        def response(seq: int) -> dict[str, Any]:
            return {"id": f"cap_{seq:06d}", "status": "succeeded", **body}

        return self._submit(
            reference,
            idempotency_key,
            body,
            deduplicate=self.idempotency_guaranteed,
            make_response=response,
        )

    def find_capture(self, reference: str) -> dict[str, Any] | None:
        """Look a capture up by idempotency key (or ``invoice:<id>`` without one)."""
        found = self._find(reference)
        return None if found is None or found[0] != "committed" else found[1]

    def probe(
        self, arguments: Mapping[str, Any], *, idempotency_key: str | None
    ) -> OutcomeProbeResult:
        """An outcome probe for a capture contract, as strong as this provider's lookup."""
        return self._probe(idempotency_key or f"invoice:{arguments['invoice_id']}")

    def handler(
        self, arguments: Mapping[str, Any], *, idempotency_key: str | None
    ) -> dict[str, Any]:
        """An executor handler capturing ``amount_cents`` for ``invoice_id`` from ``arguments``."""
        return self.capture(
            arguments["invoice_id"], arguments["amount_cents"], idempotency_key=idempotency_key
        )
