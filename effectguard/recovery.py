"""Recovery: asking providers again about every operation left uncertain, in bounded sweeps.

:func:`recover` finds the OUTCOME_UNKNOWN, RECONCILING, QUARANTINED and
abandoned DISPATCHED operations of a ledger (a DISPATCHED or RECONCILING one
only once its lease expired or its owner's process is provably gone) and
re-probes each with its tool's probe (:func:`effectguard.executor.reprobe.reprobe`):
a committed effect is confirmed, an authoritative "not committed" without
overlap risk makes the operation dispatchable by its next call, anything else
is recorded as evidence and left. A QUARANTINED operation is closed only on
COMMITTED evidence. A sweep never dispatches anything.

A :class:`Recoverer` keeps a backoff per operation across sweeps (``--watch``),
so an operation whose provider keeps saying "pending" is asked less and less
often. ``configure(recover_on_start=True)`` runs one sweep in a background
thread when the executor is set up (:func:`start_recovery`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from effectguard.decorator.discovery import TOOLS_VARIABLE, ToolIndex, known_tools, load_tools
from effectguard.errors import ConfigurationError, IllegalTransitionError
from effectguard.executor.lease import abandoned
from effectguard.executor.reprobe import (
    REPROBED_STATUSES,
    ReprobeOutcome,
    reprobe,
    reprobe_problem,
)
from effectguard.ledger import EffectLedger, open_ledger
from effectguard.ledger.resolution import os_user
from effectguard.model import EffectStatus, OperationRecord

__all__ = ["Recoverer", "RecoveryReport", "Skipped", "recover", "start_recovery"]

logger = logging.getLogger("effectguard.recovery")

_HELD = frozenset({EffectStatus.DISPATCHED, EffectStatus.RECONCILING})
_DEFAULT_BATCH = 100


@dataclass(frozen=True, slots=True)
class Skipped:
    """An uncertain operation a sweep could not probe, and why (no tool, no probe…)."""

    operation_id: str
    contract: str
    status: EffectStatus
    reason: str

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "operation_id": self.operation_id,
            "contract": self.contract,
            "status": self.status.value,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What one sweep probed, what it changed (or would, in a dry run) and what it left.

    ``deferred`` counts operations not probed this time because their backoff
    has not run out.
    """

    probed: tuple[ReprobeOutcome, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    deferred: int = 0
    dry_run: bool = False
    errors: tuple[str, ...] = field(default=())

    @property
    def changed(self) -> tuple[ReprobeOutcome, ...]:
        """The probed operations whose status changed (or would change)."""
        return tuple(outcome for outcome in self.probed if outcome.changed)

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict of the whole report."""
        return {
            "dry_run": self.dry_run,
            "probed": [outcome.to_json() for outcome in self.probed],
            "changed": len(self.changed),
            "skipped": [item.to_json() for item in self.skipped],
            "deferred": self.deferred,
            "errors": list(self.errors),
        }


def _candidate(record: OperationRecord) -> bool:
    """Whether nobody works on ``record``: it is uncertain and not held by a live worker."""
    if record.status not in REPROBED_STATUSES:
        return False
    if record.status in _HELD and record.lease_live:
        return abandoned(record.lease_token, record.lease_owner)
    return True


class Recoverer:
    """Sweeps a ledger's uncertain operations, with a backoff per operation across sweeps.

    ``limit`` bounds how many operations one sweep probes; ``batch`` how many
    rows it reads per status. After a probe that leaves an operation as it
    was, that operation is not probed again for ``backoff_initial`` seconds,
    doubling up to ``backoff_max``.
    """

    def __init__(
        self,
        ledger: EffectLedger,
        tools: ToolIndex,
        *,
        statuses: Iterable[EffectStatus] | None = None,
        limit: int = _DEFAULT_BATCH,
        dry_run: bool = False,
        actor: str | None = None,
        backoff_initial: float = 5.0,
        backoff_max: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        chosen = frozenset(REPROBED_STATUSES if statuses is None else statuses)
        wrong = sorted(status.value for status in chosen - REPROBED_STATUSES)
        if wrong:
            msg = (
                f"recovery sweeps only uncertain operations, not {', '.join(wrong)}; "
                f"choose among {', '.join(sorted(s.value for s in REPROBED_STATUSES))}"
            )
            raise ConfigurationError(msg)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            msg = f"limit must be a whole number >= 1, not {limit!r}"
            raise ConfigurationError(msg)
        self.ledger = ledger
        self.tools = tools
        self.statuses = tuple(sorted(chosen, key=lambda status: status.value))
        self.limit = limit
        self.dry_run = dry_run
        self.actor = actor or f"recovery sweep as {os_user()}"
        self._backoff = (backoff_initial, backoff_max)
        self._clock = clock
        self._due: dict[str, tuple[float, float]] = {}
        self.stopped = threading.Event()

    def __repr__(self) -> str:
        return f"Recoverer({self.ledger!r}, statuses={[s.value for s in self.statuses]})"

    def sweep(self) -> RecoveryReport:
        """Probe up to ``limit`` uncertain operations once; see :func:`recover`."""
        probed: list[ReprobeOutcome] = []
        skipped: list[Skipped] = []
        errors: list[str] = []
        deferred = 0
        for record in self._candidates():
            if self.stopped.is_set() or len(probed) + len(skipped) >= self.limit:
                break
            due = self._due.get(record.operation_id)
            if due is not None and due[0] > self._clock():
                deferred += 1
                continue
            found = self.tools.find(record.contract, record.contract_version)
            contract = None if found is None else found.contract
            problem = reprobe_problem(record, contract)
            if problem is not None or contract is None:
                why = problem or "no contract"
                skipped.append(Skipped(record.operation_id, record.contract, record.status, why))
                continue
            try:
                outcome = reprobe(
                    self.ledger, record, contract, actor=self.actor, dry_run=self.dry_run
                )
            except IllegalTransitionError as exc:
                errors.append(f"{record.operation_id!r}: {exc}")
                continue
            probed.append(outcome)
            self._schedule(outcome)
        return RecoveryReport(tuple(probed), tuple(skipped), deferred, self.dry_run, tuple(errors))

    def _candidates(self) -> list[OperationRecord]:
        found: list[OperationRecord] = []
        # Rows still backing off are read too, so they never hide the ones behind them.
        window = self.limit + len(self._due)
        for status in self.statuses:
            records = self.ledger.list_operations(status=status, limit=window)
            found.extend(record for record in records if _candidate(record))
        return found

    def _schedule(self, outcome: ReprobeOutcome) -> None:
        if outcome.changed or self.dry_run:
            self._due.pop(outcome.operation_id, None)
            return
        initial, ceiling = self._backoff
        previous = self._due.get(outcome.operation_id)
        wait = initial if previous is None else min(ceiling, previous[1] * 2)
        self._due[outcome.operation_id] = (self._clock() + wait, wait)


def _tools(tools: ToolIndex | str | Sequence[object] | None) -> ToolIndex:
    if isinstance(tools, ToolIndex):
        return tools
    if tools is None:
        from_env = os.environ.get(TOOLS_VARIABLE)
        return known_tools() if not from_env else known_tools().merged(load_tools(from_env))
    return load_tools(tools)


def recover(
    ledger: EffectLedger | str | os.PathLike[str] | None = None,
    *,
    tools: ToolIndex | str | Sequence[object] | None = None,
    statuses: Iterable[EffectStatus] | None = None,
    limit: int = _DEFAULT_BATCH,
    dry_run: bool = False,
    actor: str | None = None,
) -> RecoveryReport:
    """Re-probe every uncertain operation nobody is working on, once; never dispatch.

    ``ledger`` is a ledger, a path or URL (opened and closed here), or None for
    the executor :func:`effectguard.configure` set. ``tools`` names where the
    probes are: a :class:`~effectguard.decorator.discovery.ToolIndex`, module
    names (``"billing.tools,mail.tools"``) or tool objects; None means every
    tool decorated in this process (plus the ``EFFECTGUARD_TOOLS`` modules).
    An operation whose tool is not among them is reported as skipped. The
    probe's answer is recorded with ``actor`` (default: the OS account).
    """
    index = _tools(tools)
    owned = False
    if ledger is None:
        from effectguard.config import default_executor  # noqa: PLC0415 - config imports this module lazily

        executor = default_executor()
        if executor is None:
            msg = "recover() needs a ledger: pass ledger= or call effectguard.configure() first"
            raise ConfigurationError(msg)
        opened = executor.ledger
    elif isinstance(ledger, EffectLedger):
        opened = ledger
    else:
        opened, owned = open_ledger(ledger, create=False), True
    try:
        recoverer = Recoverer(
            opened, index, statuses=statuses, limit=limit, dry_run=dry_run, actor=actor
        )
        return recoverer.sweep()
    finally:
        if owned:
            opened.close()


def start_recovery(
    ledger: EffectLedger, tools: ToolIndex | str | Sequence[object] | None = None
) -> tuple[threading.Thread, Recoverer]:
    """Run one sweep of ``ledger`` in a daemon thread; it logs what it changed, never raises.

    Returns the thread and its :class:`Recoverer` (set ``stopped`` to end the
    sweep before its next operation).
    """
    recoverer = Recoverer(ledger, ToolIndex(), actor=f"recovery on start as {os_user()}")

    def run() -> None:
        try:
            recoverer.tools = _tools(tools)
            report = recoverer.sweep()
        except Exception:
            logger.exception("recovery sweep on start failed; run `agent-effect-ops reconcile`")
            return
        logger.info(
            "recovery sweep on start: %d probed, %d changed, %d skipped",
            len(report.probed),
            len(report.changed),
            len(report.skipped),
        )
        for outcome in report.changed:
            logger.info(
                "recovered %r: %s -> %s (%s)",
                outcome.operation_id,
                outcome.before.value,
                outcome.after.value,
                outcome.reason,
            )

    thread = threading.Thread(target=run, name="effectguard-recover-on-start", daemon=True)
    thread.start()
    return thread, recoverer
