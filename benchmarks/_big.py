"""Operator reads on a large ledger, and how many bytes a ledger spends per operation.

The bench runs the executor once per kind of history, replicates those
histories into the large ledger with the ledger's own ``bulk_load`` (see
:mod:`benchmarks._histories`), then times the reads an operator runs
during an incident: the quarantined operations, newest first, and one
operation's events.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks._histories import (
    QUARANTINE_EVERY,
    histories,
    operation_id,
    record_shapes,
)
from benchmarks._site import Site
from benchmarks._stats import rounded
from effectguard import EffectStatus

__all__ = ["LIST_LIMIT_TARGETS_MS", "LIST_TARGET_MS", "BigLedger", "build", "measure"]

#: Listing the quarantined operations of a 1,000,000-operation ledger must take less than this.
LIST_TARGET_MS = 20.0
#: Issue 15: listing this many quarantined operations must take less than so many milliseconds.
LIST_LIMIT_TARGETS_MS = {100: 2.0, 1000: 10.0}
#: Reads timed per round, for each kind of read.
_READS = 20
_NAME = "big"
_SHAPES = "shapes"


@dataclass(frozen=True, slots=True)
class BigLedger:
    """The large ledger: its size, build time, read times per round and bytes per operation."""

    operations: int
    quarantined: int
    build_seconds: float
    listed: int
    list_rounds_ms: tuple[float, ...]
    events_rounds_ms: tuple[float, ...]
    events_per_operation: int
    bytes_total: int
    #: Per limit of LIST_LIMIT_TARGETS_MS: operations returned, median milliseconds per round.
    by_limit: dict[int, tuple[int, tuple[float, ...]]] = field(default_factory=dict)

    def limit_ms(self, limit: int) -> float:
        """Median milliseconds of ``list_operations(status=QUARANTINED, limit=limit)``."""
        return statistics.median(self.by_limit[limit][1])

    def limit_met(self, limit: int) -> bool:
        """Whether listing ``limit`` quarantined operations is within issue 15's target."""
        return self.limit_ms(limit) < LIST_LIMIT_TARGETS_MS[limit]

    @property
    def list_ms(self) -> float:
        """Median milliseconds of ``list_operations(status=QUARANTINED, limit=100)``."""
        return statistics.median(self.list_rounds_ms)

    @property
    def events_ms(self) -> float:
        """Median milliseconds of ``events(op)`` for one operation."""
        return statistics.median(self.events_rounds_ms)

    def to_json(self) -> dict[str, Any]:
        """The large ledger as the bench's JSON report shows it."""
        return {
            "operations": self.operations,
            "quarantined": self.quarantined,
            "build_seconds": round(self.build_seconds, 1),
            "list_quarantined": {
                "limit": 100,
                "returned": self.listed,
                "ms": round(self.list_ms, 3),
                "rounds_ms": rounded(self.list_rounds_ms, 3),
                "target_ms": LIST_TARGET_MS,
                "met": self.list_ms < LIST_TARGET_MS,
            },
            "list_quarantined_by_limit": [
                {
                    "limit": limit,
                    "returned": returned,
                    "ms": round(self.limit_ms(limit), 3),
                    "rounds_ms": rounded(rounds_ms, 3),
                    "target_ms": LIST_LIMIT_TARGETS_MS[limit],
                    "met": self.limit_met(limit),
                }
                for limit, (returned, rounds_ms) in sorted(self.by_limit.items())
            ],
            "events": {
                "events_per_operation": self.events_per_operation,
                "ms": round(self.events_ms, 3),
                "rounds_ms": rounded(self.events_rounds_ms, 3),
            },
            "bytes_total": self.bytes_total,
            "bytes_per_operation": round(self.bytes_total / self.operations, 1),
        }


def _median_ms(read: Callable[[], object]) -> float:
    times = []
    for _ in range(_READS):
        started = time.perf_counter()
        read()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def build(site: Site, name: str, size: int) -> None:
    """Fill the new ledger ``name`` with ``size`` operations, the last one just now.

    The executor writes one operation of each kind into a scratch ledger on
    the same site; ``size`` replicas of them are bulk-loaded.
    """
    end_us = time.time_ns() // 1000
    scratch = site.ledger(f"{name}_{_SHAPES}")
    try:
        shapes = record_shapes(scratch, (end_us - 1_000_000) / 1_000_000)
    finally:
        scratch.close()
    site.bulk_load(name, histories(shapes, size, end_us))


def measure(site: Site, size: int, rounds: int, progress: Callable[[str], None]) -> BigLedger:
    """Build a ledger of ``size`` operations on ``site``, then time its reads ``rounds`` times."""
    progress(f"building a ledger of {size:,} operations")
    started = time.perf_counter()
    build(site, _NAME, size)
    build_seconds = time.perf_counter() - started
    ledger = site.ledger(_NAME)
    try:
        chooser = random.Random(size)
        listed = len(ledger.list_operations(status=EffectStatus.QUARANTINED, limit=100))
        events_per_operation = len(ledger.events(operation_id(0)))
        list_rounds, events_rounds = [], []
        returned = {
            limit: len(ledger.list_operations(status=EffectStatus.QUARANTINED, limit=limit))
            for limit in LIST_LIMIT_TARGETS_MS
        }
        limit_rounds: dict[int, list[float]] = {limit: [] for limit in LIST_LIMIT_TARGETS_MS}
        for index in range(rounds):
            progress(f"large-ledger reads, round {index + 1}/{rounds}")
            list_rounds.append(
                _median_ms(
                    lambda: ledger.list_operations(status=EffectStatus.QUARANTINED, limit=100)
                )
            )
            for limit, times in limit_rounds.items():
                times.append(
                    _median_ms(
                        lambda: ledger.list_operations(
                            status=EffectStatus.QUARANTINED,
                            limit=limit,  # noqa: B023 - called at once
                        )
                    )
                )
            wanted = operation_id(chooser.randrange(size))
            events_rounds.append(_median_ms(lambda: ledger.events(wanted)))  # noqa: B023 - called at once
    finally:
        ledger.close()
    return BigLedger(
        operations=size,
        quarantined=size // QUARANTINE_EVERY,
        build_seconds=build_seconds,
        listed=listed,
        list_rounds_ms=tuple(list_rounds),
        events_rounds_ms=tuple(events_rounds),
        events_per_operation=events_per_operation,
        bytes_total=site.ledger_bytes(_NAME),
        by_limit={limit: (returned[limit], tuple(limit_rounds[limit])) for limit in returned},
    )
