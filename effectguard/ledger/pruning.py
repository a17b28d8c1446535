"""The prune loop, written once: settled operations pruned a page at a time, each page one commit.

:meth:`BatchPruning.prune` is :meth:`~effectguard.ledger.protocol.Prunable.prune`
for every backend. It checks the statuses and the cut-off before anything is
read, then reads the operations last changed before the cut-off in pages of
:data:`~effectguard.ledger.retention.BATCH`, ordered by (last update,
operation id), each page after the last one read. Within one page's
transaction it keeps the operations whose provider may still remember their
key, writes the others' archive lines, tombstones and deletions, and makes
the archive durable before that transaction commits. Pruned operations are
announced to this process's replay caches even when a later page fails.

A backend supplies only its statements and transactions, through four hooks:
:meth:`~BatchPruning._prune_now`, :meth:`~BatchPruning._prune_page`,
:meth:`~BatchPruning._prune_records` and :meth:`~BatchPruning._prune_transaction`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Generic, TypeVar

from effectguard.ledger import retention
from effectguard.ledger.protocol import announce_pruned
from effectguard.ledger.retention import CutOff, PruneReport
from effectguard.model import EffectStatus, OperationRecord

__all__ = ["After", "BatchPruning", "PrunePass"]

C = TypeVar("C")
T = TypeVar("T")

#: Where a page starts: after this (last update, operation id); None for the first page.
After = tuple[datetime, str] | None


@dataclass(frozen=True, slots=True)
class PrunePass:
    """One prune call, checked: what it prunes, before when, what it keeps, where it archives."""

    statuses: tuple[EffectStatus, ...]
    cut: CutOff
    key_retention: Mapping[str, float]
    """Contract name -> the provider's key retention in seconds (empty when forced)."""
    archive: IO[str] | None
    dry_run: bool


@dataclass(frozen=True, slots=True)
class _Page:
    after: After
    pruned: list[str]
    kept: list[str]


class BatchPruning(abc.ABC, Generic[C]):
    """``prune`` for a backend whose connections are ``C``; the backend supplies the hooks."""

    def prune(
        self,
        *,
        older_than: float,
        statuses: Iterable[EffectStatus] = retention.PRUNABLE,
        archive: str | None = None,
        dry_run: bool = False,
        force: bool = False,
        key_retention: Mapping[str, float] | None = None,
        now: float | None = None,
    ) -> PruneReport:
        """See :meth:`~effectguard.ledger.protocol.Prunable.prune`."""
        wanted = retention.check_statuses(statuses)
        cut = retention.cut_off(older_than, self._prune_now() if now is None else now)
        keys = {} if force else dict(key_retention or {})
        target = None if dry_run or archive is None else retention.open_archive(archive)
        plan = PrunePass(wanted, cut, keys, target, dry_run)
        pruned: list[str] = []
        kept: list[str] = []
        after: After = None
        try:
            while True:
                page = self._prune_transaction(self._page_work(plan, after), write=not dry_run)
                if page is None:
                    break
                after = page.after
                pruned.extend(page.pruned)
                kept.extend(page.kept)
        finally:
            if target is not None:
                retention.close_archive(target)
            if not dry_run:
                announce_pruned(pruned)
        return PruneReport(tuple(pruned), tuple(kept), dry_run, archive)

    def _page_work(self, plan: PrunePass, after: After) -> Callable[[C], _Page | None]:
        """One page's work inside its transaction; None when no operation is left to read."""

        def work(conn: C) -> _Page | None:
            records = self._prune_page(conn, plan, after)
            if not records:
                return None
            done: list[OperationRecord] = []
            held: list[str] = []
            for record in records:
                if retention.kept_for_key(record, plan.key_retention, plan.cut.now):
                    held.append(record.operation_id)
                else:
                    done.append(record)
            if done and not plan.dry_run:
                self._prune_records(conn, done, plan)
                if plan.archive is not None:
                    retention.sync_archive(plan.archive)
            last = records[-1]
            return _Page((last.updated_at, last.operation_id), [r.operation_id for r in done], held)

        return work

    @abc.abstractmethod
    def _prune_now(self) -> float:
        """The ledger's time now, in epoch seconds: where a prune's cut-off is counted from."""
        ...

    @abc.abstractmethod
    def _prune_page(self, conn: C, plan: PrunePass, after: After) -> list[OperationRecord]:
        """Up to ``BATCH`` operations in ``plan.statuses`` last changed before ``plan.cut.before``.

        Ordered by (last update, operation id), each after ``after``; locked
        against other writers unless ``plan.dry_run``.
        """
        ...

    @abc.abstractmethod
    def _prune_records(self, conn: C, records: Sequence[OperationRecord], plan: PrunePass) -> None:
        """Archive (when ``plan.archive``), tombstone and delete ``records`` and their events."""
        ...

    @abc.abstractmethod
    def _prune_transaction(self, work: Callable[[C], T], *, write: bool) -> T | None:
        """Run ``work`` in one transaction (a read-only one unless ``write``) and commit it.

        May return None without running ``work`` when the ledger holds nothing yet.
        """
        ...
