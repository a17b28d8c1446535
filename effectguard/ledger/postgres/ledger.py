"""The PostgreSQL ledger: the SQLite ledger's guarantees, shared by workers on many hosts.

**Claims.** One ``INSERT … ON CONFLICT DO NOTHING`` that also inserts the
PREPARED and DISPATCHED events (a data-modifying CTE, in autocommit): of any
number of racing claimants on any hosts exactly one creates the row, and the
row and its events are committed, durably, when that statement returns. The
same statement returns the row it found when the id is taken (writing
nothing), so a claim is also a call's first read (``claims_first``). Each
claim appends to one of the claims anchor's 16 shards, the first whose head
no other uncommitted claim holds, so claims do not queue on one row lock.

**Every later write is optimistic.** The writer reads the row (its event count
and chain head, and the server's time, in one round trip), checks its
:class:`~effectguard.ledger.protocol.Expect`, hashes the new events here, then runs
one conditional ``UPDATE`` that also inserts the events. Its WHERE clause
encodes the ``Expect`` (status set, exact lease token, lease expired at that
time) *and* "the event count is still the one I read", so the chain is always
extended from the head it was computed on. Zero rows updated means the row
moved: it is read again, and the write either fails with the reason
(:class:`~effectguard.errors.FencedWriteError`) or is computed again on the new
head. No transaction spans round trips and no row lock is held while Python
hashes: two round trips per write, where ``SELECT … FOR UPDATE`` needs four
(BEGIN, SELECT, write, COMMIT) and makes every other writer of that row wait.
A lease renewal changes neither count nor head, and a transition sets only the
columns it changes, so it never undoes a renewal that slipped in between.

**Usually one round trip.** A write whose thread read or wrote the same
operation less than a second ago starts from that view instead of reading:
the row as it was then, and the server's time then plus the time elapsed
here (:mod:`effectguard.ledger.postgres.recent`). The conditional statement
makes a stale view harmless (it changes nothing and the write reads and
retries as above), so a guarded call (claim, outcome) takes two round trips.
A claim has no row to start from, only the server's time: it uses the last
time any statement reported plus the time elapsed here, which the claim
statement refuses when it is more than 0.5 s off the server's clock.

**Time.** Without an explicit ``now`` (or a ``clock=``), the database server's
clock is the ledger's clock: the time read with the row (or, within a second
of such a read, that time plus the time elapsed since) is the one the lease
check, the event times and any new lease expiry use, so hosts whose clocks
disagree still agree on when a lease expires.

**Lost connections.** A connection found broken (a restart, a failover,
``pg_terminate_backend``) is replaced and the call tried once more, without
ever applying a write twice: reads and renewals simply run again; a claim
recognises its own row by its lease token; a transition recognises its own
write by the event it would have appended (the hash at its sequence number),
even when other writers appended more since. After a write whose answer was
lost, the row is read back, on new connections, until ``timeout`` has passed,
so a committed write returns its real outcome; only when the row cannot be
read back does the call raise
:class:`~effectguard.ledger.postgres.connections.ConnectionLost`. Anything
else surfaces as :class:`~effectguard.errors.LedgerUnavailableError` (or a subclass).

The driver is imported in :mod:`effectguard.ledger.postgres.connections`
only (a pool per process, fork-safe, and the one boundary driver errors are
translated at); the SQL text and the row mapping are driver-free modules.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, NoReturn, Self, TypeVar

from effectguard.errors import (
    ConfigurationError,
    FencedWriteError,
    InternalError,
    LedgerLockedError,
    LedgerNotFoundError,
    LedgerSchemaError,
    LedgerUnavailableError,
    OperationNotFoundError,
)
from effectguard.fingerprint import check_operation_id
from effectguard.ledger import anchor as anchors
from effectguard.ledger import bulk, chain, committed, retention
from effectguard.ledger.anchor import AnchorHead
from effectguard.ledger.postgres import pruning, rows
from effectguard.ledger.postgres.connections import (
    Connection,
    ConnectionLost,
    Connections,
    Tombstoned,
    describe,
)
from effectguard.ledger.postgres.recent import Recent
from effectguard.ledger.postgres.sql import (
    ANCHOR_MIGRATION,
    ANCHOR_SHARDS,
    SCHEMA_VERSION,
    Statements,
    advisory_lock_key,
    split_target,
)
from effectguard.ledger.protocol import (
    UNSET,
    Changes,
    EventDraft,
    Expect,
    NewOperation,
    check_limit,
    describe_mismatch,
)
from effectguard.ledger.resolution import OperatorResolution
from effectguard.ledger.schema import POSTGRES
from effectguard.model import EffectEvent, EffectStatus, OperationRecord, VerifyReport

__all__ = ["SCHEMA_VERSION", "PostgresEffectLedger"]

# A write that keeps finding its row changed by others gives up after this many reads.
T = TypeVar("T")

_WRITE_ROUNDS = 16
# Rows fetched per round trip while verify streams the chains.
_VERIFY_BATCH = 2000
# The SQLSTATE of a duplicate key (unique_violation).
_UNIQUE_VIOLATION = "23505"
# How far a claim's estimate of the server's clock may be off before the server refuses it.
_CLAIM_SKEW = timedelta(milliseconds=500)

_SchemaState = tuple[bool, bool, bool, int]


class PostgresEffectLedger(OperatorResolution, pruning.PostgresPruning):
    """An :class:`~effectguard.ledger.protocol.EffectLedger` in a PostgreSQL schema.

    ``url`` is a libpq URL or conninfo string; its tables live in ``schema``
    (default ``effectguard``; a ``?schema=`` URL parameter works too), created
    with forward migrations on first open unless ``create=False``, in which case
    a missing ledger is a :class:`LedgerNotFoundError`. A ledger of a newer
    schema, or a schema holding tables that are not a ledger, is refused with
    :class:`LedgerSchemaError` and left as it was. ``pool_size`` caps this
    process's connections; ``timeout`` is how long a call waits for one.
    ``prepared_statements=False`` keeps psycopg from preparing statements on the
    server, for poolers that cannot carry them (PgBouncer in transaction mode
    before 1.21). ``clock`` (epoch seconds) replaces the server's clock when a
    call passes no ``now``.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        pool_size: int = 5,
        timeout: float = 10.0,
        create: bool = True,
        prepared_statements: bool = True,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not isinstance(url, str):
            msg = f"a PostgreSQL ledger needs a URL string, not {type(url).__name__}"
            raise TypeError(msg)
        if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 1:
            msg = f"pool_size must be an int >= 1, not {pool_size!r}"
            raise ConfigurationError(msg)
        if not (
            isinstance(timeout, (int, float))
            and not isinstance(timeout, bool)
            and 0 < timeout <= threading.TIMEOUT_MAX
        ):
            msg = (
                "timeout must be > 0 seconds and at most threading.TIMEOUT_MAX "
                f"({threading.TIMEOUT_MAX:g}), not {timeout!r}"
            )
            raise ConfigurationError(msg)
        conninfo, self.schema = split_target(url, schema)
        self._where = describe(conninfo)
        self.pool_size = pool_size
        self.timeout = float(timeout)
        self._clock = clock
        self._sql = Statements(self.schema)
        self._recent = Recent()
        self._db = Connections(
            conninfo,
            label=f"ledger {self._where} (schema {self.schema})",
            pool_size=pool_size,
            timeout=self.timeout,
            prepared_statements=prepared_statements,
        )
        self._prepare(create=create)

    #: A claim finds an existing row in its one round trip and writes nothing then.
    claims_first = True

    def __repr__(self) -> str:
        return f"PostgresEffectLedger({self._where!r}, schema={self.schema!r})"

    # -- schema ------------------------------------------------------------------------

    def _prepare(self, *, create: bool) -> None:
        """Check the schema holds a ledger this library can use, then migrate it forward."""
        with self._db.direct() as conn:
            state = self._inspect(conn)
            if state[3] == SCHEMA_VERSION:
                return
            self._refuse(state, create=create)
            with conn.transaction():
                # Two processes opening an empty database at once: one migrates,
                # the other waits here, then finds the work done.
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_lock_key(self.schema),))
                state = self._inspect(conn)
                self._refuse(state, create=create)
                schema_exists, _, _, version = state
                if not schema_exists:
                    conn.execute(f"CREATE SCHEMA {self._sql.qualified}")
                conn.execute(self._sql.bootstrap)
                for number in range(version + 1, SCHEMA_VERSION + 1):
                    conn.execute(self._sql.migration(number))
                    conn.execute(self._sql.record_version, (number,))
                if version < ANCHOR_MIGRATION:
                    # Operations claimed before the anchor existed join its shard 0.
                    self._anchor_unanchored(conn)

    def _anchor_unanchored(self, conn: Connection) -> None:
        """Anchor every operation not yet anchored, in id order (migration, bulk load)."""
        head = conn.execute(self._sql.anchor_head).fetchone()
        if head is None:
            msg = f"the claims anchor of schema {self.schema!r} has no head row"
            raise InternalError(msg)
        seq, running = int(head[0]), bytes(head[1])
        claims = []
        for operation_id, first in conn.execute(self._sql.unanchored).fetchall():
            claim_hash = b"" if first is None else bytes(first)
            seq += 1
            running = anchors.advance(running, operation_id, claim_hash)
            claims.append((0, seq, operation_id, running))
        if not claims:
            return
        # One COPY and one head update, not a statement (and a head row version) per claim.
        with conn.cursor() as cursor, cursor.copy(self._sql.copy_claims) as copy:
            for claim in claims:
                copy.write_row(claim)
        conn.execute(self._sql.set_anchor_head, (seq, running))

    def _inspect(self, conn: Connection) -> _SchemaState:
        """Return (schema exists, version table exists, ledger tables exist, version)."""
        row = conn.execute(self._sql.inspect, {"schema": self.schema}).fetchone()
        if row is None:
            msg = "the schema inspection query returned no row"
            raise InternalError(msg)
        schema_exists, versioned, tables = bool(row[0]), bool(row[1]), bool(row[2])
        version = 0
        if versioned:
            found = conn.execute(self._sql.version).fetchone()
            version = int(found[0]) if found is not None else 0
        return schema_exists, versioned, tables, version

    def _refuse(self, state: _SchemaState, *, create: bool) -> None:
        _, versioned, tables, version = state
        where = f"schema {self.schema!r} of {self._where}"
        if tables and not versioned:
            msg = f"{where} holds tables that are not an effectguard ledger"
            raise LedgerSchemaError(msg)
        if version > SCHEMA_VERSION:
            msg = (
                f"the ledger in {where} has schema version {version}, newer than this "
                f"effectguard supports ({SCHEMA_VERSION}); upgrade effectguard"
            )
            raise LedgerSchemaError(msg)
        if not versioned and not create:
            msg = f"no effectguard ledger in {where} (reads never create one)"
            raise LedgerNotFoundError(msg)

    # -- reading -----------------------------------------------------------------------

    def _given(self, now: float | None) -> datetime | None:
        """The ledger's now unless it is the server's: the caller's, else the ``clock``'s."""
        if now is None and self._clock is not None:
            now = self._clock()
        return None if now is None else rows.moment(now)

    def _fetch(
        self, operation_id: str, now: float | None
    ) -> tuple[OperationRecord | None, datetime]:
        """Read the operation and the ledger's now in one round trip."""

        def work(conn: Connection) -> tuple[Any, ...]:
            row = conn.execute(self._sql.select_one, (operation_id,)).fetchone()
            if row is None:
                msg = f"the read of {operation_id!r} returned no row, not even the clock's"
                raise InternalError(msg)
            return row

        row = self._db.read(work)
        server_time = rows.utc(row[0])
        at = self._given(now) or server_time
        record = None if row[1] is None else POSTGRES.record(row[1:], at)
        self._recent.saw(operation_id, record, server_time)
        return record, at

    def _read_back(
        self, operation_id: str, now: float | None
    ) -> tuple[OperationRecord | None, datetime]:
        """Read the row after a write whose answer was lost, trying new connections until timeout.

        A restarting server or a failover breaks more than one connection, so
        one more try is not enough to learn what the lost write did.
        """
        deadline = time.monotonic() + self.timeout
        while True:
            self._db.recover()
            try:
                return self._fetch(operation_id, now)
            except ConnectionLost as again:
                if time.monotonic() >= deadline:
                    msg = (
                        f"lost the connection to {self._where} while writing operation "
                        f"{operation_id!r}, and could not read it back within {self.timeout:g}s "
                        "to learn whether the write committed; the operation stays as the "
                        "ledger has it, and a later call reads it and reconciles"
                    )
                    raise ConnectionLost(msg) from again
            time.sleep(min(0.05, self.timeout / 20))

    def _wrote(
        self, operation_id: str, current: OperationRecord, heads: Sequence[tuple[int, bytes]]
    ) -> bool:
        """True when one of the writes that produced ``heads`` (count, head) is in the chain."""
        if any((current.event_count, current.event_head) == head for head in heads):
            return True
        if not any(current.event_count > count for count, _ in heads):
            return False
        # Others appended after it: the event at its sequence number still carries its hash.
        chain = self.events(operation_id)
        return any(
            0 < count <= len(chain) and chain[count - 1].hash == head for count, head in heads
        )

    def _start(
        self, operation_id: str, expect: Expect, now: float | None
    ) -> tuple[OperationRecord | None, datetime]:
        """The row and time a transition starts from: a moment-old guess if it passes, or a read."""
        seen = self._recent.get(operation_id)
        if seen is not None and seen.record is not None:
            guess = seen.record
            if describe_mismatch(guess, expect, lease_expired=not guess.lease_live) is None:
                return guess, self._given(now) or seen.server_now()
        return self._fetch(operation_id, now)

    # -- primitives --------------------------------------------------------------------

    def claim(
        self, operation: NewOperation, events: Sequence[EventDraft], *, now: float | None = None
    ) -> tuple[OperationRecord, bool]:
        """See :meth:`EffectLedger.claim`: one round trip, whether it inserts or finds the row."""
        operation_id = operation.operation_id
        given = self._given(now)
        # The events' times are hashed, so the claim needs the server's time before it
        # is sent: an estimate the statement checks, else (first use) a read.
        skew: timedelta | None = None if given is not None else _CLAIM_SKEW
        if given is None and self._recent.server_now() is None:
            existing, fresh = self._fetch(operation_id, None)
            if existing is not None:
                return existing, False
            skew, given = None, fresh
        lost = False
        for _ in range(_WRITE_ROUNDS):
            try:
                row, moment = self._db.run(
                    functools.partial(self._insert, operation, events, given, skew)
                )
            except Tombstoned as exc:
                self._refuse_tombstoned(operation, exc)
            except ConnectionLost:
                lost = True
                existing, _ = self._read_back(operation_id, now)
                if existing is not None:
                    # After a lost connection, only this claim's own token proves it committed.
                    return existing, existing.lease_token == operation.lease.token
                continue
            server_time = rows.utc(row[0])
            if row[1]:
                record = POSTGRES.record(row[2:], moment)
                self._recent.saw(operation_id, record, server_time)
                return record, True
            if row[2] is not None:
                record = POSTGRES.record(row[2:], self._given(now) or server_time)
                self._recent.saw(operation_id, record, server_time)
                return record, lost and record.lease_token == operation.lease.token
            # Nothing visible: the estimate was refused (try the server's own time, unchecked,
            # as a read would give it) or a claim that raced this one committed after it began.
            self._recent.clock(server_time)
            skew = None
        msg = f"could not claim operation {operation_id!r}: it keeps changing"
        raise LedgerLockedError(msg)

    def _refuse_tombstoned(self, operation: NewOperation, exc: Tombstoned) -> NoReturn:
        stone = self.tombstone(operation.operation_id)
        if stone is None:
            msg = f"operation {operation.operation_id!r} was refused as pruned but has no tombstone"
            raise InternalError(msg) from exc
        raise retention.refusal(stone, operation.fingerprint) from exc

    def _run(self, work: Callable[[Connection], T]) -> T:
        return self._db.run(work)

    def _run_read(self, work: Callable[[Connection], T]) -> T:
        return self._db.read(work)

    def _server_now(self) -> float:
        if self._clock is not None:
            return self._clock()
        row = self._db.read(lambda conn: conn.execute("SELECT statement_timestamp()").fetchone())
        return float(row[0].timestamp()) if row is not None else time.time()

    def _insert(
        self,
        operation: NewOperation,
        events: Sequence[EventDraft],
        given: datetime | None,
        skew: timedelta | None,
        conn: Connection,
    ) -> tuple[tuple[Any, ...], datetime]:
        """Run the claim statement, dated once a connection is in hand; its row and that date."""
        moment = given or self._recent.server_now()
        if moment is None:
            msg = f"no server time to date the claim of {operation.operation_id!r} with"
            raise InternalError(msg)
        params = rows.created(operation, events, moment)
        params["skew"] = skew
        row = conn.execute(self._sql.claim, params).fetchone()
        if row is None:
            msg = f"the claim of {operation.operation_id!r} returned no row, not even the clock's"
            raise InternalError(msg)
        return row, moment

    def transition(
        self,
        operation_id: str,
        expect: Expect,
        changes: Changes,
        events: Sequence[EventDraft],
        *,
        now: float | None = None,
    ) -> OperationRecord:
        """See :meth:`EffectLedger.transition`."""
        conditions = []
        if expect.statuses is not None:
            conditions.append("o.status = ANY(%(statuses)s::text[])")
        if expect.lease_token is None:
            conditions.append("o.lease_token IS NULL")
        elif expect.lease_token is not UNSET:
            conditions.append("o.lease_token = %(expect_token)s")
        if expect.lease_expired:
            conditions.append(
                "(o.lease_token IS NULL OR o.lease_expires_at IS NULL"
                " OR o.lease_expires_at <= %(at)s)"
            )
        # (count, head) of every attempt whose answer was lost: any of them may have committed.
        lost: list[tuple[int, bytes]] = []
        current, moment = self._start(operation_id, expect, now)
        for _ in range(_WRITE_ROUNDS):
            if current is None:
                raise OperationNotFoundError(operation_id)
            if lost and self._wrote(operation_id, current, lost):
                return current  # the write whose acknowledgement was lost did commit
            problem = describe_mismatch(current, expect, lease_expired=not current.lease_live)
            if problem is not None:
                msg = f"write to operation {operation_id!r} refused: {problem}"
                raise FencedWriteError(msg)
            columns = POSTGRES.changed_columns(changes, chain.to_micros(moment))
            params = rows.chain_parameters(
                operation_id,
                events,
                current.event_count,
                current.event_head,
                moment,
                committed.commitments(columns),
            )
            params.update(columns)
            params.update(
                operation_id=operation_id,
                read_count=current.event_count,
                statuses=sorted(status.value for status in expect.statuses or ()),
                expect_token=None if expect.lease_token is UNSET else expect.lease_token,
            )
            statement = self._sql.transition(columns, conditions)

            def work(conn: Connection, statement: str = statement, params: Any = params) -> Any:
                return conn.execute(statement, params).fetchone()

            try:
                row = self._db.run(work)
            except ConnectionLost:
                # Without events there is no chain head to recognise the write by.
                if not events:
                    raise
                lost.append((params["new_count"], params["new_head"]))
                current, moment = self._read_back(operation_id, now)
                continue
            if row is not None:
                record = POSTGRES.record(row, moment)
                self._recent.wrote(record)
                return record
            current, moment = self._fetch(operation_id, now)
        msg = f"could not write operation {operation_id!r}: it keeps changing"
        raise LedgerLockedError(msg)

    def renew(
        self, operation_id: str, lease_token: str, seconds: float, *, now: float | None = None
    ) -> None:
        """See :meth:`EffectLedger.renew`."""
        micros = round(seconds * 1_000_000)
        params: dict[str, Any] = {"operation_id": operation_id, "token": lease_token}
        given = self._given(now)
        if given is None:
            statement = self._sql.renew(server_clock=True)
            params["micros"] = micros
        else:
            statement = self._sql.renew(server_clock=False)
            params["expires"] = rows.after(given, seconds)

        def work(conn: Connection) -> int:
            return conn.execute(statement, params).rowcount

        # Renewing twice with one token is harmless, so a lost connection just retries.
        if self._db.read(work) == 0:
            msg = f"lease on operation {operation_id!r} is no longer held by this writer"
            raise FencedWriteError(msg)

    def get(self, operation_id: str, *, now: float | None = None) -> OperationRecord | None:
        """See :meth:`EffectLedger.get`."""
        check_operation_id(operation_id)
        return self._fetch(operation_id, now)[0]

    def list_operations(
        self,
        *,
        status: EffectStatus | None = None,
        contract: str | None = None,
        limit: int = 100,
    ) -> list[OperationRecord]:
        """See :meth:`EffectLedger.list_operations`."""
        check_limit(limit)
        clauses = []
        params: dict[str, Any] = {"limit": limit}
        if status is not None:
            clauses.append("o.status = %(status)s")
            params["status"] = EffectStatus(status).value
        if contract is not None:
            clauses.append("o.contract = %(contract)s")
            params["contract"] = contract
        statement = self._sql.select_many(clauses)

        def work(conn: Connection) -> list[tuple[Any, ...]]:
            return conn.execute(statement, params).fetchall()

        given = self._given(None)
        return [
            POSTGRES.record(row[:-1], given or rows.utc(row[-1])) for row in self._db.read(work)
        ]

    def events(self, operation_id: str) -> list[EffectEvent]:
        """See :meth:`EffectLedger.events`."""
        check_operation_id(operation_id)

        def work(conn: Connection) -> list[tuple[Any, ...]]:
            return conn.execute(self._sql.events, (operation_id,)).fetchall()

        return [POSTGRES.event(row) for row in self._db.read(work)]

    def commitments(self, operation_id: str) -> list[Mapping[str, Any]]:
        """See :func:`~effectguard.ledger.protocol.read_commitments`: no event decoded whole."""
        check_operation_id(operation_id)

        def work(conn: Connection) -> list[tuple[Any, ...]]:
            return conn.execute(self._sql.commitments, (operation_id,)).fetchall()

        return [json.loads(text) for (text,) in self._db.read(work)]

    def verify(self, *, anchor: AnchorHead | None = None) -> VerifyReport:
        """See :meth:`EffectLedger.verify`; streams, so memory holds one chain at a time."""
        return self._db.read(lambda conn: self._verify(conn, anchor))

    def anchor_head(self) -> AnchorHead:
        """See :meth:`EffectLedger.anchor_head`."""

        def work(conn: Connection) -> list[tuple[Any, ...]]:
            return conn.execute(self._sql.anchor_heads).fetchall()

        heads = [AnchorHead(0, anchors.START)] * ANCHOR_SHARDS
        for shard, count, running in self._db.read(work):
            heads[shard] = AnchorHead(int(count), bytes(running))
        return anchors.joined(heads)

    def _verify(self, conn: Connection, anchor: AnchorHead | None) -> VerifyReport:
        with (
            conn.transaction(),
            conn.cursor(name="effectguard_verify_heads") as heads,
            conn.cursor(name="effectguard_verify_events") as event_rows,
        ):
            # One snapshot for both streams, so a concurrent write is seen whole or not at all.
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            heads.itersize = event_rows.itersize = _VERIFY_BATCH
            heads.execute(self._sql.verify_heads)
            event_rows.execute(self._sql.verify_events)
            report = chain.verify(heads, map(POSTGRES.read_event, event_rows))
            unanchored = [row[0] for row in conn.execute(self._sql.unanchored)]
            with conn.cursor(name="effectguard_verify_claims") as claims:
                claims.itersize = _VERIFY_BATCH
                claims.execute(self._sql.verify_claims)
                problems, head = anchors.check_shards(claims, unanchored, ANCHOR_SHARDS, anchor)
            stones = pruning.tombstone_problems(conn, self._sql)
            return anchors.merged(report, [*problems, *stones], head)

    def bulk_load(self, operations: bulk.Loadable) -> int:
        """Write ``operations`` and their events as given, in one transaction; return how many.

        For building benchmark ledgers and restoring exported ones: it bypasses
        the state machine and writes each record and its events exactly as
        given (``lease_live`` is judged on read, as always), by ``COPY`` on a
        connection of its own. It never writes a chain ``verify()`` would
        reject: a broken chain, or an operation id already stored or given
        twice, raises :class:`InvalidRequestError` and nothing is written.
        Then refreshes the query planner's statistics.
        """
        loaded = 0
        try:
            with self._db.direct() as conn:
                with conn.transaction(), conn.cursor() as cursor:
                    for operation_rows, event_rows in bulk.chunks(POSTGRES, operations):
                        for statement, values in (
                            (self._sql.copy_operations, operation_rows),
                            (self._sql.copy_events, event_rows),
                        ):
                            with cursor.copy(statement) as copy:
                                for row in values:
                                    copy.write_row(row)
                        loaded += len(operation_rows)
                    self._anchor_unanchored(conn)
                conn.execute(self._sql.analyze)
        except LedgerUnavailableError as exc:
            if getattr(exc.__cause__, "sqlstate", None) == _UNIQUE_VIOLATION:
                raise bulk.duplicate_error(f"{self._where} (schema {self.schema})", exc) from exc
            raise
        return loaded

    def close(self) -> None:
        """Close this process's connections; the ledger is unusable afterwards."""
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
