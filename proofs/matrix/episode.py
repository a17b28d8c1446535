"""One fault-matrix episode: drawn from the seed, run against a fresh provider, judged by it.

How a crash is modelled:

- ``crash-before-commit`` / ``crash-after-commit``: a real child process runs
  the effect against the file-backed ledger and provider, and the provider's
  fault kills it with SIGKILL on the chosen attempt, before or after the
  provider commits. Recovery runs in this process, which finds a DISPATCHED
  row whose owner is provably gone (no simulation is involved).
- ``stall-past-lease``: the owner is alive but stuck inside the provider (a
  GC pause, a partition) until its lease expires; a second worker takes over
  with overlap risk; then the stuck request commits. Threads and a hand-moved
  clock make this deterministic, with no sleeping.

A *destination unreachable* episode refuses the connection for its first
``unreachable`` attempts (nothing is sent), then the destination is back: it
must end CONFIRMED with one effect and no quarantine, however many calls the
outage spans.

A *ledger replaced* episode moves the ledger file away (or replaces it with
an empty ledger) before the claim or while the first request is out, calls
again from the same process, then restores the file: see
:mod:`~proofs.matrix.replaced` (SQLite only).

A *ledger fault* episode breaks the ledger itself for its first call
(unavailable at the claim or at the outcome, a lost acknowledgement of its
own commit on PostgreSQL) or jumps a caller's clock past a live lease: see
:mod:`~proofs.matrix.ledger_faults` and
:mod:`~proofs.matrix.stall`. Its draws come from a stream of
their own, so adding them left every other draw of a seed as it was.

With workers, every call round is made by every worker process at once
(:meth:`~proofs.matrix.context.EpisodeContext.call_round`), and
the episode counts the takeovers, lease expiries and fenced-out writes it saw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from effectguard import EffectStatus
from effectguard._model import OperationRecord
from effectguard.errors import InternalError
from effectguard.testkit._crash.child import ChildRun
from effectguard.testkit._crash.kinds import ContractKind, Setup, build_setup
from effectguard.testkit.faults import Fault, FaultPlan, LedgerFault
from proofs.matrix import ledger_faults, stall
from proofs.matrix.contention import contention_of
from proofs.matrix.context import KILLS, EpisodeContext, RoundTally
from proofs.matrix.replaced import ReplacePoint, play
from proofs.matrix.spec import LEDGER_FAULTS, CrashPoint, EpisodeSpec, draw

__all__ = ["LEDGER_FAULTS", "CrashPoint", "EpisodeResult", "EpisodeSpec", "draw", "run"]

#: Lease of every matrix contract; a stall advances the clock past it.
LEASE_SECONDS = 30.0
#: Calls one episode may make (the first, then recoveries) before it counts as unresolved.
MAX_CALLS = 8
#: Upper bound on any wait for a thread or a child; reaching it is a failure, not a result.
WAIT_SECONDS = 60.0
_SETTLED = frozenset({EffectStatus.CONFIRMED, EffectStatus.REJECTED, EffectStatus.QUARANTINED})


@dataclass(frozen=True, slots=True)
class EpisodeResult:
    """What an episode ended with, judged by the provider's own count."""

    spec: EpisodeSpec
    final_status: str
    attempts: int
    calls: int
    committed: int
    killed: bool
    lost_confirmation: bool
    needless_quarantine: bool
    refused: int = 0
    """Calls the ledger refused while its file was moved away or replaced."""
    dispatched_when_refused: int = 0
    """Provider requests sent while the ledger file was gone, beyond one in flight (must be 0)."""
    takeovers: int = 0
    """Writers that took the operation over from another (owner gone or lease expired)."""
    lease_expiries: int = 0
    """Takeovers of a lease that had expired while its owner was alive."""
    fenced: int = 0
    """Writes refused because another writer held the lease (every process counted)."""
    met_live_lease: int = 0
    """Calls that found another process working on the operation and left it alone."""
    as_expected: bool = True
    """The episode's fault had the outcome it must have (see ``ledger_faults.EXPECTED``)."""

    @property
    def duplicates(self) -> int:
        """Committed effects beyond the one the episode's operation may have."""
        return max(0, self.committed - 1)

    def to_json(self) -> dict[str, Any]:
        """Return the per-episode line of the matrix report."""
        return {
            "episode": self.spec.number,
            "kind": self.spec.kind.value,
            "service": self.spec.service.value,
            "faults": [fault.value for fault in self.spec.faults],
            "crash": self.spec.crash.value,
            "unreachable": self.spec.unreachable,
            "ledger_replaced": self.spec.ledger_replaced.value,
            "replaced_by_empty": self.spec.replaced_by_empty,
            "final_status": self.final_status,
            "attempts": self.attempts,
            "calls": self.calls,
            "committed": self.committed,
            "duplicates": self.duplicates,
            "killed": self.killed,
            "lost_confirmation": self.lost_confirmation,
            "needless_quarantine": self.needless_quarantine,
            "refused": self.refused,
            "dispatched_when_refused": self.dispatched_when_refused,
            "ledger_fault": self.spec.ledger_fault.value,
            "takeovers": self.takeovers,
            "lease_expiries": self.lease_expiries,
            "fenced": self.fenced,
            "met_live_lease": self.met_live_lease,
            "as_expected": self.as_expected,
        }


def run(spec: EpisodeSpec, context: EpisodeContext) -> EpisodeResult:
    """Run one episode to the end of its call budget and judge it."""
    crashes = spec.crash in (CrashPoint.BEFORE_COMMIT, CrashPoint.AFTER_COMMIT)
    shared = crashes or context.shares_providers
    provider_path = context.workdir / f"provider-{spec.number:05d}.db" if shared else None
    broken = context.broken_contract and spec.kind is ContractKind.GUARANTEED_KEY
    planned = FaultPlan(dict(enumerate(spec.faults, 1)), pending_probes=spec.pending_probes)
    # A crash fault is the child's death; this process, recovering, must never die of it.
    survivable = {
        attempt: Fault.NONE if fault in KILLS else fault
        for attempt, fault in planned.faults.items()
    }
    setup = build_setup(
        spec.kind,
        spec.service,
        spec.subject,
        faults=FaultPlan(survivable, pending_probes=spec.pending_probes),
        path=provider_path,
        visible_after_reads=spec.visible_after_reads,
        lease_seconds=LEASE_SECONDS,
        late_commit_after=WAIT_SECONDS,
        broken_key=broken,
    )
    round_run = (
        context.worker_run(setup, planned, provider_path) if context.shares_providers else None
    )
    tally, fenced_before = RoundTally(), context.fenced
    calls, killed = 0, False
    if crashes:
        calls, killed = 1, _crash(spec, setup, planned, provider_path, context)
    elif spec.crash is CrashPoint.STALL or spec.ledger_fault is LedgerFault.CLOCK_JUMP:
        jump = spec.ledger_fault is LedgerFault.CLOCK_JUMP
        calls = stall.stall(setup, context, jump=jump, run=round_run, tally=tally)
    refused = stray = 0
    as_expected = True
    if spec.ledger_replaced is not ReplacePoint.NONE:
        aside = context.workdir / f"aside-{spec.number:05d}"
        away = play(
            spec.ledger_replaced,
            by_empty=spec.replaced_by_empty,
            setup=setup,
            context=context,
            aside=aside,
        )
        calls, refused, stray = away.calls, away.refused, away.dispatched_when_refused
    elif spec.ledger_fault not in (LedgerFault.NONE, LedgerFault.CLOCK_JUMP):
        outcome = ledger_faults.play(spec.ledger_fault, setup, context)
        calls, refused, as_expected = outcome.calls, outcome.refused, outcome.as_expected
    operation_id = setup.operation_id
    while calls < MAX_CALLS:
        record = context.ledger.get(operation_id)
        if record is not None and record.status in _SETTLED:
            break
        context.call_round(setup, round_run, tally)
        calls += 1
        context.clock.advance(1.0)
    return _judge(
        spec,
        setup,
        context,
        calls=calls,
        killed=killed,
        refused=refused,
        stray=stray,
        as_expected=as_expected,
        fenced=context.fenced - fenced_before + tally.fenced,
        met_live_lease=tally.met_live_lease,
    )


def _crash(
    spec: EpisodeSpec,
    setup: Setup,
    planned: FaultPlan,
    provider_path: Any,
    context: EpisodeContext,
) -> bool:
    """The first call, in a child process that the planned fault may SIGKILL; True if it did."""
    if provider_path is None:
        msg = f"crash episode {spec!r} without a provider file"
        raise InternalError(msg)
    ended = context.children.run(
        ChildRun(
            ledger_path=context.site.target,
            provider_path=str(provider_path),
            kind=spec.kind,
            service=spec.service,
            subject=spec.subject,
            faults=planned,
            now=context.clock(),
            visible_after_reads=spec.visible_after_reads,
            lease_seconds=LEASE_SECONDS,
            broken_key=setup.broken_key,
            clock_path=str(context.clock.path),
            ledger_options=context.site.options,
        )
    )
    return ended.killed


def _judge(
    spec: EpisodeSpec,
    setup: Setup,
    context: EpisodeContext,
    *,
    calls: int,
    killed: bool,
    refused: int,
    stray: int,
    as_expected: bool,
    fenced: int,
    met_live_lease: int,
) -> EpisodeResult:
    """Judge the episode by the provider's count, and count the contention its events show."""
    operation_id = setup.operation_id
    record = context.ledger.get(operation_id)
    if record is None:
        msg = f"episode {spec!r} never claimed operation {operation_id!r}"
        raise InternalError(msg)
    contention = contention_of(context.ledger.events(operation_id))
    if spec.ledger_fault is LedgerFault.CLOCK_JUMP:
        as_expected = contention.takeovers >= 1
    if spec.unreachable and record.status is EffectStatus.QUARANTINED:
        as_expected = False  # connection refused: retried, never quarantined
    committed = setup.provider.committed()
    needless = _needless(spec, setup, record)
    setup.provider.close()
    return EpisodeResult(
        spec=spec,
        final_status=record.status.value,
        attempts=record.attempts,
        calls=calls,
        committed=committed,
        killed=killed,
        lost_confirmation=record.status is EffectStatus.CONFIRMED and committed == 0,
        needless_quarantine=needless,
        refused=refused,
        dispatched_when_refused=stray,
        takeovers=contention.takeovers,
        lease_expiries=contention.lease_expiries,
        fenced=fenced,
        met_live_lease=met_live_lease,
        as_expected=as_expected,
    )


def _needless(spec: EpisodeSpec, setup: Setup, record: OperationRecord) -> bool:
    """A quarantine an authoritative probe could have settled with no overlap risk left.

    The probe would either find the effect (confirm it) or authoritatively not
    find it while attempts remain (retry it); either way no operator was needed.
    """
    if record.status is not EffectStatus.QUARANTINED:
        return False
    if spec.kind is not ContractKind.AUTHORITATIVE_PROBE or record.overlap_risk:
        return False
    holds_effect = setup.provider.accepted(setup.reference) > 0
    return holds_effect or record.attempts < record.attempt_budget
