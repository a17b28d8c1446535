"""Where a matrix run keeps its ledger, per backend, and how its ledger faults are made real.

- :class:`SQLiteSite`: one ledger file in the run's temporary directory. The
  ledger is made unavailable by another connection holding SQLite's exclusive
  lock, against a handle whose busy timeout is short.
- :class:`PostgresSite`: a schema of its own in the database a URL names
  (``ematrix_<pid>_<random>``), dropped at the end whatever happened. The
  ledger is made unavailable, or the acknowledgement of its own commit lost,
  by a local TCP proxy (:class:`~effectguard.testkit.tcp_proxy.TcpProxy`) in
  front of the server; the server itself is never touched.

Worker and child processes open the ledger from :attr:`target` (a path or a
``postgresql://`` URL); the run's own handles come from :meth:`open`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from effectguard import ConfigurationError, EffectLedger, open_ledger
from effectguard.testkit.tcp_proxy import TcpProxy

__all__ = ["Backend", "PostgresSite", "SQLiteSite", "Site", "open_site"]

_log = logging.getLogger("proofs.matrix")

#: How long the faulty handle waits for an unavailable ledger before giving up.
_IMPATIENT_SECONDS = 0.05
#: The PostgreSQL pool's wait for a connection on the faulty handle.
_POSTGRES_TIMEOUT = 0.5
#: What the claim's and the outcome's statements start with (what a lost ack is aimed at).
CLAIM_MARKER = b"INSERT INTO"
OUTCOME_MARKER = b"WITH op AS (UPDATE"

Clock = Callable[[], float]


class Backend:
    """The backends a matrix run can use."""

    SQLITE = "sqlite"
    POSTGRES = "postgres"
    ALL = (SQLITE, POSTGRES)


class Site(Protocol):
    """A run's ledger: where it is, handles on it, and the ledger faults it can make real."""

    backend: str
    modules: tuple[str, ...]
    """Modules a process opening :attr:`target` imports (a crash helper loads them once)."""
    options: dict[str, Any]
    """What every process passes to :func:`~effectguard.ledger.open_ledger` with :attr:`target`."""

    @property
    def target(self) -> str:
        """What a worker or child process opens the ledger from."""

    def open(self, clock: Clock) -> EffectLedger:
        """A handle for the run's own calls."""

    def open_faulty(self, clock: Clock, *, patient: bool = False) -> EffectLedger:
        """A handle whose calls a fault can break (through the proxy; short waits unless patient).

        A patient handle waits as long as an ordinary one: a lost acknowledgement
        must be recognised however slowly the server answers the read-back.
        """

    def make_unavailable(self) -> None:
        """From now on, the faulty handle's writes fail with a ledger error."""

    def make_available(self) -> None:
        """Undo :meth:`make_unavailable`."""

    def lose_ack(self, marker: bytes) -> bool:
        """Lose the reply to the faulty handle's next statement with ``marker``; False if unable."""

    def keep_replies(self) -> None:
        """Forget a loss :meth:`lose_ack` armed that no statement met."""

    def replies_lost(self) -> int:
        """How many replies were lost so far."""

    def close(self) -> None:
        """Close what the site opened and remove the ledger."""


class SQLiteSite:
    """The run's ledger in one SQLite file under ``workdir``."""

    backend = Backend.SQLITE
    modules: tuple[str, ...] = ("effectguard.ledger.sqlite",)

    def __init__(self, workdir: Path) -> None:
        self.path = workdir / "ledger.db"
        self._locker: sqlite3.Connection | None = None
        # The matrix kills processes, never the machine: a commit in SQLite's WAL survives a
        # SIGKILL whether or not it was fsynced, so no verdict depends on FULL, which only
        # adds an fsync per commit (docs/testkit.md, "Speed").
        self.options: dict[str, Any] = {"synchronous": "NORMAL"}

    @property
    def target(self) -> str:
        """See :meth:`Site.target`."""
        return str(self.path)

    def open(self, clock: Clock) -> EffectLedger:
        """See :meth:`Site.open`."""
        return open_ledger(self.path, clock=clock, **self.options)

    def open_faulty(self, clock: Clock, *, patient: bool = False) -> EffectLedger:
        """See :meth:`Site.open_faulty`: busy for longer than a moment is unavailable."""
        if patient:
            return self.open(clock)
        return open_ledger(self.path, clock=clock, busy_timeout=_IMPATIENT_SECONDS, **self.options)

    def make_unavailable(self) -> None:
        """See :meth:`Site.make_unavailable`: another connection holds the exclusive lock."""
        locker = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        locker.execute("BEGIN EXCLUSIVE")
        self._locker = locker

    def make_available(self) -> None:
        """See :meth:`Site.make_available`."""
        locker, self._locker = self._locker, None
        if locker is not None:
            locker.execute("ROLLBACK")
            locker.close()

    def lose_ack(self, marker: bytes) -> bool:  # noqa: ARG002 - the protocol's signature
        """See :meth:`Site.lose_ack`: SQLite has no network, so never."""
        return False

    def keep_replies(self) -> None:
        """See :meth:`Site.keep_replies`."""

    def replies_lost(self) -> int:
        """See :meth:`Site.replies_lost`: none, ever."""
        return 0

    def close(self) -> None:
        """See :meth:`Site.close` (the run's temporary directory holds the file)."""
        self.make_available()


class PostgresSite:
    """The run's ledger in a schema of its own, dropped by :meth:`close`."""

    backend = Backend.POSTGRES
    modules: tuple[str, ...] = ("effectguard.ledger.postgres",)
    options: dict[str, Any] = {}  # noqa: RUF012 - read only, the same for every run

    def __init__(self, url: str) -> None:
        if not url.startswith(("postgresql://", "postgres://")):
            msg = f"--db {url!r} is not a postgresql:// URL"
            raise ConfigurationError(msg)
        self.url = url
        self.schema = f"ematrix_{os.getpid()}_{secrets.token_hex(4)}"
        self._proxy, self._proxied = TcpProxy.to(url)
        self._handles: list[EffectLedger] = []

    @property
    def target(self) -> str:
        """See :meth:`Site.target`."""
        return _with_schema(self.url, self.schema)

    def open(self, clock: Clock) -> EffectLedger:
        """See :meth:`Site.open`."""
        ledger = open_ledger(self.target, clock=clock)
        self._handles.append(ledger)
        return ledger

    def open_faulty(self, clock: Clock, *, patient: bool = False) -> EffectLedger:
        """See :meth:`Site.open_faulty`: through the proxy, one connection."""
        target = _with_schema(self._proxied, self.schema)
        if patient:
            ledger = open_ledger(target, clock=clock, pool_size=1)
        else:
            ledger = open_ledger(target, clock=clock, pool_size=1, timeout=_POSTGRES_TIMEOUT)
        self._handles.append(ledger)
        return ledger

    def make_unavailable(self) -> None:
        """See :meth:`Site.make_unavailable`: the proxy drops and refuses connections."""
        self._proxy.cut()

    def make_available(self) -> None:
        """See :meth:`Site.make_available`."""
        self._proxy.restore()

    def lose_ack(self, marker: bytes) -> bool:
        """See :meth:`Site.lose_ack`: the proxy drops the connection after the commit."""
        self._proxy.lose_reply_to(marker)
        return True

    def keep_replies(self) -> None:
        """See :meth:`Site.keep_replies`."""
        self._proxy.keep_replies()

    def replies_lost(self) -> int:
        """See :meth:`Site.replies_lost`: the replies the proxy dropped."""
        return self._proxy.replies_lost

    def close(self) -> None:
        """See :meth:`Site.close`: the handles, the proxy, then the schema."""
        for ledger in self._handles:
            with contextlib.suppress(Exception):
                ledger.close()
        self._proxy.close()
        import psycopg  # noqa: PLC0415 - only a PostgreSQL run needs the driver

        try:
            with psycopg.connect(self.url, autocommit=True, connect_timeout=10) as admin:
                # The name is the site's own (letters, digits, underscores), never input.
                admin.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
        except psycopg.Error as exc:
            _log.warning("could not drop the matrix schema %s: %s", self.schema, exc)


def _with_schema(url: str, schema: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}schema={schema}"


def open_site(backend: str, workdir: Path, db: str | None) -> Site:
    """The site of ``backend``; PostgreSQL needs ``db``, SQLite refuses one."""
    if backend == Backend.SQLITE:
        if db is not None:
            msg = (
                "--db is for --backend postgres; a SQLite run keeps its ledger in a temporary file"
            )
            raise ConfigurationError(msg)
        return SQLiteSite(workdir)
    if backend == Backend.POSTGRES:
        if not db:
            msg = "--backend postgres needs --db postgresql://… (a database to make a schema in)"
            raise ConfigurationError(msg)
        return PostgresSite(db)
    msg = f"unknown backend {backend!r}; use one of {', '.join(Backend.ALL)}"
    raise ConfigurationError(msg)
