"""The PostgreSQL ledger: the SQLite ledger's guarantees, shared by workers on many hosts.

**Claims.** One ``INSERT … ON CONFLICT DO NOTHING`` that also inserts the
PREPARED and DISPATCHED events (a data-modifying CTE, in autocommit): of any
number of racing claimants on any hosts exactly one creates the row, and the
row and its events are committed, durably, when that statement returns.

**Every later write is optimistic.** The writer reads the row (its event count
and chain head, and the server's time, in one round trip), checks its
:class:`~effectguard.ledger.base.Expect`, hashes the new events here, then runs
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

**Time.** Without an explicit ``now`` (or a ``clock=``), the database server's
clock is the ledger's clock: the time read with the row is the one the lease
check, the event times and any new lease expiry use, so hosts whose clocks
disagree still agree on when a lease expires.

**Connections.** A ``psycopg_pool`` pool per process (a forked child opens its
own and never touches its parent's). A connection found broken (a restart, a
failover, ``pg_terminate_backend``) is replaced and the call tried once more:
reads and renewals simply run again; a claim recognises its own row by its
lease token; a transition recognises its own write by the chain head it would
have produced. Driver errors surface as
:class:`~effectguard.errors.LedgerUnavailableError` (or a subclass).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Self, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from effectguard.errors import (
    ConfigurationError,
    FencedWriteError,
    LedgerLockedError,
    LedgerNotFoundError,
    LedgerSchemaError,
    LedgerUnavailableError,
    OperationNotFoundError,
)
from effectguard.fingerprint import canonical_json, chain_hash
from effectguard.ledger import resolution
from effectguard.ledger._postgres_sql import (
    SCHEMA_VERSION,
    Statements,
    advisory_lock_key,
    split_target,
)
from effectguard.ledger.base import (
    UNSET,
    Changes,
    EventDraft,
    Expect,
    Lease,
    NewOperation,
    check_chain,
    describe_mismatch,
)
from effectguard.model import (
    EffectEvent,
    EffectStatus,
    EventType,
    LeaseOwner,
    OperationRecord,
    OverlapHolder,
    VerifyReport,
    chain_document,
    from_micros,
    to_micros,
)

__all__ = ["SCHEMA_VERSION", "PostgresEffectLedger"]

T = TypeVar("T")
_Conn = psycopg.Connection[tuple[Any, ...]]

# A write that keeps finding its row changed by others gives up after this many reads.
_WRITE_ROUNDS = 16
_VERIFY_BATCH = 2000
_MICROS = timedelta(microseconds=1)

# Pools inherited across fork() belong to the parent: the child keeps them
# referenced, never uses or closes them, so the parent's sessions stay intact.
_INHERITED: list[object] = []
_LEDGERS: weakref.WeakSet[PostgresEffectLedger] = weakref.WeakSet()


class _ConnectionLost(LedgerUnavailableError):
    """The connection broke during a call; whether a write committed is unknown."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo is UTC else moment.astimezone(UTC)


def _describe(conninfo: str) -> str:
    """Return where ``conninfo`` points, without its password."""
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        msg = f"invalid PostgreSQL URL: {_first_line(exc)}"
        raise ConfigurationError(msg) from exc
    user = f"{params['user']}@" if params.get("user") else ""
    host = str(params.get("host") or "localhost")
    port = f":{params['port']}" if params.get("port") else ""
    return f"postgresql://{user}{host}{port}/{params.get('dbname') or ''}"


class PostgresEffectLedger:
    """An :class:`~effectguard.ledger.base.EffectLedger` in a PostgreSQL schema.

    ``url`` is a libpq URL or conninfo string; its tables live in ``schema``
    (default ``effectguard``; a ``?schema=`` URL parameter works too), created
    with forward migrations on first open unless ``create=False``, in which case
    a missing ledger is a :class:`LedgerNotFoundError`. A ledger of a newer
    schema, or a schema holding tables that are not a ledger, is refused with
    :class:`LedgerSchemaError` and left as it was. ``pool_size`` caps this
    process's connections; ``timeout`` is how long a call waits for one.
    ``clock`` (epoch seconds) replaces the server's clock when a call passes no ``now``.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        pool_size: int = 5,
        timeout: float = 10.0,
        create: bool = True,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not isinstance(url, str):
            msg = f"a PostgreSQL ledger needs a URL string, not {type(url).__name__}"
            raise TypeError(msg)
        if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 1:
            msg = f"pool_size must be an int >= 1, not {pool_size!r}"
            raise ConfigurationError(msg)
        if not timeout > 0:
            msg = f"timeout must be > 0 seconds, not {timeout!r}"
            raise ConfigurationError(msg)
        self._conninfo, self.schema = split_target(url, schema)
        self._where = _describe(self._conninfo)
        self.pool_size = pool_size
        self.timeout = float(timeout)
        self._clock = clock
        self._sql = Statements(self.schema)
        self._kwargs: dict[str, Any] = {
            "autocommit": True,
            "fallback_application_name": "effectguard",
        }
        if "connect_timeout" not in conninfo_to_dict(self._conninfo):
            self._kwargs["connect_timeout"] = max(2, round(self.timeout))
        self._lock = threading.Lock()
        self._pool: ConnectionPool[_Conn] | None = None
        self._closed = False
        self._prepare(create=create)
        _LEDGERS.add(self)

    def __repr__(self) -> str:
        return f"PostgresEffectLedger({self._where!r}, schema={self.schema!r})"

    # -- connections -------------------------------------------------------------------

    @contextlib.contextmanager
    def _translate(self) -> Iterator[None]:
        where = f"ledger {self._where} (schema {self.schema})"
        try:
            yield
        except PoolTimeout as exc:
            msg = f"{where} is unavailable: no connection within {self.timeout:g}s"
            raise LedgerUnavailableError(msg) from exc
        except PoolClosed as exc:
            msg = f"{where} is closed"
            raise LedgerUnavailableError(msg) from exc
        except (
            pg_errors.LockNotAvailable,
            pg_errors.DeadlockDetected,
            pg_errors.QueryCanceled,
        ) as exc:
            msg = f"{where} is locked by another writer: {_first_line(exc)}"
            raise LedgerLockedError(msg) from exc
        except pg_errors.UndefinedTable as exc:
            msg = f"{where} has lost its tables: {_first_line(exc)}"
            raise LedgerUnavailableError(msg) from exc
        except psycopg.Error as exc:
            msg = f"{where} failed: {_first_line(exc)}"
            raise LedgerUnavailableError(msg) from exc

    def _configure(self, conn: _Conn) -> None:
        # Times come back in UTC, and a claim is durable before dispatch even on
        # a server whose default is synchronous_commit=off.
        conn.execute(
            "SET TIME ZONE 'UTC'; SELECT set_config('synchronous_commit', 'on', false)"
            " WHERE current_setting('synchronous_commit') = 'off'"
        )

    def _connect(self) -> _Conn:
        try:
            conn = psycopg.connect(self._conninfo, **self._kwargs)
        except psycopg.Error as exc:
            msg = f"cannot connect to ledger {self._where}: {_first_line(exc)}"
            raise LedgerUnavailableError(msg) from exc
        try:
            with self._translate():
                self._configure(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _pool_here(self) -> ConnectionPool[_Conn]:
        if self._closed:
            msg = f"ledger {self._where} (schema {self.schema}) is closed"
            raise LedgerUnavailableError(msg)
        pool = self._pool
        if pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = ConnectionPool(
                        self._conninfo,
                        kwargs=self._kwargs,
                        min_size=1,
                        max_size=self.pool_size,
                        timeout=self.timeout,
                        configure=self._configure,
                        name=f"effectguard-{self.schema}",
                        open=True,
                    )
                pool = self._pool
        return pool

    def _after_fork(self) -> None:
        if self._pool is not None:
            _INHERITED.append(self._pool)
        self._pool = None
        self._lock = threading.Lock()

    def _run(self, work: Callable[[_Conn], T]) -> T:
        """Run ``work`` on a pooled connection; :class:`_ConnectionLost` if it broke."""
        pool = self._pool_here()
        used: list[_Conn] = []
        with self._translate():
            try:
                with pool.connection() as conn:
                    used.append(conn)
                    return work(conn)
            except psycopg.OperationalError as exc:
                if used and used[0].broken:
                    msg = f"lost the connection to ledger {self._where}: {_first_line(exc)}"
                    raise _ConnectionLost(msg) from exc
                raise

    def _recover(self) -> None:
        """Replace every idle connection that broke with the one just lost."""
        pool = self._pool
        if pool is not None:
            with contextlib.suppress(psycopg.Error):
                pool.check()

    def _read(self, work: Callable[[_Conn], T]) -> T:
        """Run a statement that is safe to repeat, once more if the connection broke."""
        try:
            return self._run(work)
        except _ConnectionLost:
            self._recover()
            return self._run(work)

    # -- schema ------------------------------------------------------------------------

    def _prepare(self, *, create: bool) -> None:
        """Check the schema holds a ledger this library can use, then migrate it forward."""
        conn = self._connect()
        try:
            with self._translate():
                state = self._inspect(conn)
                if state[3] == SCHEMA_VERSION:
                    return
                self._refuse(state, create=create)
                with conn.transaction():
                    # Two processes opening an empty database at once: one migrates,
                    # the other waits here, then finds the work done.
                    conn.execute(
                        "SELECT pg_advisory_xact_lock(%s)", (advisory_lock_key(self.schema),)
                    )
                    state = self._inspect(conn)
                    self._refuse(state, create=create)
                    schema_exists, _, _, version = state
                    if not schema_exists:
                        conn.execute(f"CREATE SCHEMA {self._sql.qualified}")
                    conn.execute(self._sql.bootstrap)
                    for number in range(version + 1, SCHEMA_VERSION + 1):
                        conn.execute(self._sql.migration(number))
                        conn.execute(self._sql.record_version, (number,))
        finally:
            conn.close()

    def _inspect(self, conn: _Conn) -> tuple[bool, bool, bool, int]:
        """Return (schema exists, version table exists, ledger tables exist, version)."""
        row = conn.execute(self._sql.inspect, {"schema": self.schema}).fetchone()
        assert row is not None  # noqa: S101 - a SELECT without FROM returns one row
        schema_exists, versioned, tables = bool(row[0]), bool(row[1]), bool(row[2])
        version = 0
        if versioned:
            found = conn.execute(self._sql.version).fetchone()
            version = int(found[0]) if found is not None else 0
        return schema_exists, versioned, tables, version

    def _refuse(self, state: tuple[bool, bool, bool, int], *, create: bool) -> None:
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

    # -- time and rows -----------------------------------------------------------------

    def _given(self, now: float | None) -> datetime | None:
        """The ledger's now unless it is the server's: the caller's, else the ``clock``'s."""
        if now is None and self._clock is not None:
            now = self._clock()
        return None if now is None else from_micros(round(now * 1_000_000))

    @staticmethod
    def _record(row: Sequence[Any], now: datetime) -> OperationRecord:
        owner = _loads(row[14])
        expires = None if row[15] is None else _utc(row[15])
        return OperationRecord(
            operation_id=row[0],
            contract=row[1],
            contract_version=row[2],
            fingerprint=row[3],
            provider_key=row[4],
            status=EffectStatus(row[5]),
            attempts=row[6],
            attempt_budget=row[7],
            arguments=json.loads(row[8]),
            output_json=row[9],
            provider_operation_id=row[10],
            reason=row[11],
            evidence=_loads(row[12]) or {},
            lease_token=row[13],
            lease_owner=None if owner is None else LeaseOwner.from_json(owner),
            lease_expires_at=expires,
            lease_live=row[13] is not None and expires is not None and expires > now,
            overlap=tuple(OverlapHolder.from_json(item) for item in _loads(row[16]) or ()),
            created_at=_utc(row[17]),
            updated_at=_utc(row[18]),
            first_dispatched_at=_utc(row[19]),
            event_count=row[20],
            event_head=bytes(row[21]),
        )

    @staticmethod
    def _event(row: Sequence[Any]) -> EffectEvent:
        return EffectEvent(
            operation_id=row[0],
            seq=row[1],
            type=EventType(row[2]),
            from_status=None if row[3] is None else EffectStatus(row[3]),
            to_status=EffectStatus(row[4]),
            attempt=row[5],
            at=_utc(row[6]),
            evidence=_loads(row[7]) or {},
            hash=bytes(row[8]),
        )

    def _fetch(
        self, operation_id: str, now: float | None
    ) -> tuple[OperationRecord | None, datetime]:
        """Read the operation and the ledger's now in one round trip."""

        def work(conn: _Conn) -> tuple[Any, ...]:
            row = conn.execute(self._sql.select_one, (operation_id,)).fetchone()
            assert row is not None  # noqa: S101 - the outer SELECT always returns one row
            return row

        row = self._read(work)
        moment = self._given(now) or _utc(row[0])
        return (None if row[1] is None else self._record(row[1:], moment)), moment

    @staticmethod
    def _chain(
        operation_id: str,
        events: Sequence[EventDraft],
        count: int,
        head: bytes,
        at: datetime,
    ) -> dict[str, Any]:
        """Hash ``events`` onto the chain ending at ``head``; return the statement's parameters."""
        at_micros = to_micros(at)
        previous = head or None
        columns: dict[str, list[Any]] = {
            name: [] for name in ("seq", "type", "from", "to", "attempt", "evidence", "hash")
        }
        for draft in events:
            count += 1
            evidence = dict(draft.evidence)
            document = chain_document(
                operation_id,
                count,
                draft.type,
                draft.from_status,
                draft.to_status,
                draft.attempt,
                at_micros,
                evidence,
            )
            previous = chain_hash(previous, document)
            columns["seq"].append(count)
            columns["type"].append(draft.type.value)
            columns["from"].append(None if draft.from_status is None else draft.from_status.value)
            columns["to"].append(draft.to_status.value)
            columns["attempt"].append(draft.attempt)
            columns["evidence"].append(canonical_json(evidence) if evidence else None)
            columns["hash"].append(previous)
        params: dict[str, Any] = {f"e_{name}": values for name, values in columns.items()}
        params.update(at=at, new_count=count, new_head=previous or b"")
        return params

    # -- primitives --------------------------------------------------------------------

    def claim(
        self, operation: NewOperation, events: Sequence[EventDraft], *, now: float | None = None
    ) -> tuple[OperationRecord, bool]:
        """See :meth:`EffectLedger.claim`."""
        lease = operation.lease
        arguments = canonical_json(operation.arguments)
        owner = canonical_json(lease.owner.to_json())
        moment = self._given(now)
        if moment is None:
            # The events' times are hashed, so the server's time is needed first.
            existing, moment = self._fetch(operation.operation_id, None)
            if existing is not None:
                return existing, False
        params = self._chain(operation.operation_id, events, 0, b"", moment)
        params.update(
            operation_id=operation.operation_id,
            contract=operation.contract,
            contract_version=operation.contract_version,
            fingerprint=operation.fingerprint,
            provider_key=operation.provider_key,
            status=EffectStatus.DISPATCHED.value,
            attempt_budget=operation.attempt_budget,
            arguments=arguments,
            lease_token=lease.token,
            lease_owner=owner,
            lease_expires_at=moment + round(lease.seconds * 1_000_000) * _MICROS,
            event_count=params.pop("new_count"),
            event_head=params.pop("new_head"),
        )

        def work(conn: _Conn) -> tuple[Any, ...] | None:
            return conn.execute(self._sql.claim, params).fetchone()

        lost = False
        for _ in range(_WRITE_ROUNDS):
            try:
                row = self._run(work)
            except _ConnectionLost:
                if lost:
                    raise
                lost = True
                self._recover()
            else:
                if row is not None:
                    return self._record(row, moment), True
            existing, _ = self._fetch(operation.operation_id, now)
            if existing is not None:
                # After a lost connection, only this claim's own token proves it committed.
                return existing, lost and existing.lease_token == lease.token
        msg = f"could not claim operation {operation.operation_id!r}: it keeps changing"
        raise LedgerLockedError(msg)

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
        lost: tuple[int, bytes] | None = None
        current, moment = self._fetch(operation_id, now)
        for _ in range(_WRITE_ROUNDS):
            if current is None:
                raise OperationNotFoundError(operation_id)
            if lost is not None and (current.event_count, current.event_head) == lost:
                return current  # the write whose acknowledgement was lost did commit
            problem = describe_mismatch(current, expect, lease_expired=not current.lease_live)
            if problem is not None:
                msg = f"write to operation {operation_id!r} refused: {problem}"
                raise FencedWriteError(msg)
            params = self._chain(
                operation_id, events, current.event_count, current.event_head, moment
            )
            columns = _changed_columns(changes, moment)
            params.update(columns)
            params.update(
                operation_id=operation_id,
                read_count=current.event_count,
                statuses=sorted(status.value for status in expect.statuses or ()),
                expect_token=None if expect.lease_token is UNSET else expect.lease_token,
            )
            statement = self._sql.transition(columns, conditions)

            def work(conn: _Conn, statement: str = statement, params: Any = params) -> Any:
                return conn.execute(statement, params).fetchone()

            try:
                row = self._run(work)
            except _ConnectionLost:
                # Without events there is no chain head to recognise the write by.
                if lost is not None or not events:
                    raise
                lost = (params["new_count"], params["new_head"])
                self._recover()
            else:
                if row is not None:
                    return self._record(row, moment)
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
            params["expires"] = given + micros * _MICROS

        def work(conn: _Conn) -> int:
            return conn.execute(statement, params).rowcount

        # Renewing twice with one token is harmless, so a lost connection just retries.
        if self._read(work) == 0:
            msg = f"lease on operation {operation_id!r} is no longer held by this writer"
            raise FencedWriteError(msg)

    def get(self, operation_id: str, *, now: float | None = None) -> OperationRecord | None:
        """See :meth:`EffectLedger.get`."""
        return self._fetch(operation_id, now)[0]

    def list_operations(
        self,
        *,
        status: EffectStatus | None = None,
        contract: str | None = None,
        limit: int = 100,
    ) -> list[OperationRecord]:
        """See :meth:`EffectLedger.list_operations`."""
        if limit < 1:
            msg = f"limit must be >= 1, not {limit}"
            raise ValueError(msg)
        clauses = []
        params: dict[str, Any] = {"limit": limit}
        if status is not None:
            clauses.append("o.status = %(status)s")
            params["status"] = EffectStatus(status).value
        if contract is not None:
            clauses.append("o.contract = %(contract)s")
            params["contract"] = contract
        statement = self._sql.select_many(clauses)

        def work(conn: _Conn) -> list[tuple[Any, ...]]:
            return conn.execute(statement, params).fetchall()

        given = self._given(None)
        return [self._record(row[:-1], given or _utc(row[-1])) for row in self._read(work)]

    def events(self, operation_id: str) -> list[EffectEvent]:
        """See :meth:`EffectLedger.events`."""

        def work(conn: _Conn) -> list[tuple[Any, ...]]:
            return conn.execute(self._sql.events, (operation_id,)).fetchall()

        return [self._event(row) for row in self._read(work)]

    def verify(self) -> VerifyReport:
        """See :meth:`EffectLedger.verify`; streams, so memory holds one chain at a time."""
        return self._read(self._verify)

    def _verify(self, conn: _Conn) -> VerifyReport:
        with conn.transaction():
            # One snapshot for both streams, so a concurrent write is seen whole or not at all.
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            heads = conn.cursor(name="effectguard_verify_heads")
            heads.itersize = _VERIFY_BATCH
            event_rows = conn.cursor(name="effectguard_verify_events")
            event_rows.itersize = _VERIFY_BATCH
            heads.execute(self._sql.verify_heads)
            event_rows.execute(self._sql.verify_events)
            stream = iter(event_rows)
            problems = []
            operations = events_checked = 0
            pending = next(stream, None)
            for operation_id, count, head in heads:
                operations += 1
                chain = []
                # Events of operations that have no row sort before this one: orphans.
                while pending is not None and pending[0] < operation_id:
                    problems.extend(check_chain(pending[0], 0, b"", [self._event(pending)]))
                    pending = next(stream, None)
                while pending is not None and pending[0] == operation_id:
                    chain.append(self._event(pending))
                    pending = next(stream, None)
                events_checked += len(chain)
                problems.extend(check_chain(operation_id, count, bytes(head), chain))
            while pending is not None:
                problems.extend(check_chain(pending[0], 0, b"", [self._event(pending)]))
                pending = next(stream, None)
            heads.close()
            event_rows.close()
        return VerifyReport(operations, events_checked, tuple(problems))

    # -- operator resolution -----------------------------------------------------------

    def confirm(
        self,
        operation_id: str,
        *,
        output: Any,
        provider_operation_id: str | None,
        actor: str,
        reason: str,
        evidence_reference: str,
    ) -> OperationRecord:
        """See :func:`effectguard.ledger.resolution.confirm`."""
        return resolution.confirm(
            self,
            operation_id,
            output=output,
            provider_operation_id=provider_operation_id,
            actor=actor,
            reason=reason,
            evidence_reference=evidence_reference,
        )

    def reject(
        self, operation_id: str, *, actor: str, reason: str, evidence_reference: str
    ) -> OperationRecord:
        """See :func:`effectguard.ledger.resolution.reject`."""
        return resolution.reject(
            self, operation_id, actor=actor, reason=reason, evidence_reference=evidence_reference
        )

    def authorize_retry(
        self, operation_id: str, *, actor: str, reason: str, evidence_reference: str
    ) -> OperationRecord:
        """See :func:`effectguard.ledger.resolution.authorize_retry`."""
        return resolution.authorize_retry(
            self, operation_id, actor=actor, reason=reason, evidence_reference=evidence_reference
        )

    def close(self) -> None:
        """Close this process's connections; the ledger is unusable afterwards."""
        self._closed = True
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _changed_columns(changes: Changes, now: datetime) -> dict[str, Any]:
    columns: dict[str, Any] = {"status": changes.status.value}
    if changes.lease is not UNSET:
        lease: Lease | None = changes.lease
        if lease is None:
            columns.update(lease_token=None, lease_owner=None, lease_expires_at=None)
        else:
            columns.update(
                lease_token=lease.token,
                lease_owner=canonical_json(lease.owner.to_json()),
                lease_expires_at=now + round(lease.seconds * 1_000_000) * _MICROS,
            )
    simple: Mapping[str, Any] = {
        "attempts": changes.attempts,
        "attempt_budget": changes.attempt_budget,
        "output": changes.output_json,
        "provider_operation_id": changes.provider_operation_id,
        "reason": changes.reason,
    }
    columns.update({name: value for name, value in simple.items() if value is not UNSET})
    if changes.evidence is not UNSET:
        columns["evidence"] = canonical_json(dict(changes.evidence)) if changes.evidence else None
    if changes.overlap is not UNSET:
        holders = [holder.to_json() for holder in changes.overlap]
        columns["overlap"] = canonical_json(holders) if holders else None
    return columns


def _forget_parent_pools() -> None:
    for ledger in list(_LEDGERS):
        ledger._after_fork()  # noqa: SLF001 - the module's own fork hook


os.register_at_fork(after_in_child=_forget_parent_pools)
