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
:mod:`~effectguard.testkit.matrix.replaced`.
"""

from __future__ import annotations

import enum
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from effectguard.errors import InternalError
from effectguard.executor import EffectExecutor
from effectguard.executor.pacing import Jitter, seeded_jitter
from effectguard.ledger.sqlite import SQLiteEffectLedger
from effectguard.model import EffectStatus, OperationRecord
from effectguard.testkit.clock import ManualClock
from effectguard.testkit.faults import Fault, FaultPlan
from effectguard.testkit.matrix.child import ChildRun, ChildRunner
from effectguard.testkit.matrix.kinds import ContractKind, Service, Setup, build_setup
from effectguard.testkit.matrix.replaced import ReplacePoint, play

__all__ = ["CrashPoint", "EpisodeContext", "EpisodeResult", "EpisodeSpec", "draw", "run"]

#: Lease of every matrix contract; a stall advances the clock past it.
LEASE_SECONDS = 30.0
#: Calls one episode may make (the first, then recoveries) before it counts as unresolved.
MAX_CALLS = 8
#: Attempts whose faults are drawn (one more than the contracts' max_attempts).
PLANNED_ATTEMPTS = 4
#: Upper bound on any wait for a thread or a child; reaching it is a failure, not a result.
WAIT_SECONDS = 60.0

_FAULTS = (Fault.NONE, Fault.FAIL_BEFORE_COMMIT, Fault.LOSE_ACK, Fault.PENDING)
_FAULT_WEIGHTS = (40, 20, 25, 15)
#: The share of episodes whose destination is unreachable for their first attempts.
_UNREACHABLE_SHARE = 0.15
#: The share of the other episodes (no crash, destination reachable) whose ledger file is replaced.
_REPLACED_SHARE = 0.25
_KILLS = frozenset({Fault.CRASH_BEFORE_COMMIT, Fault.CRASH_AFTER_COMMIT})
_SETTLED = frozenset({EffectStatus.CONFIRMED, EffectStatus.REJECTED, EffectStatus.QUARANTINED})


class CrashPoint(enum.StrEnum):
    """Where the process owning an operation fails, if anywhere."""

    NONE = "none"
    BEFORE_COMMIT = "crash-before-commit"
    AFTER_COMMIT = "crash-after-commit"
    STALL = "stall-past-lease"


_CRASH_WEIGHTS = {
    CrashPoint.NONE: 55,
    CrashPoint.BEFORE_COMMIT: 15,
    CrashPoint.AFTER_COMMIT: 15,
    CrashPoint.STALL: 15,
}
_CRASH_FAULTS = {
    CrashPoint.BEFORE_COMMIT: Fault.CRASH_BEFORE_COMMIT,
    CrashPoint.AFTER_COMMIT: Fault.CRASH_AFTER_COMMIT,
    CrashPoint.STALL: Fault.LATE_COMMIT,
}


@dataclass(frozen=True, slots=True)
class EpisodeSpec:
    """What one episode does, all of it drawn from the matrix's seed."""

    number: int
    kind: ContractKind
    service: Service
    faults: tuple[Fault, ...]
    crash: CrashPoint
    pending_probes: int
    visible_after_reads: int
    unreachable: int = 0
    ledger_replaced: ReplacePoint = ReplacePoint.NONE
    replaced_by_empty: bool = False

    @property
    def subject(self) -> str:
        """The episode's business identifier."""
        return f"episode-{self.number:05d}"


def draw(number: int, rng: random.Random) -> EpisodeSpec:
    """Draw episode ``number``; kinds take turns so each gets a fair share."""
    kinds = list(ContractKind)
    kind = kinds[number % len(kinds)]
    service = rng.choice([Service.PAYMENT, Service.EMAIL])
    if kind is ContractKind.GUARANTEED_KEY:
        service = Service.PAYMENT
    faults = rng.choices(_FAULTS, weights=_FAULT_WEIGHTS, k=PLANNED_ATTEMPTS)
    crash = rng.choices(list(_CRASH_WEIGHTS), weights=list(_CRASH_WEIGHTS.values()))[0]
    crash_attempt = rng.choice([1, 2])
    if crash is not CrashPoint.NONE:
        faults[0 if crash is CrashPoint.STALL else crash_attempt - 1] = _CRASH_FAULTS[crash]
    unreachable = 0
    if rng.random() < _UNREACHABLE_SHARE:
        # Up to one attempt more than a call's budget: the outage outlasts a call.
        unreachable, crash = rng.randint(1, PLANNED_ATTEMPTS), CrashPoint.NONE
        faults = [Fault.UNREACHABLE] * unreachable + [Fault.NONE] * (
            PLANNED_ATTEMPTS - unreachable
        )
    replaced, by_empty = ReplacePoint.NONE, False
    if crash is CrashPoint.NONE and not unreachable and rng.random() < _REPLACED_SHARE:
        replaced = rng.choice([ReplacePoint.BEFORE_CLAIM, ReplacePoint.BEFORE_OUTCOME])
        by_empty = rng.random() < 0.5  # noqa: PLR2004 - moved away or replaced, evenly
    return EpisodeSpec(
        number=number,
        kind=kind,
        service=service,
        faults=tuple(faults),
        crash=crash,
        pending_probes=rng.randint(1, 2),
        visible_after_reads=rng.randint(1, 3),
        unreachable=unreachable,
        ledger_replaced=replaced,
        replaced_by_empty=by_empty,
    )


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
        }


@dataclass
class EpisodeContext:
    """What episodes share: the ledger, its clock, the crash helper, a work directory."""

    ledger: SQLiteEffectLedger
    clock: ManualClock
    children: ChildRunner
    workdir: Path
    broken_contract: bool = False
    jitter: Jitter = field(default_factory=lambda: seeded_jitter(0))
    ignore_ledger_refusal: bool = False

    @property
    def executor(self) -> EffectExecutor:
        """An executor on the shared ledger and clock; its waits advance the clock."""
        return EffectExecutor(self.ledger, clock=self.clock, jitter=self.jitter)


def run(spec: EpisodeSpec, context: EpisodeContext) -> EpisodeResult:
    """Run one episode to the end of its call budget and judge it."""
    crashes = spec.crash in (CrashPoint.BEFORE_COMMIT, CrashPoint.AFTER_COMMIT)
    provider_path = context.workdir / f"provider-{spec.number:05d}.db" if crashes else None
    broken = context.broken_contract and spec.kind is ContractKind.GUARANTEED_KEY
    planned = FaultPlan(dict(enumerate(spec.faults, 1)), pending_probes=spec.pending_probes)
    # A crash fault is the child's death; this process, recovering, must never die of it.
    survivable = {
        attempt: Fault.NONE if fault in _KILLS else fault
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
    calls, killed = 0, False
    if crashes:
        if provider_path is None:
            msg = f"crash episode {spec!r} without a provider file"
            raise InternalError(msg)
        ended = context.children.run(
            ChildRun(
                ledger_path=str(context.ledger.path),
                provider_path=str(provider_path),
                kind=spec.kind,
                service=spec.service,
                subject=spec.subject,
                faults=planned,
                now=context.clock(),
                visible_after_reads=spec.visible_after_reads,
                lease_seconds=LEASE_SECONDS,
                broken_key=broken,
            )
        )
        calls, killed = 1, ended.killed
    elif spec.crash is CrashPoint.STALL:
        calls = _stall(setup, context)
    refused = stray = 0
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
    executor = context.executor
    operation_id = setup.operation_id
    while calls < MAX_CALLS:
        record = context.ledger.get(operation_id)
        if record is not None and record.status in _SETTLED:
            break
        executor.execute(setup.contract, setup.arguments, setup.handler)
        calls += 1
        context.clock.advance(1.0)
    record = context.ledger.get(operation_id)
    if record is None:
        msg = f"episode {spec!r} never claimed operation {operation_id!r}"
        raise InternalError(msg)
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


def _stall(setup: Setup, context: EpisodeContext) -> int:
    """The owner stalls inside the provider past its lease; a second worker takes over.

    Returns the number of calls made. The second worker runs in a thread too:
    a contract that resends (a broken one) may itself be held by the provider,
    and then both requests are released together.
    """
    executor = context.executor
    provider = setup.provider
    errors: list[BaseException] = []

    def call() -> None:
        try:
            executor.execute(setup.contract, setup.arguments, setup.handler)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the episode's own thread
            errors.append(exc)

    owner = threading.Thread(target=call, name=f"stalled-owner-{setup.operation_id}")
    owner.start()
    if not provider.wait_until_held(1, WAIT_SECONDS):
        msg = f"{setup.operation_id}: the stalled owner never reached the provider"
        raise RuntimeError(msg)
    context.clock.advance(LEASE_SECONDS + 1)
    successor = threading.Thread(target=call, name=f"successor-{setup.operation_id}")
    successor.start()
    deadline = time.monotonic() + WAIT_SECONDS
    while successor.is_alive() and provider.held < 2:  # noqa: PLR2004 - owner and successor
        if time.monotonic() > deadline:
            msg = f"{setup.operation_id}: the successor neither finished nor reached the provider"
            raise RuntimeError(msg)
        successor.join(0.001)
    provider.release_late()
    for thread in (owner, successor):
        thread.join(WAIT_SECONDS)
        if thread.is_alive():
            msg = f"{setup.operation_id}: {thread.name} did not finish"
            raise RuntimeError(msg)
    if errors:
        raise errors[0]
    return 2
