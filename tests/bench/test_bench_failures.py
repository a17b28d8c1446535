"""The bench counts lock errors instead of hiding them, and sizes its large ledger by --ops."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from benchmarks import BenchConfig, BenchError
from benchmarks._throughput import _threads
from effectguard import EffectExecutor, SQLiteEffectLedger


def test_a_call_refused_by_a_locked_ledger_is_counted_as_a_lock_error(tmp_path: Path):
    """While another connection holds the write lock, every call is a counted lock error."""
    path = tmp_path / "ledger.db"
    path.touch(mode=0o600)  # an empty file becomes a ledger (WAL, migrated) when opened
    ledger = SQLiteEffectLedger(path, busy_timeout=0.01)
    executor = EffectExecutor(ledger)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        tallies = _threads(executor, 2, 4, "locked")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        ledger.close()
    assert sum(tally.lock_errors for tally in tallies) == 4
    assert sum(tally.done for tally in tallies) == 0
    assert all("locked" in (tally.first_error or "") for tally in tallies)


@pytest.mark.parametrize(
    ("ops", "expected"),
    [(1000, 1_000_000), (200, 200_000), (1, 1000), (5000, 1_000_000)],
)
def test_the_large_ledger_scales_with_ops_up_to_a_million(ops: int, expected: int):
    """Without --ledger-size the large ledger has 1,000 operations per call, at most 1,000,000."""
    assert BenchConfig(ops=ops).big_ledger_size == expected


def test_an_explicit_ledger_size_wins():
    """--ledger-size is taken as given."""
    assert BenchConfig(ops=200, ledger_size=1_000_000).big_ledger_size == 1_000_000


@pytest.mark.parametrize(
    "options",
    [{"backend": "mysql"}, {"ops": 0}, {"rounds": -1}, {"ledger_size": 0}],
    ids=["backend", "ops", "rounds", "ledger_size"],
)
def test_a_bad_configuration_is_refused(options: dict[str, object]):
    """An unknown backend or a size below 1 is a BenchError naming it."""
    name = next(iter(options))
    with pytest.raises(BenchError, match=name):
        BenchConfig(**options)  # type: ignore[arg-type]
