"""What a scenario reports: the ledger's view, the provider's count, and the invariant's checks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Check", "ScenarioReport"]


@dataclass(frozen=True, slots=True)
class Check:
    """One clause of a scenario's invariant, and whether it held."""

    description: str
    held: bool

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form used in reports."""
        return {"check": self.description, "held": self.held}


@dataclass(frozen=True, slots=True)
class ScenarioReport:
    """The outcome of one scenario run.

    ``committed_effects`` is counted by the fake provider, never taken from the
    library; ``duplicates_detected`` is how many of them repeat the one effect
    the scenario's single business operation may have. ``invariant_held`` is
    True only when every check held.
    """

    scenario: str
    seed: int
    operation_id: str
    final_status: str
    attempts: int
    committed_effects: int
    duplicates_detected: int
    event_types: tuple[str, ...]
    invariant: str
    checks: tuple[Check, ...]
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def invariant_held(self) -> bool:
        """True when every check of the invariant held."""
        return bool(self.checks) and all(check.held for check in self.checks)

    def to_json(self) -> dict[str, Any]:
        """Return the JSON report (no paths, no timings: the same for the same seed)."""
        return {
            "scenario": self.scenario,
            "seed": self.seed,
            "operation_id": self.operation_id,
            "final_status": self.final_status,
            "attempts": self.attempts,
            "committed_effects": self.committed_effects,
            "duplicates_detected": self.duplicates_detected,
            "event_types": list(self.event_types),
            "invariant": self.invariant,
            "invariant_held": self.invariant_held,
            "checks": [check.to_json() for check in self.checks],
            "details": dict(self.details),
        }

    def summary(self) -> str:
        """A few lines for a person: what happened, and which checks held."""
        attempts = f"{self.attempts} attempt" + ("" if self.attempts == 1 else "s")
        lines = [
            f"scenario   {self.scenario} (seed {self.seed})",
            f"operation  {self.operation_id}",
            f"status     {self.final_status} after {attempts}",
            (
                f"provider   {self.committed_effects} committed effect(s), "
                f"{self.duplicates_detected} duplicate(s)"
            ),
            f"events     {' > '.join(self.event_types) or '(none)'}",
            f"invariant  {'HELD' if self.invariant_held else 'BROKEN'}: {self.invariant}",
        ]
        lines.extend(
            f"  [{'ok' if check.held else 'FAIL'}] {check.description}" for check in self.checks
        )
        return "\n".join(lines)
