"""What one fault-matrix episode does, drawn from the seed: contract kind, faults, crash point.

Every random choice of an episode is made here, before anything runs, so the
same seed always plans the same episodes. The ledger faults are drawn from a
stream of their own (two draws per episode, whatever they decide), so adding
them left every other draw of a seed as it was.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

from effectguard.testkit._crash.kinds import ContractKind, Service
from effectguard.testkit.faults import Fault, LedgerFault
from proofs.matrix.replaced import ReplacePoint
from proofs.matrix.site import Backend

__all__ = ["LEDGER_FAULTS", "PLANNED_ATTEMPTS", "CrashPoint", "EpisodeSpec", "draw"]

#: Attempts whose faults are drawn (one more than the contracts' max_attempts).
PLANNED_ATTEMPTS = 4
_FAULTS = (Fault.NONE, Fault.FAIL_BEFORE_COMMIT, Fault.LOSE_ACK, Fault.PENDING)
_FAULT_WEIGHTS = (40, 20, 25, 15)
#: The share of episodes whose destination is unreachable for their first attempts.
_UNREACHABLE_SHARE = 0.15
#: The share of the other episodes (no crash, destination reachable) whose ledger file is replaced.
_REPLACED_SHARE = 0.25
#: The share of the episodes left (no crash, reachable, ledger in place) that get a ledger fault.
_LEDGER_FAULT_SHARE = 0.4
#: The ledger faults each backend can make real.
LEDGER_FAULTS = {
    Backend.SQLITE: (
        LedgerFault.UNAVAILABLE_AT_CLAIM,
        LedgerFault.UNAVAILABLE_AT_OUTCOME,
        LedgerFault.CLOCK_JUMP,
    ),
    Backend.POSTGRES: (
        LedgerFault.UNAVAILABLE_AT_CLAIM,
        LedgerFault.UNAVAILABLE_AT_OUTCOME,
        LedgerFault.LOST_CLAIM_ACK,
        LedgerFault.LOST_OUTCOME_ACK,
        LedgerFault.CLOCK_JUMP,
    ),
}


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
    ledger_fault: LedgerFault = LedgerFault.NONE

    @property
    def subject(self) -> str:
        """The episode's business identifier."""
        return f"episode-{self.number:05d}"


def draw(
    number: int,
    rng: random.Random,
    *,
    backend: str = Backend.SQLITE,
    side: random.Random | None = None,
) -> EpisodeSpec:
    """Draw episode ``number``; kinds take turns so each gets a fair share.

    ``side`` is the stream the ledger faults are drawn from (two draws per
    episode, whatever they decide), so that ``rng``'s draws stay those of
    the matrix before ledger faults existed. On PostgreSQL no ledger file
    can be replaced: those episodes may get a ledger fault instead.
    """
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
        faults = [Fault.UNREACHABLE] * unreachable + [Fault.NONE] * (PLANNED_ATTEMPTS - unreachable)
    replaced, by_empty = ReplacePoint.NONE, False
    if crash is CrashPoint.NONE and not unreachable and rng.random() < _REPLACED_SHARE:
        replaced = rng.choice([ReplacePoint.BEFORE_CLAIM, ReplacePoint.BEFORE_OUTCOME])
        by_empty = rng.random() < 0.5  # noqa: PLR2004 - moved away or replaced, evenly
    if backend != Backend.SQLITE:
        replaced, by_empty = ReplacePoint.NONE, False
    side = side if side is not None else random.Random(f"ledger-faults:{number}")
    roll, pick = side.random(), side.random()
    ledger_fault = LedgerFault.NONE
    plain = crash is CrashPoint.NONE and not unreachable and replaced is ReplacePoint.NONE
    if plain and roll < _LEDGER_FAULT_SHARE:
        options = LEDGER_FAULTS[backend]
        ledger_fault = options[int(pick * len(options))]
        if ledger_fault is LedgerFault.CLOCK_JUMP:
            faults[0] = Fault.LATE_COMMIT  # the owner is still sending when the clock jumps
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
        ledger_fault=ledger_fault,
    )
