"""The ``ledger-replaced`` fault: the ledger file is moved away (or replaced) under a process.

At a seeded point of the episode, before the claim or between the claim and
the outcome, the SQLite ledger's files (database, -wal, -shm) are renamed
into a side directory, and optionally an empty ledger is created at the path.
The process that had the ledger open then calls again: every write it tries
must be refused with :class:`~effectguard.errors.LedgerUnavailableError`
before anything is dispatched, which the fake provider's own request count
checks. Then the operator's fix: the original files are renamed back, and the
episode goes on with the record (and its claim) exactly where it was.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from effectguard import EffectExecutor, LedgerUnavailableError, SQLiteEffectLedger
from effectguard.errors import InternalError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from effectguard.testkit._crash.kinds import Setup
    from proofs.matrix.context import EpisodeContext

__all__ = ["Displacement", "LedgerFiles", "ReplacePoint", "play"]

_SUFFIXES = ("", "-wal", "-shm")


class ReplacePoint(enum.StrEnum):
    """When in the episode the ledger file is moved away, if at all."""

    NONE = "none"
    BEFORE_CLAIM = "before-claim"
    BEFORE_OUTCOME = "between-claim-and-outcome"


class LedgerFiles:
    """Moves a ledger's files aside and back, like an operator's mistake and its fix."""

    def __init__(self, path: Path, aside: Path) -> None:
        self.path = path
        self.aside = aside
        self._moved: list[tuple[Path, Path]] = []

    def displace(self, *, by_empty: bool) -> None:
        """Rename the files away; with ``by_empty``, leave a new, empty ledger at the path."""
        self.aside.mkdir(parents=True, exist_ok=True)
        for suffix in _SUFFIXES:
            source = Path(f"{self.path}{suffix}")
            if source.exists():
                target = self.aside / source.name
                source.rename(target)
                self._moved.append((target, source))
        if by_empty:
            empty = SQLiteEffectLedger(self.path)
            try:
                empty.bulk_load([])  # a write creates the file: reads never do
            finally:
                empty.close()

    def restore(self) -> None:
        """Remove whatever the path names now and rename the original files back."""
        for suffix in _SUFFIXES:
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        # The journal before the database: the path never names a database without its WAL.
        for target, source in reversed(self._moved):
            target.rename(source)
        self._moved.clear()


@dataclass(frozen=True, slots=True)
class Displacement:
    """What happened while the ledger file was away."""

    calls: int
    refused: int
    """Calls that raised :class:`LedgerUnavailableError` (the file was gone or another)."""
    dispatched_when_refused: int
    """Provider requests beyond the one in flight when the file went away: must be 0."""


def play(
    point: ReplacePoint,
    *,
    by_empty: bool,
    setup: Setup,
    context: EpisodeContext,
    aside: Path,
) -> Displacement:
    """Displace the ledger at ``point``, call twice, restore it; return what the calls did.

    The first call meets the displacement (before its claim, or while its
    handler runs); the second is the same process calling again, which must
    be refused before any dispatch. With ``context.ignore_ledger_refusal`` the
    process instead "fixes" the refusal the wrong way, by opening the path
    again and executing there: the matrix must catch that at the provider.
    """
    ledger = context.ledger
    if not isinstance(ledger, SQLiteEffectLedger):
        msg = f"the ledger-replaced fault needs a SQLite ledger file, not {ledger!r}"
        raise InternalError(msg)
    # The fault is a file replaced under a process that has it open: make sure it is
    # (the first episode may come before any write); an empty load writes nothing. Only
    # then: an empty load still scans the whole ledger (anchoring, ANALYZE), which made
    # every later episode of a long run slower than the one before.
    if ledger.path.exists():
        ledger.get("matrix:open-the-ledger")  # a read opens the file and pins it
    else:
        ledger.bulk_load([])
    files = LedgerFiles(ledger.path, aside)
    handler = setup.handler
    if point is ReplacePoint.BEFORE_CLAIM:
        files.displace(by_empty=by_empty)
    else:
        handler = _displacing(setup.handler, files, by_empty=by_empty)
    # The one request allowed is the first call's, in flight when the file went away.
    allowed = 0 if point is ReplacePoint.BEFORE_CLAIM else 1
    before, refused = setup.provider.attempts(), 0
    try:
        for _ in range(2):
            refused += _call(setup, context, handler)
            context.clock.advance(1.0)
        stray = setup.provider.attempts() - before - allowed
    finally:
        files.restore()
    return Displacement(calls=2, refused=refused, dispatched_when_refused=stray)


def _call(setup: Setup, context: EpisodeContext, handler: Callable[..., Any]) -> bool:
    """Execute once; True when the ledger refused it."""
    try:
        context.executor.execute(setup.contract, setup.arguments, handler)
    except LedgerUnavailableError:
        if context.ignore_ledger_refusal:
            _reopen_and_execute(setup, context)
        return True
    return False


def _reopen_and_execute(setup: Setup, context: EpisodeContext) -> None:
    """The wrong fix for a refusal: open whatever the path names now and carry on there."""
    with SQLiteEffectLedger(context.site.target, clock=context.clock) as reopened:
        executor = EffectExecutor(reopened, clock=context.clock, jitter=context.jitter)
        executor.execute(setup.contract, setup.arguments, setup.handler)


def _displacing(
    handler: Callable[..., Any], files: LedgerFiles, *, by_empty: bool
) -> Callable[..., Any]:
    """``handler``, moving the ledger away first on its first request (after the claim)."""
    moved = False

    def displacing(arguments: Mapping[str, Any], *, idempotency_key: str | None) -> Any:
        nonlocal moved
        if not moved:
            moved = True
            files.displace(by_empty=by_empty)
        return handler(arguments, idempotency_key=idempotency_key)

    return displacing
