"""Connections to a PostgreSQL ledger: the one module that imports the driver.

One ``psycopg_pool`` pool per process, opened on first use: a child made by
``fork()`` opens its own and never uses or closes its parent's connections, so
the parent's sessions stay intact. Driver errors are translated here, at one
boundary, into :class:`~effectguard.errors.LedgerUnavailableError` (or a
subclass), always ``from`` the driver's error. A call whose connection broke
raises :class:`ConnectionLost`, so the ledger can decide whether running it
again is safe.

``psycopg_pool`` logs what it does with this module's pools ("discarding
broken connection", "error connecting") to its own logger, which, in an
application that configured no logging, Python prints raw on stderr. Those
records are routed to ``effectguard.ledger.postgres`` at INFO instead: the
ledger replaces every broken connection itself, and a call that cannot get
one raises :class:`~effectguard.errors.LedgerUnavailableError` to its caller,
which is where an application learns of it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from effectguard.errors import (
    ConfigurationError,
    InvalidRequestError,
    LedgerLockedError,
    LedgerUnavailableError,
)
from effectguard.ledger.postgres.migrations import TOMBSTONED

__all__ = ["Connection", "ConnectionLost", "Connections", "Tombstoned", "describe"]

T = TypeVar("T")

#: A connection as the ledger uses it: autocommit, rows as tuples.
Connection = psycopg.Connection[tuple[Any, ...]]

_LOG = logging.getLogger("effectguard.ledger.postgres")
#: The name of every pool this module opens; psycopg_pool names its worker threads after it.
_POOL_NAME = "effectguard-ledger"
# Set while this thread is inside a call to one of this module's pools.
_IN_POOL = threading.local()

# Pools inherited across fork() belong to the parent: the child keeps them
# referenced so they are never collected, and never uses or closes them.
_INHERITED: list[object] = []
_LIVE: weakref.WeakSet[Connections] = weakref.WeakSet()


class ConnectionLost(LedgerUnavailableError):
    """The connection broke during a call; whether a write in it committed is unknown."""


class Tombstoned(InvalidRequestError):
    """The server refused to insert an operation under a pruned id (its tombstone stands)."""


class _PoolRecords(logging.Filter):
    """Re-logs psycopg_pool's records about this module's pools under effectguard's logger.

    Records about anyone else's pools pass through untouched.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        ours = (
            (record.threadName is not None and record.threadName.startswith(_POOL_NAME))
            or getattr(_IN_POOL, "active", False)
            or _POOL_NAME in args
        )
        if not ours:
            return True
        _LOG.info("connection pool: %s", record.getMessage())
        return False


_POOL_FILTER = _PoolRecords()
logging.getLogger("psycopg.pool").addFilter(_POOL_FILTER)


@contextlib.contextmanager
def _pool_call() -> Iterator[None]:
    """Mark this thread as inside a call to one of this module's pools (nesting allowed)."""
    outer = getattr(_IN_POOL, "active", False)
    _IN_POOL.active = True
    try:
        yield
    finally:
        _IN_POOL.active = outer


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _parse(conninfo: str) -> dict[str, Any]:
    try:
        return conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        msg = f"invalid PostgreSQL URL: {_first_line(exc)}"
        raise ConfigurationError(msg) from exc


def describe(conninfo: str) -> str:
    """Return where ``conninfo`` points, as a URL without its password.

    Raises ConfigurationError when libpq cannot parse it.
    """
    params = _parse(conninfo)
    user = f"{params['user']}@" if params.get("user") else ""
    host = str(params.get("host") or "localhost")
    port = f":{params['port']}" if params.get("port") else ""
    return f"postgresql://{user}{host}{port}/{params.get('dbname') or ''}"


class Connections:
    """This process's connections to one ledger, and the boundary its driver errors stop at."""

    def __init__(
        self,
        conninfo: str,
        *,
        label: str,
        pool_size: int,
        timeout: float,
        prepared_statements: bool = True,
    ) -> None:
        self.label = label
        self.pool_size = pool_size
        self.timeout = timeout
        self._conninfo = conninfo
        self._kwargs: dict[str, Any] = {
            "autocommit": True,
            "fallback_application_name": "effectguard",
        }
        if not prepared_statements:
            # A transaction-pooling PgBouncer before 1.21 cannot carry them between sessions.
            self._kwargs["prepare_threshold"] = None
        if "connect_timeout" not in _parse(conninfo):
            self._kwargs["connect_timeout"] = max(2, round(timeout))
        self._lock = threading.Lock()
        self._pool: ConnectionPool[Connection] | None = None
        self._closed = False
        _LIVE.add(self)

    @contextlib.contextmanager
    def translate(self) -> Iterator[None]:
        """Turn any driver error raised inside into a LedgerUnavailableError (or subclass)."""
        try:
            yield
        except (PoolTimeout, PoolClosed, psycopg.Error) as exc:
            raise self._translated(exc) from exc

    def _translated(self, exc: Exception) -> LedgerUnavailableError | Tombstoned:
        """The ledger's error for driver error ``exc``."""
        if isinstance(exc, PoolTimeout):
            return LedgerUnavailableError(
                f"{self.label} is unavailable: no connection within {self.timeout:g}s"
            )
        if isinstance(exc, PoolClosed):
            return LedgerUnavailableError(f"{self.label} is closed")
        if isinstance(
            exc, (pg_errors.LockNotAvailable, pg_errors.DeadlockDetected, pg_errors.QueryCanceled)
        ):
            return LedgerLockedError(
                f"{self.label} is locked by another writer: {_first_line(exc)}"
            )
        if isinstance(exc, pg_errors.UndefinedTable):
            return LedgerUnavailableError(f"{self.label} has lost its tables: {_first_line(exc)}")
        if isinstance(exc, psycopg.Error) and exc.sqlstate == TOMBSTONED:
            return Tombstoned(_first_line(exc))
        return LedgerUnavailableError(f"{self.label} failed: {_first_line(exc)}")

    @staticmethod
    def _configure(conn: Connection) -> None:
        # Times come back in UTC, and a claim is durable before dispatch even on
        # a server whose default is synchronous_commit=off.
        conn.execute(
            "SET TIME ZONE 'UTC'; SELECT set_config('synchronous_commit', 'on', false)"
            " WHERE current_setting('synchronous_commit') = 'off'"
        )

    @contextlib.contextmanager
    def direct(self) -> Iterator[Connection]:
        """A connection of its own, outside the pool, closed afterwards; errors translated."""
        try:
            conn = psycopg.connect(self._conninfo, **self._kwargs)
        except psycopg.Error as exc:
            msg = f"cannot connect to {self.label}: {_first_line(exc)}"
            raise LedgerUnavailableError(msg) from exc
        try:
            with self.translate():
                self._configure(conn)
                yield conn
        finally:
            conn.close()

    def _pool_here(self) -> ConnectionPool[Connection]:
        if self._closed:
            msg = f"{self.label} is closed"
            raise LedgerUnavailableError(msg)
        pool = self._pool
        if pool is None:
            with self._lock, _pool_call():
                if self._pool is None:
                    self._pool = ConnectionPool(
                        self._conninfo,
                        kwargs=self._kwargs,
                        min_size=1,
                        max_size=self.pool_size,
                        timeout=self.timeout,
                        configure=self._configure,
                        name=_POOL_NAME,
                        open=True,
                    )
                pool = self._pool
        return pool

    def run(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` on a pooled connection; :class:`ConnectionLost` if that connection broke."""
        pool = self._pool_here()
        # Written out, not as context managers: every statement of every call comes through.
        outer = getattr(_IN_POOL, "active", False)
        _IN_POOL.active = True
        conn: Connection | None = None
        try:
            conn = pool.getconn()
            try:
                return work(conn)
            finally:
                pool.putconn(conn)
        except psycopg.OperationalError as exc:
            if conn is not None and conn.broken:
                msg = f"lost the connection to {self.label}: {_first_line(exc)}"
                raise ConnectionLost(msg) from exc
            raise self._translated(exc) from exc
        except (PoolTimeout, PoolClosed, psycopg.Error) as exc:
            raise self._translated(exc) from exc
        finally:
            _IN_POOL.active = outer

    def recover(self) -> None:
        """After a lost connection, replace every idle one that broke with it (a restart)."""
        pool = self._pool
        if pool is not None:
            with contextlib.suppress(psycopg.Error), _pool_call():
                pool.check()

    def read(self, work: Callable[[Connection], T]) -> T:
        """Run ``work``, which is safe to repeat, once more if its connection broke."""
        try:
            return self.run(work)
        except ConnectionLost:
            self.recover()
            return self.run(work)

    def close(self) -> None:
        """Close this process's connections; any later use raises LedgerUnavailableError."""
        self._closed = True
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            with _pool_call():
                pool.close()

    def _after_fork(self) -> None:
        if self._pool is not None:
            _INHERITED.append(self._pool)
        self._pool = None
        self._lock = threading.Lock()


def _forget_parent_pools() -> None:
    for connections in list(_LIVE):
        connections._after_fork()  # noqa: SLF001 - the module's own fork hook


os.register_at_fork(after_in_child=_forget_parent_pools)
