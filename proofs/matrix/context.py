"""What a matrix run's episodes share, and one call round made by every worker at once.

The run's ledger is reached three ways, all on one
:class:`~effectguard.testkit.clock.SharedClock`: :attr:`EpisodeContext.ledger`
for reading what happened, :attr:`EpisodeContext.counter` (the same handle,
counting fenced-out writes) for the matrix's own calls, and
:attr:`EpisodeContext.faulty` for calls that a ledger fault breaks. Worker
processes (:mod:`~proofs.matrix.workers`) open their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from effectguard import EffectExecutor, EffectLedger, EffectStatus
from effectguard._executor._machine import Jitter, seeded_jitter
from effectguard.testkit._crash.child import ChildRun, ChildRunner
from effectguard.testkit._crash.kinds import Setup
from effectguard.testkit.clock import SharedClock
from effectguard.testkit.faults import Fault, FaultPlan
from proofs.matrix.contention import FenceCounter
from proofs.matrix.site import Site
from proofs.matrix.workers import WorkerAnswer, WorkerPool

__all__ = ["KILLS", "EpisodeContext", "RoundTally"]

#: The faults that kill the calling process: only a crash child ever meets them.
KILLS = frozenset({Fault.CRASH_BEFORE_COMMIT, Fault.CRASH_AFTER_COMMIT})


@dataclass
class RoundTally:
    """What the workers' calls of one episode met (the matrix's own calls count elsewhere)."""

    fenced: int = 0
    met_live_lease: int = 0

    def add(self, answers: list[WorkerAnswer]) -> None:
        """Count the answers of one round."""
        for answer in answers:
            self.fenced += answer.fenced
            self.met_live_lease += answer.met_a_live_lease


@dataclass
class EpisodeContext:
    """What episodes share: the ledger and its handles, the clock, the processes, a directory."""

    site: Site
    ledger: EffectLedger
    clock: SharedClock
    children: ChildRunner
    workers: WorkerPool
    workdir: Path
    faulty: FenceCounter
    patient: FenceCounter
    broken_contract: bool = False
    jitter: Jitter = field(default_factory=lambda: seeded_jitter(0))
    ignore_ledger_refusal: bool = False
    counter: FenceCounter = field(init=False)

    def __post_init__(self) -> None:
        self.counter = FenceCounter(self.ledger)

    @property
    def executor(self) -> EffectExecutor:
        """An executor on the run's ledger and clock; its waits advance the clock."""
        return EffectExecutor(self.counter, clock=self.clock, jitter=self.jitter)

    @property
    def faulty_executor(self) -> EffectExecutor:
        """An executor on the handle a ledger fault breaks."""
        return EffectExecutor(self.faulty, clock=self.clock, jitter=self.jitter)

    @property
    def patient_executor(self) -> EffectExecutor:
        """An executor on the handle whose commits' acknowledgements a fault loses."""
        return EffectExecutor(self.patient, clock=self.clock, jitter=self.jitter)

    @property
    def fenced(self) -> int:
        """Fenced-out writes of this process's calls so far."""
        return self.counter.fenced + self.faulty.fenced + self.patient.fenced

    @property
    def shares_providers(self) -> bool:
        """Whether providers live in files, so that worker processes reach the same one."""
        return self.workers.count > 0

    def worker_run(self, setup: Setup, plan: FaultPlan, provider_path: Path | None) -> ChildRun:
        """The call a worker makes for ``setup``: the same effect, no fault that kills."""
        survivable = {
            attempt: Fault.NONE if fault in KILLS else fault
            for attempt, fault in plan.faults.items()
        }
        return ChildRun(
            ledger_path=self.site.target,
            provider_path=str(provider_path) if provider_path is not None else "",
            kind=setup.kind,
            service=setup.service,
            subject=setup.subject,
            faults=FaultPlan(survivable, pending_probes=plan.pending_probes),
            now=self.clock(),
            visible_after_reads=setup.visible_after_reads,
            lease_seconds=setup.lease_seconds,
            broken_key=setup.broken_key,
            clock_path=str(self.clock.path),
            ledger_options=self.site.options,
        )

    def call_round(self, setup: Setup, run: ChildRun | None, tally: RoundTally) -> EffectStatus:
        """Every worker and this process call the operation at once; returns this call's status."""
        if run is not None:
            self.workers.start(run)
        try:
            status = self.executor.execute(setup.contract, setup.arguments, setup.handler).status
        finally:
            tally.add(self.workers.finish())
        tally.met_live_lease += status is EffectStatus.DISPATCHED
        return status
