"""The fault matrix: randomized, seeded episodes across contract kinds, faults and crash points.

Every episode runs one business operation against a fresh fake provider and
is judged by what that provider committed, never by what the library says.
The report counts, per contract kind and in total:

- ``episodes``;
- ``duplicate_effects``: committed effects beyond the first, per operation;
- ``lost_confirmations``: the ledger says CONFIRMED but the provider holds nothing;
- ``quarantined``: operations left for an operator;
- ``needlessly_quarantined``: quarantined although an authoritative probe could
  settle it and no overlap risk remained (the provider holds the effect, or
  attempts were left for a retry its NOT_COMMITTED would allow);
- ``attempts``: dispatches recorded by the ledger;
- and, for context, ``confirmed``, ``unresolved`` (still unknown after the
  call budget: correct when nothing can tell), ``killed`` (children SIGKILLed)
  and ``refused`` (calls the ledger refused because its file was moved away or
  replaced; a request such a call sent to the provider fails the report).

The same seed gives the same report: episodes are drawn from it, the clock is
moved by hand, and the report holds no timings or paths.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from effectguard.executor.pacing import seeded_jitter
from effectguard.ledger.sqlite import SQLiteEffectLedger
from effectguard.model import EffectStatus
from effectguard.testkit.clock import ManualClock
from effectguard.testkit.matrix import episode as _episode
from effectguard.testkit.matrix.child import ChildRunner
from effectguard.testkit.matrix.episode import CrashPoint, EpisodeContext, EpisodeResult
from effectguard.testkit.matrix.kinds import ContractKind
from effectguard.testkit.matrix.replaced import ReplacePoint

__all__ = ["CrashPoint", "MatrixReport", "Metrics", "run_matrix"]

#: Where every matrix clock starts (epoch seconds), so runs are identical.
_EPOCH = 1_800_000_000.0

_COLUMNS = (
    ("episodes", "episodes"),
    ("confirmed", "confirmed"),
    ("quarantined", "quarantined"),
    ("needless", "needlessly_quarantined"),
    ("unresolved", "unresolved"),
    ("duplicates", "duplicate_effects"),
    ("lost", "lost_confirmations"),
    ("attempts", "attempts"),
    ("killed", "killed"),
    ("refused", "refused"),
)


@dataclass
class Metrics:
    """Counts over a set of episodes (see the module docstring for each definition)."""

    episodes: int = 0
    confirmed: int = 0
    quarantined: int = 0
    needlessly_quarantined: int = 0
    unresolved: int = 0
    duplicate_effects: int = 0
    lost_confirmations: int = 0
    attempts: int = 0
    killed: int = 0
    refused: int = 0

    def add(self, result: EpisodeResult) -> None:
        """Count one episode."""
        status = result.final_status
        self.episodes += 1
        self.confirmed += status == EffectStatus.CONFIRMED
        self.quarantined += status == EffectStatus.QUARANTINED
        self.needlessly_quarantined += result.needless_quarantine
        self.unresolved += status not in (
            EffectStatus.CONFIRMED,
            EffectStatus.REJECTED,
            EffectStatus.QUARANTINED,
        )
        self.duplicate_effects += result.duplicates
        self.lost_confirmations += result.lost_confirmation
        self.attempts += result.attempts
        self.killed += result.killed
        self.refused += result.refused

    def to_json(self) -> dict[str, int]:
        """Return the counts by name."""
        return {name: getattr(self, name) for _, name in _COLUMNS}


@dataclass(frozen=True, slots=True)
class MatrixReport:
    """The matrix's findings; :attr:`ok` is False on any duplicate or lost confirmation."""

    seed: int
    broken_contract: bool
    total: Metrics
    kinds: dict[str, Metrics]
    crash_points: dict[str, Metrics]
    results: tuple[EpisodeResult, ...] = field(repr=False)
    ledger_verified: bool = True
    unreachable: Metrics = field(default_factory=Metrics)
    """The episodes whose destination refused their first attempts (nothing sent)."""
    ledger_replaced: Metrics = field(default_factory=Metrics)
    """The episodes whose ledger file was moved away or replaced, then restored."""
    ignore_ledger_refusal: bool = False

    @property
    def ok(self) -> bool:
        """True when no effect was duplicated or lost, no refused call sent, chains verify."""
        return (
            self.total.duplicate_effects == 0
            and self.total.lost_confirmations == 0
            and not any(r.dispatched_when_refused for r in self.results)
            and self.ledger_verified
        )

    @property
    def failed_episodes(self) -> int:
        """Episodes that duplicated an effect, lost a confirmation or dispatched when refused."""
        return sum(
            1
            for r in self.results
            if r.duplicates or r.lost_confirmation or r.dispatched_when_refused
        )

    def to_json(self) -> dict[str, Any]:
        """Return the JSON report: identical for identical seeds and options."""
        return {
            "seed": self.seed,
            "episodes": self.total.episodes,
            "broken_contract": self.broken_contract,
            "ok": self.ok,
            "ledger_verified": self.ledger_verified,
            "total": self.total.to_json(),
            "kinds": {name: metrics.to_json() for name, metrics in self.kinds.items()},
            "crash_points": {
                name: metrics.to_json() for name, metrics in self.crash_points.items()
            },
            "destination_unreachable": self.unreachable.to_json(),
            "ledger_replaced": self.ledger_replaced.to_json(),
            "episode_results": [result.to_json() for result in self.results],
        }

    def table(self) -> str:
        """An aligned table of the metrics per contract kind, per crash point and in total."""
        rows: list[tuple[str, Metrics]] = [
            *self.kinds.items(),
            ("total", self.total),
            *((f"  {name}", metrics) for name, metrics in self.crash_points.items()),
            ("  destination-unreachable", self.unreachable),
            ("  ledger-replaced", self.ledger_replaced),
        ]
        width = max(len(name) for name, _ in rows)
        header = "kind".ljust(width) + "".join(f"  {title:>10}" for title, _ in _COLUMNS)
        lines = [header]
        for name, metrics in rows:
            if name == "total" or (name.startswith("  ") and lines[-1].startswith("total")):
                lines.append("-" * len(header))
            values = "".join(f"  {getattr(metrics, attr):>10}" for _, attr in _COLUMNS)
            lines.append(name.ljust(width) + values)
        return "\n".join(lines)


def run_matrix(
    episodes: int,
    seed: int,
    *,
    broken_contract: bool = False,
    ignore_ledger_refusal: bool = False,
    progress: Callable[[int], None] | None = None,
) -> MatrixReport:
    """Run ``episodes`` episodes drawn from ``seed`` and count what the providers committed.

    ``broken_contract`` makes the guaranteed-key contract send a new key on
    every request while still declaring the guarantee, which the matrix must
    catch as duplicate effects. ``ignore_ledger_refusal`` makes a process whose
    ledger file was moved away or replaced answer the refusal the wrong way, by
    opening the path again and executing there, which the matrix must catch at
    the provider. ``progress`` is called with 1 after each episode.
    """
    if episodes < 1:
        msg = f"episodes must be >= 1, not {episodes!r}"
        raise ValueError(msg)
    rng = random.Random(seed)
    specs = [_episode.draw(number, rng) for number in range(1, episodes + 1)]
    results: list[EpisodeResult] = []
    with (
        tempfile.TemporaryDirectory(prefix="effectguard-matrix-") as tmp,
        ChildRunner() as children,
    ):
        workdir = Path(tmp)
        clock = ManualClock(_EPOCH)
        ledger = SQLiteEffectLedger(workdir / "ledger.db", clock=clock)
        try:
            context = EpisodeContext(
                ledger,
                clock,
                children,
                workdir,
                broken_contract,
                seeded_jitter(seed),
                ignore_ledger_refusal=ignore_ledger_refusal,
            )
            for spec in specs:
                results.append(_episode.run(spec, context))
                if progress is not None:
                    progress(1)
            verified = ledger.verify().ok
        finally:
            ledger.close()
    total = Metrics()
    kinds = {kind.value: Metrics() for kind in ContractKind}
    crash_points = {point.value: Metrics() for point in CrashPoint}
    unreachable, replaced = Metrics(), Metrics()
    for result in results:
        if result.spec.unreachable:
            unreachable.add(result)
        if result.spec.ledger_replaced is not ReplacePoint.NONE:
            replaced.add(result)
        total.add(result)
        kinds[result.spec.kind.value].add(result)
        crash_points[result.spec.crash.value].add(result)
    return MatrixReport(
        seed=seed,
        broken_contract=broken_contract,
        total=total,
        kinds=kinds,
        crash_points=crash_points,
        results=tuple(results),
        ledger_verified=verified,
        unreachable=unreachable,
        ledger_replaced=replaced,
        ignore_ledger_refusal=ignore_ledger_refusal,
    )
