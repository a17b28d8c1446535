"""The fault matrix's report: what the providers committed, per kind, fault and crash point.

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
  and ``refused`` (calls the ledger refused: its file moved away or replaced,
  or the ledger unavailable; a request such a call sent fails the report);
- ``unexpected``: episodes whose fault did not have the outcome it must
  have (a ledger fault's, or an unreachable destination quarantined);
- and the contention the episodes met: ``takeovers`` (a writer took a held
  operation over: its owner gone or its lease expired), ``lease_expiries``
  (those whose owner was alive), ``fenced`` (writes refused because another
  held the lease) and ``met_live_lease`` (calls that found another process
  working on the operation). A run with workers that shows none of these
  never contended, and fails: it would prove nothing about concurrency.

With one worker the same seed gives the same report: episodes are drawn from
it, the clock is moved by hand, and the report holds no timings or paths.
With several, which process wins each race is up to the scheduler; the
invariants hold whoever wins.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from effectguard import EffectStatus
from effectguard.testkit.faults import LedgerFault
from proofs.matrix.episode import EpisodeResult
from proofs.matrix.ledger_faults import EXPECTED

__all__ = ["MatrixReport", "Metrics"]

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
    ("unexpected", "unexpected"),
    ("takeovers", "takeovers"),
    ("expiries", "lease_expiries"),
    ("fenced", "fenced"),
    ("live-lease", "met_live_lease"),
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
    unexpected: int = 0
    takeovers: int = 0
    lease_expiries: int = 0
    fenced: int = 0
    met_live_lease: int = 0

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
        self.unexpected += not result.as_expected
        self.takeovers += result.takeovers
        self.lease_expiries += result.lease_expiries
        self.fenced += result.fenced
        self.met_live_lease += result.met_live_lease

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
    ledger_faults: dict[str, Metrics] = field(default_factory=dict)
    """The episodes of each ledger fault (see ``ledger_faults.EXPECTED``)."""
    backend: str = "sqlite"
    workers: int = 1

    @property
    def contended(self) -> bool:
        """Whether processes met: a takeover, a fenced write, and (with workers) a live lease."""
        total = self.total
        met = total.met_live_lease > 0 or self.workers == 1
        return total.takeovers > 0 and total.fenced > 0 and met

    @property
    def ok(self) -> bool:
        """No effect duplicated or lost, no refused call sent, faults as expected, chains verify.

        With workers, the run must also have contended (:attr:`contended`).
        """
        return (
            self.total.duplicate_effects == 0
            and self.total.lost_confirmations == 0
            and self.total.unexpected == 0
            and not any(r.dispatched_when_refused for r in self.results)
            and self.ledger_verified
            and (self.workers == 1 or self.contended)
        )

    @property
    def failed_episodes(self) -> int:
        """Episodes that duplicated an effect, lost a confirmation or dispatched when refused."""
        return sum(
            1
            for r in self.results
            if r.duplicates or r.lost_confirmation or r.dispatched_when_refused or not r.as_expected
        )

    def to_json(self) -> dict[str, Any]:
        """Return the JSON report: identical for identical seeds and options."""
        return {
            "seed": self.seed,
            "backend": self.backend,
            "workers": self.workers,
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
            "ledger_faults": {
                name: {**metrics.to_json(), "expected": EXPECTED[LedgerFault(name)]}
                for name, metrics in self.ledger_faults.items()
            },
            "contended": self.contended,
            "episode_results": [result.to_json() for result in self.results],
        }

    def table(self) -> str:
        """An aligned table of the metrics per contract kind, per crash point and in total."""
        rows: list[tuple[str, Metrics]] = [
            *self.kinds.items(),
            ("total", self.total),
            *((f"  {name}", metrics) for name, metrics in self.crash_points.items()),
            ("  destination-unreachable", self.unreachable),
            *([("  ledger-replaced", self.ledger_replaced)] if self.backend == "sqlite" else []),
            *((f"  {name}", metrics) for name, metrics in self.ledger_faults.items()),
        ]
        width = max(len(name) for name, _ in rows)
        header = "kind".ljust(width) + "".join(f"  {title:>10}" for title, _ in _COLUMNS)
        lines = [header]
        for name, metrics in rows:
            if name == "total" or (name.startswith("  ") and lines[-1].startswith("total")):
                lines.append("-" * len(header))
            values = "".join(f"  {getattr(metrics, attr):>10}" for _, attr in _COLUMNS)
            lines.append(name.ljust(width) + values)
        lines.append("expected outcomes of the ledger faults:")
        lines.extend(f"  {name}: {EXPECTED[LedgerFault(name)]}" for name in self.ledger_faults)
        return "\n".join(lines)
