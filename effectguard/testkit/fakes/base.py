"""What every fake provider shares: durable effects, planned faults, lookups.

A fake provider is the ground truth of a fault test: it counts what it really
committed, independently of anything the library reports.
"""

from __future__ import annotations

import abc
import contextlib
import enum
import json
import os
import signal
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from effectguard._model import OutcomeProbeResult
from effectguard.testkit.fakes.store import Store
from effectguard.testkit.faults import Fault, FaultPlan

__all__ = [
    "FakeProvider",
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


def _kill_this_process() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _earlier_response(
    conn: sqlite3.Connection, key: str, body: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The response of the committed request that used ``key``; None if no request used it.

    Raises:
        ProviderKeyMismatch: the key was used with a different body.
        ProviderConflict: the request that used the key has not committed yet.
    """
    row = conn.execute(
        "SELECT body, state FROM effects WHERE idempotency_key = ? ORDER BY seq", (key,)
    ).fetchone()
    if row is None:
        return None
    stored = json.loads(row[0])
    if stored["request"] != dict(body):
        msg = f"key {key!r} was used with different parameters"
        raise ProviderKeyMismatch(msg)
    if row[1] != "committed":
        msg = f"a request with key {key!r} is still being processed"
        raise ProviderConflict(msg)
    return dict(stored["response"])


class FakeProvider(abc.ABC):
    """The machinery of a fake provider; :class:`FakePaymentProvider` and kin add the API.

    ``requests`` and ``lookups`` count the calls this object received;
    :meth:`attempts`, :meth:`committed` and :meth:`effects` read the durable
    state, which every process sharing ``path`` sees.
    """

    def __init__(
        self,
        *,
        lookup: Lookup,
        visible_after_reads: int,
        faults: FaultPlan | None,
        path: str | os.PathLike[str] | None,
        late_commit_after: float,
    ) -> None:
        if visible_after_reads < 0:
            msg = f"visible_after_reads must be >= 0, not {visible_after_reads!r}"
            raise ValueError(msg)
        self.lookup_mode = Lookup(lookup)
        self.visible_after_reads = visible_after_reads
        self.faults = faults if faults is not None else FaultPlan()
        self.late_commit_after = late_commit_after
        self._store = Store(path)
        self._release = threading.Event()
        self._held = 0
        self._held_changed = threading.Condition()
        self._in_flight: set[str] = set()
        self._flight_lock = threading.Lock()
        self.requests = 0
        self.lookups = 0

    @property
    def path(self) -> str | None:
        """The file holding this provider's state, or None when it lives in memory."""
        return None if self._store.path is None else str(self._store.path)

    def close(self) -> None:
        """Release the provider's storage; a file-backed provider's state stays in its file."""
        self._store.close()

    # -- ground truth ------------------------------------------------------------------

    def committed(self, reference: str | None = None) -> int:
        """Return how many effects are committed (for ``reference``, or in all)."""
        return self._count("state = 'committed'", reference)

    def accepted(self, reference: str | None = None) -> int:
        """Return how many effects are committed or still pending (for ``reference``, or in all).

        A pending effect will commit: a resend while it is pending is a duplicate
        in the making.
        """
        return self._count("state IN ('committed', 'pending')", reference)

    def _count(self, condition: str, reference: str | None) -> int:
        query = f"SELECT count(*) FROM effects WHERE {condition}"  # noqa: S608 - constant conditions
        with self._store.transaction() as conn:
            if reference is None:
                row = conn.execute(query)
            else:
                row = conn.execute(f"{query} AND reference = ?", (reference,))
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
        """Return every committed effect as ``{"request": …, "response": …}``, in commit order."""
        with self._store.transaction() as conn:
            rows = conn.execute(
                "SELECT body FROM effects WHERE state = 'committed' ORDER BY seq"
            ).fetchall()
        return [json.loads(body) for (body,) in rows]

    def attempts(self, reference: str | None = None) -> int:
        """Return how many requests reached the provider (for ``reference``, or in all).

        Durable, unlike :attr:`requests`: it counts the requests of every process
        sharing ``path``, including one that was killed.
        """
        with self._store.transaction() as conn:
            if reference is None:
                row = conn.execute("SELECT coalesce(sum(count), 0) FROM attempts")
            else:
                row = conn.execute("SELECT count FROM attempts WHERE reference = ?", (reference,))
            found = row.fetchone()
            return 0 if found is None else int(found[0])

    # -- the API a contract uses ---------------------------------------------------------

    @abc.abstractmethod
    def handler(
        self, arguments: Mapping[str, Any], *, idempotency_key: str | None
    ) -> dict[str, Any]:
        """An executor handler performing this provider's effect for ``arguments``."""

    @abc.abstractmethod
    def probe(
        self, arguments: Mapping[str, Any], *, idempotency_key: str | None
    ) -> OutcomeProbeResult:
        """An outcome probe for ``arguments``, as strong as this provider's lookup."""

    # -- late commits ------------------------------------------------------------------

    def release_late(self) -> None:
        """Let every request held by a LATE_COMMIT fault go through now, and later ones at once."""
        self._release.set()

    def rearm_late(self) -> None:
        """Hold LATE_COMMIT requests again from now on (requests already released stay released)."""
        self._release = threading.Event()

    @property
    def held(self) -> int:
        """How many requests a LATE_COMMIT fault is holding right now."""
        with self._held_changed:
            return self._held

    def wait_until_held(self, count: int = 1, timeout: float = 10.0) -> bool:
        """Wait until at least ``count`` requests are held by LATE_COMMIT; False on timeout.

        Lets a test act while a handler is provably inside the provider, without sleeping.
        """
        with self._held_changed:
            return self._held_changed.wait_for(lambda: self._held >= count, timeout)

    def _hold(self) -> None:
        release = self._release
        with self._held_changed:
            self._held += 1
            self._held_changed.notify_all()
        try:
            release.wait(self.late_commit_after)
        finally:
            with self._held_changed:
                self._held -= 1
                self._held_changed.notify_all()

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

    @contextlib.contextmanager
    def _in_flight_as(self, key: str | None) -> Iterator[None]:
        """Mark ``key`` in flight while the block runs; a second request with it is a conflict."""
        if key is None:
            yield
            return
        with self._flight_lock:
            if key in self._in_flight:
                msg = f"a request with key {key!r} is still being processed"
                raise ProviderConflict(msg)
            self._in_flight.add(key)
        try:
            yield
        finally:
            with self._flight_lock:
                self._in_flight.discard(key)

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
        if fault is Fault.UNREACHABLE:
            self.requests -= 1  # refused at connect: the request never reached the provider
            msg = f"[Errno 111] Connection refused (request {reference!r} not sent)"
            raise ConnectionRefusedError(111, msg)
        if fault is Fault.CRASH_BEFORE_COMMIT:
            _kill_this_process()
        if fault is Fault.FAIL_BEFORE_COMMIT:
            msg = f"provider unavailable (request {reference!r} not processed)"
            raise ProviderUnavailable(msg)
        flight = key if (deduplicate and key is not None) else None
        with self._in_flight_as(flight):
            if fault is Fault.LATE_COMMIT:
                self._hold()
            with self._store.transaction() as conn:
                if flight is not None:
                    earlier = _earlier_response(conn, flight, body)
                    if earlier is not None:
                        return earlier
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
