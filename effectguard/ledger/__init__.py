"""Ledgers: the protocol every backend implements, the records they keep, and :func:`open_ledger`.

The backends are :mod:`effectguard.ledger.sqlite` (one host, the default) and
:mod:`effectguard.ledger.postgres` (several hosts; ``effectguard[postgres]``),
each imported only when chosen. The write primitives (:class:`NewOperation`,
:class:`Expect`, :class:`Changes`, :class:`EventDraft`, :class:`Lease`) are
what a backend of one's own receives; every backend passes the same
conformance suite.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from effectguard._model import (
    EffectEvent,
    EventType,
    LeaseOwner,
    OperationRecord,
    OverlapHolder,
    VerifyProblem,
    VerifyReport,
)
from effectguard.errors import ConfigurationError
from effectguard.ledger._chain import AnchorHead
from effectguard.ledger._protocol import (
    UNSET,
    Changes,
    EffectLedger,
    EventDraft,
    Expect,
    Lease,
    NewOperation,
    Prunable,
    Seen,
)
from effectguard.ledger._retention import PruneReport, Tombstone

__all__ = [
    "UNSET",
    "AnchorHead",
    "Changes",
    "EffectEvent",
    "EffectLedger",
    "EventDraft",
    "EventType",
    "Expect",
    "Lease",
    "LeaseOwner",
    "NewOperation",
    "OperationRecord",
    "OverlapHolder",
    "Prunable",
    "PruneReport",
    "Seen",
    "Tombstone",
    "VerifyProblem",
    "VerifyReport",
    "open_ledger",
]

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_DRIVERS = frozenset({"psycopg", "psycopg_pool"})
#: ``scheme://`` at the start of a target: a URL, never a file path (``C:\\x`` has no ``//``).
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_SUPPORTED = "a SQLite file path or a postgresql:// (postgres://) URL"


def open_ledger(target: str | os.PathLike[str] | EffectLedger, **options: Any) -> EffectLedger:
    """Return the ledger ``target`` names.

    A ``postgresql://`` (or ``postgres://``) URL opens a PostgreSQL ledger
    (install ``effectguard[postgres]``; ``?schema=name`` picks its schema); any
    other string or path opens a SQLite ledger file; a ledger object is returned
    as it is. ``options`` go to the backend's constructor (``create=False``
    makes a missing ledger an error instead of creating it).

    A target that can never work is a :class:`ConfigurationError` here, before
    anything is opened or created: an empty string, one with a NUL character,
    a URL of another scheme (``mysql://``), a directory, or a file whose
    directory does not exist.
    """
    if isinstance(target, EffectLedger):
        return target
    if isinstance(target, (str, os.PathLike)):
        _check_target(target, create=bool(options.get("create", True)))
    if isinstance(target, str) and target.startswith(_POSTGRES_SCHEMES):
        # Imported only here, so that SQLite users never need psycopg.
        try:
            from effectguard.ledger.postgres import PostgresEffectLedger  # noqa: PLC0415 - a backend is imported only when chosen
        except ImportError as exc:  # the module re-raises a missing driver with its own hint
            if exc.name not in _DRIVERS:
                raise
            msg = f"a PostgreSQL ledger needs psycopg: pip install 'effectguard[postgres]' ({exc})"
            raise ConfigurationError(msg) from exc
        return PostgresEffectLedger(target, **options)
    if isinstance(target, (str, os.PathLike)):
        from effectguard.ledger.sqlite import SQLiteEffectLedger  # noqa: PLC0415 - a backend is imported only when chosen

        return SQLiteEffectLedger(target, **options)
    msg = f"a ledger is a path, a postgresql:// URL or a ledger object, not {type(target).__name__}"
    raise TypeError(msg)


def _check_target(target: str | os.PathLike[str], *, create: bool) -> None:
    """Refuse a ledger target that could only fail later, at the first tool call."""
    text = os.fspath(target)
    if not isinstance(text, str) or not text.strip():
        msg = f"the ledger target is empty; give {_SUPPORTED}"
        raise ConfigurationError(msg)
    if "\x00" in text:
        msg = f"the ledger target {text!r} contains a NUL character; no path or URL has one"
        raise ConfigurationError(msg)
    if text.startswith(_POSTGRES_SCHEMES):
        return
    scheme = _URL.match(text)
    if scheme:
        # Credentials in a URL never reach an error message.
        shown = text if "@" not in text else f"{scheme.group(1)}://…@{text.rsplit('@', 1)[1]}"
        msg = (
            f"the ledger URL {shown!r} has the scheme {scheme.group(1)!r}, "
            f"which effectguard does not support; give {_SUPPORTED}"
        )
        raise ConfigurationError(msg)
    path = Path(text)
    if path.is_dir():
        msg = f"the ledger path {text!r} is a directory; name a file in it, e.g. {text}/ledger.db"
        raise ConfigurationError(msg)
    parent = path.parent
    # A read (create=False) reports a missing ledger itself; a write would fail only at
    # the first tool call, after configure() had seemed to succeed.
    if create and not path.exists() and not parent.is_dir():
        msg = (
            f"cannot create the ledger {text!r}: its directory {str(parent)!r} does not exist; "
            "create the directory first"
        )
        raise ConfigurationError(msg)
