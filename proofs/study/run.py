"""``run_study``: the same seeded fault plans through every strategy, and what each one cost.

Each episode draws a destination (a keyed payment API with a strong lookup,
a key-less email service with an eventually consistent search, or a key-less
ticket system with no lookup) and one fault for its first request (see
:class:`~proofs.study.destination.StudyFault`); a crash's
restart comes a minute later, or, in half of them, the next day, after the
destination forgot the key. Every strategy then meets that same episode on a
fresh destination and the same hand-moved clock, calling again after a crash
or while its outcome is kept open, up to :data:`CALLS` calls.

Per strategy and fault the report counts, from the destination's own count:

- ``duplicates``: effects committed beyond the first;
- ``lost``: the effect never happened and the strategy raised no ticket;
- ``tickets``: operations left for an operator;
- ``provider_calls``: requests and lookups that reached the destination.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from effectguard import EffectExecutor, open_ledger
from effectguard._executor._machine import seeded_jitter
from effectguard.testkit.clock import ManualClock
from proofs.study.destination import Crash, Destination, Lookup, StudyFault
from proofs.study.strategies import Outcome, Strategy, Subject, call

__all__ = ["CALLS", "Cost", "StudyReport", "run_study"]

#: Calls one episode may make per strategy: the first, then restarts or resumes.
CALLS = 4
_EPOCH = 1_800_000_000.0
_DAY = 24 * 3600.0
#: The destinations an episode draws from: (name, keyed, lookup).
DESTINATIONS = (
    ("payment", True, Lookup.STRONG),
    ("email", False, Lookup.EVENTUAL),
    ("ticket", False, Lookup.NONE),
)


@dataclass
class Cost:
    """What one strategy cost over a set of episodes."""

    episodes: int = 0
    duplicates: int = 0
    lost: int = 0
    tickets: int = 0
    provider_calls: int = 0

    def to_json(self) -> dict[str, int]:
        """Return the counts by name."""
        return {
            "episodes": self.episodes,
            "duplicates": self.duplicates,
            "lost": self.lost,
            "tickets": self.tickets,
            "provider_calls": self.provider_calls,
        }


@dataclass(frozen=True, slots=True)
class _Plan:
    number: int
    destination: str
    keyed: bool
    lookup: Lookup
    fault: StudyFault
    restart_after: float
    refusals: int


@dataclass
class StudyReport:
    """Per strategy, per fault and in total: duplicates, lost work, tickets, provider calls."""

    seed: int
    episodes: int
    costs: dict[str, dict[str, Cost]] = field(default_factory=dict)
    """``costs[strategy][fault]``, and ``costs[strategy]["total"]``."""

    @property
    def ok(self) -> bool:
        """Effectguard duplicated nothing, and the naive baseline did (else it proved nothing)."""
        guarded = self.costs[Strategy.EFFECTGUARD.value]["total"]
        naive = self.costs[Strategy.NAIVE.value]["total"]
        return guarded.duplicates == 0 and naive.duplicates > 0

    def to_json(self) -> dict[str, Any]:
        """The report as JSON: identical for identical seeds and episode counts."""
        return {
            "seed": self.seed,
            "episodes": self.episodes,
            "ok": self.ok,
            "strategies": {
                strategy: {fault: cost.to_json() for fault, cost in faults.items()}
                for strategy, faults in self.costs.items()
            },
        }

    def table(self) -> str:
        """An aligned table: one row per strategy and fault, then each strategy's total."""
        header = f"{'strategy':<20}{'fault':<20}{'duplicates':>11}{'lost':>8}"
        header += f"{'tickets':>9}{'calls':>9}"
        lines = [header, "-" * len(header)]
        for strategy, faults in self.costs.items():
            for fault, cost in faults.items():
                lines.append(
                    f"{strategy:<20}{fault:<20}{cost.duplicates:>11}{cost.lost:>8}"
                    f"{cost.tickets:>9}{cost.provider_calls:>9}"
                )
            lines.append("")
        return "\n".join(lines).rstrip()


def _draw(number: int, rng: random.Random) -> _Plan:
    name, keyed, lookup = rng.choice(DESTINATIONS)
    fault = rng.choice(list(StudyFault))
    restart_after = rng.choice([60.0, _DAY + 3600.0])
    return _Plan(number, name, keyed, lookup, fault, restart_after, rng.randint(1, 3))


def run_study(
    episodes: int, seed: int, *, progress: Callable[[int], None] | None = None
) -> StudyReport:
    """Play ``episodes`` episodes drawn from ``seed`` through every strategy and count the cost."""
    if episodes < 1:
        msg = f"episodes must be >= 1, not {episodes!r}"
        raise ValueError(msg)
    rng = random.Random(seed)
    plans = [_draw(number, rng) for number in range(1, episodes + 1)]
    report = StudyReport(seed=seed, episodes=episodes)
    faults = [fault.value for fault in StudyFault]
    for strategy in Strategy:
        report.costs[strategy.value] = {name: Cost() for name in [*faults, "total"]}
    with tempfile.TemporaryDirectory(prefix="effectguard-study-") as tmp:
        clock = ManualClock(_EPOCH)
        # Nothing here loses power: the study compares strategies, not durability.
        ledger = open_ledger(Path(tmp) / "ledger.db", clock=clock, synchronous="NORMAL")
        try:
            executor = EffectExecutor(ledger, clock=clock, jitter=seeded_jitter(seed))
            for plan in plans:
                for strategy in Strategy:
                    _play(plan, strategy, clock, executor, report)
                if progress is not None:
                    progress(1)
        finally:
            ledger.close()
    return report


def _play(
    plan: _Plan,
    strategy: Strategy,
    clock: ManualClock,
    executor: EffectExecutor,
    report: StudyReport,
) -> None:
    destination = Destination(
        keyed=plan.keyed,
        lookup=plan.lookup,
        fault=plan.fault,
        clock=clock,
        refusals=plan.refusals,
    )
    subject = Subject(
        operation_id=f"{plan.destination}:{plan.number:06d}:{strategy.value}",
        key=f"{plan.destination}-{plan.number:06d}",
    )
    outcome = Outcome.GAVE_UP
    for _ in range(CALLS):
        try:
            outcome = call(strategy, destination, subject, executor)
        except Crash:
            clock.advance(plan.restart_after)  # the process restarts and calls again
            continue
        if outcome is not Outcome.TICKET or strategy is not Strategy.EFFECTGUARD:
            break
        clock.advance(60.0)  # a kept-open outcome is looked at again later (a resume)
    destination.settle()
    clock.advance(1.0)
    for name in (plan.fault.value, "total"):
        cost = report.costs[strategy.value][name]
        cost.episodes += 1
        cost.duplicates += max(0, destination.committed - 1)
        cost.lost += destination.committed == 0 and outcome is not Outcome.TICKET
        cost.tickets += outcome is Outcome.TICKET
        cost.provider_calls += destination.requests + destination.lookups
