"""Medians of rounds, and one measurement beside its baseline as a ratio."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Comparison", "floor_lines", "per_call_us", "percentile", "rounded"]


def per_call_us(calls: int, run: Callable[[int], None]) -> float:
    """Microseconds per call of ``run(i)`` for ``i`` in ``range(calls)``, on the monotonic clock."""
    started = time.perf_counter()
    for index in range(calls):
        run(index)
    return (time.perf_counter() - started) * 1_000_000 / calls


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """The nearest-rank ``fraction`` percentile of the sorted ``ordered`` (0.0 when it is empty)."""
    if not ordered:
        return 0.0
    rank = math.ceil(fraction * len(ordered))
    return ordered[min(len(ordered), max(rank, 1)) - 1]


def floor_lines(times: Mapping[str, Sequence[float]]) -> list[str]:
    """A line per measure: its median microseconds per call and its ratio to the first's."""
    medians = {name: statistics.median(values) for name, values in times.items()}
    floor = next(iter(medians.values()))
    return [
        f"{name:42} {median:8.1f} us  {median / floor:5.2f}x the floor"
        for name, median in medians.items()
    ]


def rounded(values: Iterable[float], digits: int = 1) -> list[float]:
    """Return ``values`` rounded for a report."""
    return [round(value, digits) for value in values]


@dataclass(frozen=True, slots=True)
class Comparison:
    """A cost measured in rounds beside the baseline it adds to, both in microseconds per call.

    ``ratio`` is the median subject over the median baseline; ``met`` says
    whether it is within ``target`` (None when there is no target).
    """

    subject: str
    baseline: str
    subject_rounds: tuple[float, ...]
    baseline_rounds: tuple[float, ...]
    target: float | None = None
    note: str | None = None

    @property
    def subject_us(self) -> float:
        """Median microseconds per call of the subject."""
        return statistics.median(self.subject_rounds)

    @property
    def baseline_us(self) -> float:
        """Median microseconds per call of the baseline."""
        return statistics.median(self.baseline_rounds)

    @property
    def ratio(self) -> float:
        """Median subject over median baseline."""
        return self.subject_us / self.baseline_us

    @property
    def met(self) -> bool | None:
        """Whether the ratio is within the target; None without a target."""
        return None if self.target is None else self.ratio <= self.target

    def to_json(self) -> dict[str, Any]:
        """The comparison as the bench's JSON report shows it."""
        return {
            "subject": self.subject,
            "baseline": self.baseline,
            "subject_us": round(self.subject_us, 1),
            "baseline_us": round(self.baseline_us, 1),
            "overhead_us": round(self.subject_us - self.baseline_us, 1),
            "ratio": round(self.ratio, 3),
            "target_ratio": self.target,
            "met": self.met,
            "rounds": {
                "subject_us": rounded(self.subject_rounds),
                "baseline_us": rounded(self.baseline_rounds),
            },
            "note": self.note,
        }
