"""The bench's concurrency measurements run every call they claim, on a real ledger.

Each check counts what the ledger holds afterwards, never a timing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import _asyncio, _throughput
from benchmarks._stats import percentile
from effectguard import EffectExecutor, EffectStatus, open_ledger


def _confirmed(path: Path) -> list[str]:
    ledger = open_ledger(str(path))
    try:
        records = ledger.list_operations(status=EffectStatus.CONFIRMED, limit=10_000)
    finally:
        ledger.close()
    return [record.operation_id for record in records]


def test_the_asyncio_measurement_confirms_every_operation_once(tmp_path: Path):
    """100 tasks share 7 operations (each taken once) and the thread runs its 7, per round."""
    path = tmp_path / "aio.db"
    ledger = open_ledger(str(path))
    try:
        result = _asyncio.measure(EffectExecutor(ledger), ops=7, rounds=2)
    finally:
        ledger.close()
    ids = _confirmed(path)
    assert len(ids) == len(set(ids)) == 7 + 2 * (7 + 7)  # warm-up, then tasks and thread per round
    assert sum(1 for op in ids if op.startswith("bench:a100r")) == 2 * 7
    assert len(result.tasks_rounds) == len(result.thread_rounds) == 2
    assert len(result.lag_p99_rounds_ms) == 2


def test_eight_threads_and_one_process_confirm_their_share(tmp_path: Path):
    """Every configuration, 8 threads and 1 process included, confirms each of its operations."""
    path = tmp_path / "tp.db"
    ledger = open_ledger(str(path))
    try:
        results = _throughput.measure(EffectExecutor(ledger), str(path), 9, 1, lambda _: None)
    finally:
        ledger.close()
    ids = set(_confirmed(path))
    for mode, workers in _throughput.CONFIGURATIONS:
        mine = [op for op in ids if op.startswith(f"bench:{mode[0]}{workers}r0:")]
        assert len(mine) == 9, (mode, workers)
    assert {(item.mode, item.workers) for item in results} >= {("threads", 8), ("processes", 1)}
    assert all(len(item.p99_rounds_ms) == 1 for item in results)


@pytest.mark.parametrize(
    ("values", "fraction", "expected"),
    [
        ([], 0.99, 0.0),
        ([5.0], 0.5, 5.0),
        ([1.0, 2.0, 3.0, 4.0], 0.5, 2.0),
        ([*range(1, 101)], 0.99, 99),
    ],
)
def test_percentile_is_the_nearest_rank(values: list[float], fraction: float, expected: float):
    """p50 of 1..4 is 2 and p99 of 1..100 is 99: the nearest rank, never an interpolation."""
    assert percentile(values, fraction) == expected
