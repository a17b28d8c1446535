"""What more threads can gain on this disk when nothing but the write runs.

Run from the repository root::

    python docs/thread_floor.py [ROUNDS]

Each measure makes 1,000 distinct calls as fast as it can and reports
operations per second; each round runs every measure once, and the median
round is printed. A call is the bench's by-hand floor (one table, an insert
and its commit, then an update and its commit, at WAL and
``synchronous=FULL``) or a guarded call through ``EffectExecutor``:

- the floor with 1 thread, and with 4 threads, each with a connection of its
  own (they meet in SQLite's write lock, as a hand-written integration does);
- the floor with 4 threads, and with 100 asyncio tasks (their writes run in
  ``asyncio.to_thread``), sharing commits through effectguard's group commit:
  the same statements, nothing else around them;
- effectguard with 1 thread and with 4 threads.

Each line gives the measure's speedup over its own kind with 1 thread and the
share of the run's wall time the process spent on a CPU. Only the fsync can be
shared between threads: SQLite has one writer and CPython one interpreter
lock, so the CPU share of a 1-thread run says how much of a call no number of
threads can overlap. The bench's targets for 4 threads and for 100 asyncio
tasks (twice one thread) are read against these lines.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _checkout  # noqa: F401 - puts the checkout's benchmarks/ on sys.path

from benchmarks._calls import CONTRACT, arguments, handler
from benchmarks._sqlite_site import RAW_CLAIM, RAW_OUTCOME, SQLiteRaw
from effectguard import EffectExecutor, EffectStatus, SQLiteEffectLedger
from effectguard.ledger.sqlite import GroupCommit

_CALLS = 1000
_THREADS = 4
_TASKS = 100


class _Connection(sqlite3.Connection):
    """A connection as the group commit takes one: with the lock held while it writes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.in_use = threading.Lock()


class _Floor:
    """The by-hand floor's call, with a connection per thread, alone or sharing commits."""

    def __init__(self, path: Path) -> None:
        self.path, self.local = path, threading.local()
        self.group = GroupCommit(lambda _operation_id: None, lambda exc: exc)
        self.raws: list[SQLiteRaw] = []
        self.lock = threading.Lock()

    def _raw(self) -> SQLiteRaw:
        raw: SQLiteRaw | None = getattr(self.local, "raw", None)
        if raw is None:
            raw = self.local.raw = SQLiteRaw(self.path, factory=_Connection)
            with self.lock:
                self.raws.append(raw)
        return raw

    def alone(self, operation_id: str) -> None:
        """Two commits of this thread's own, waiting in SQLite's lock for the others'."""
        given, output = _texts(operation_id)
        self._raw().record(operation_id, given, output)

    def shared(self, operation_id: str) -> None:
        """The same two writes, each committed with whatever the other threads queued."""
        given, output = _texts(operation_id)

        def connect() -> sqlite3.Connection:
            return self._raw().connection

        self.group.run(
            connect,
            lambda conn: conn.execute(RAW_CLAIM, (operation_id, given, time.time_ns() // 1000)),
            operation_id,
        )
        self.group.run(
            connect,
            lambda conn: conn.execute(RAW_OUTCOME, (output, time.time_ns() // 1000, operation_id)),
            operation_id,
        )

    def close(self) -> None:
        for raw in self.raws:
            raw.close()


def _texts(operation_id: str) -> tuple[str, str]:
    return json.dumps(arguments(operation_id, 0)), json.dumps({"id": operation_id, "ok": True})


def _guarded(executor: EffectExecutor) -> Callable[[str], None]:
    def call(operation_id: str) -> None:
        result = executor.execute(CONTRACT, arguments(operation_id, 0), handler)
        if result.status is not EffectStatus.CONFIRMED:
            msg = f"{result.operation_id} ended {result.status.value}, not CONFIRMED"
            raise RuntimeError(msg)

    return call


def _threads(call: Callable[[str], None], workers: int, run: str) -> tuple[float, float]:
    """Operations per second of the calls spread over ``workers`` threads, and the CPU share."""
    barrier, failures = threading.Barrier(workers + 1), []

    def work(first: int) -> None:
        barrier.wait()
        try:
            for n in range(first, _CALLS, workers):
                call(f"{run}:{n}")
        except Exception as exc:  # noqa: BLE001 - raised again in the measuring thread
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(index,)) for index in range(workers)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started, cpu = time.perf_counter(), time.process_time()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    if failures:
        raise failures[0]
    return _CALLS / wall, (time.process_time() - cpu) / wall


def _tasks(call: Callable[[str], None], run: str) -> tuple[float, float]:
    """The same for 100 asyncio tasks, each call's writes run in ``asyncio.to_thread``."""
    numbers = iter(range(_CALLS))

    async def work() -> None:
        for n in numbers:
            await asyncio.to_thread(call, f"{run}:{n}")

    async def everything() -> None:
        await asyncio.gather(*(work() for _ in range(_TASKS)))

    started, cpu = time.perf_counter(), time.process_time()
    asyncio.run(everything())
    wall = time.perf_counter() - started
    return _CALLS / wall, (time.process_time() - cpu) / wall


def measure(rounds: int) -> dict[str, list[tuple[float, float]]]:
    """Operations per second and CPU share of each measure, per round."""
    directory = Path(tempfile.mkdtemp(prefix="effectguard-threads-"))
    floor = _Floor(directory / "raw.db")
    ledger = SQLiteEffectLedger(directory / "ledger.db")
    try:
        guarded = _guarded(EffectExecutor(ledger))
        guarded("warm")
        floor.alone("warm")
        measures: dict[str, Callable[[str], tuple[float, float]]] = {
            "floor, 1 thread": lambda run: _threads(floor.alone, 1, run),
            "floor, 4 threads, a connection each": lambda run: _threads(floor.alone, 4, run),
            "floor, 4 threads, sharing commits": lambda run: _threads(floor.shared, 4, run),
            "floor, 100 tasks, sharing commits": lambda run: _tasks(floor.shared, run),
            "effectguard, 1 thread": lambda run: _threads(guarded, 1, run),
            "effectguard, 4 threads": lambda run: _threads(guarded, _THREADS, run),
        }
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in measures}
        for number in range(rounds):
            for index, (name, run) in enumerate(measures.items()):
                results[name].append(run(f"r{number}m{index}"))
        return results
    finally:
        floor.close()
        ledger.close()
        shutil.rmtree(directory, ignore_errors=True)


def lines(results: dict[str, list[tuple[float, float]]]) -> list[str]:
    """A line per measure: median operations per second, speedup over its kind's 1 thread, CPU."""
    rates = {
        name: statistics.median(rate for rate, _ in rounds) for name, rounds in results.items()
    }
    shares = {name: statistics.median(cpu for _, cpu in rounds) for name, rounds in results.items()}
    printed = []
    for name, rate in rates.items():
        one = rates[f"{name.split(',')[0]}, 1 thread"]
        printed.append(
            f"{name:38} {rate:8.0f} ops/s  {rate / one:5.2f}x one thread  CPU {shares[name]:.2f}"
        )
    return printed


def main() -> None:
    """Print each measure's line."""
    for line in lines(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 5)):
        sys.stdout.write(f"{line}\n")


if __name__ == "__main__":
    main()
