"""Throughput and latency on distinct operations with 1, 2, 4 and 8 threads and 1 and 4 processes.

Each worker runs its share of the round's operations as fast as it can,
released together by a barrier; throughput is the round's operations over
the time from the first start to the last finish, and each call's latency is
timed on its own. A call that fails because the ledger was locked is
counted, never retried: there must be none.
"""

from __future__ import annotations

import multiprocessing
import queue
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks._calls import CONTRACT, arguments, handler
from benchmarks._config import BenchError
from benchmarks._stats import percentile
from effectguard import EffectExecutor, EffectStatus, open_ledger
from effectguard.errors import LedgerLockedError

__all__ = ["CONFIGURATIONS", "Throughput", "measure"]

#: (mode, workers) of every throughput measurement, in the order they run each round.
CONFIGURATIONS = (
    ("threads", 1),
    ("threads", 2),
    ("threads", 4),
    ("threads", 8),
    ("processes", 1),
    ("processes", 4),
)
_PROCESS_TIMEOUT = 600.0


@dataclass(slots=True)
class _Tally:
    """What one worker did, between ``start`` and ``end`` (seconds on a shared clock)."""

    start: float = 0.0
    end: float = 0.0
    done: int = 0
    lock_errors: int = 0
    errors: int = 0
    first_error: str | None = None
    latencies: list[float] = field(default_factory=list)

    def failed(self, exc: BaseException) -> None:
        if isinstance(exc, LedgerLockedError) or "locked" in str(exc).lower():
            self.lock_errors += 1
        else:
            self.errors += 1
        if self.first_error is None:
            self.first_error = f"{type(exc).__name__}: {exc}"


def _work(
    execute: Callable[..., Any], run: str, numbers: Sequence[int], clock: Callable[[], float]
) -> _Tally:
    tally = _Tally(start=clock())
    for n in numbers:
        called = clock()
        try:
            result = execute(CONTRACT, arguments(run, n), handler)
        except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
            tally.failed(exc)
            continue
        finally:
            tally.latencies.append(clock() - called)
        if result.status is EffectStatus.CONFIRMED:
            tally.done += 1
        else:
            tally.failed(RuntimeError(f"{result.operation_id} ended {result.status.value}"))
    tally.end = clock()
    return tally


@dataclass(frozen=True, slots=True)
class Throughput:
    """Operations per second of one configuration, per round, and every failure seen."""

    mode: str
    workers: int
    rounds: tuple[float, ...]
    lock_errors: int
    errors: int
    first_error: str | None
    p50_rounds_ms: tuple[float, ...] = ()
    p99_rounds_ms: tuple[float, ...] = ()

    @property
    def ops_per_second(self) -> float:
        """The median round's operations per second."""
        return statistics.median(self.rounds)

    @property
    def p50_ms(self) -> float:
        """The median round's median latency of one call, in milliseconds."""
        return statistics.median(self.p50_rounds_ms)

    @property
    def p99_ms(self) -> float:
        """The median round's 99th-percentile latency of one call, in milliseconds."""
        return statistics.median(self.p99_rounds_ms)

    def to_json(self) -> dict[str, Any]:
        """The configuration as the bench's JSON report shows it."""
        return {
            "mode": self.mode,
            "workers": self.workers,
            "ops_per_second": round(self.ops_per_second, 1),
            "rounds": [round(value, 1) for value in self.rounds],
            "p50_ms": round(self.p50_ms, 3),
            "p99_ms": round(self.p99_ms, 3),
            "p99_rounds_ms": [round(value, 3) for value in self.p99_rounds_ms],
            "lock_errors": self.lock_errors,
            "errors": self.errors,
            "first_error": self.first_error,
        }


def _shares(run_size: int, workers: int) -> list[range]:
    return [range(worker, run_size, workers) for worker in range(workers)]


def _threads(executor: EffectExecutor, workers: int, ops: int, run: str) -> list[_Tally]:
    barrier = threading.Barrier(workers)
    tallies: list[_Tally] = [_Tally() for _ in range(workers)]

    def worker(index: int, numbers: range) -> None:
        barrier.wait()
        tallies[index] = _work(executor.execute, run, numbers, time.perf_counter)

    threads = [
        threading.Thread(target=worker, args=(index, numbers), name=f"bench-{run}-{index}")
        for index, numbers in enumerate(_shares(ops, workers))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return tallies


def _process_main(target: str, run: str, numbers: range, barrier: Any, results: Any) -> None:
    """One worker process: open the ledger, warm up, wait for the others, run, report."""
    ledger = open_ledger(target)
    try:
        executor = EffectExecutor(ledger)
        _work(executor.execute, f"{run}-warm-{numbers.start}", [0], time.time)
        barrier.wait(timeout=_PROCESS_TIMEOUT)
        tally = _work(executor.execute, run, numbers, time.time)
        results.put(
            (
                tally.start,
                tally.end,
                tally.done,
                tally.lock_errors,
                tally.errors,
                tally.first_error,
                tally.latencies,
            )
        )
    finally:
        ledger.close()


def _processes(target: str, workers: int, ops: int, run: str) -> list[_Tally]:
    # spawn, not fork: a forked child would inherit this process's threads' locks.
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(workers)
    results = context.Queue()
    children = [
        context.Process(target=_process_main, args=(target, run, numbers, barrier, results))
        for numbers in _shares(ops, workers)
    ]
    for child in children:
        child.start()
    try:
        tallies = [_Tally(*results.get(timeout=_PROCESS_TIMEOUT)) for _ in children]
    except queue.Empty as exc:
        codes = [child.exitcode for child in children]
        msg = f"a worker process did not report (exit codes {codes})"
        raise BenchError(msg) from exc
    finally:
        for child in children:
            child.join(timeout=_PROCESS_TIMEOUT)
            if child.is_alive():
                child.kill()
    return tallies


def measure(
    executor: EffectExecutor,
    target: str,
    ops: int,
    rounds: int,
    progress: Callable[[str], None],
) -> list[Throughput]:
    """Every configuration of :data:`CONFIGURATIONS`, ``rounds`` times, ``ops`` operations each.

    ``executor`` serves the threads; processes open ``target`` themselves.
    """
    _threads(executor, 4, 4 * 5, "twarm")  # grow connection pools before timing
    per_round: dict[tuple[str, int], list[list[_Tally]]] = {key: [] for key in CONFIGURATIONS}
    for index in range(rounds):
        progress(f"throughput round {index + 1}/{rounds}")
        for mode, workers in CONFIGURATIONS:
            run = f"{mode[0]}{workers}r{index}"
            if mode == "threads":
                tallies = _threads(executor, workers, ops, run)
            else:
                tallies = _processes(target, workers, ops, run)
            per_round[mode, workers].append(tallies)
    return [_summary(mode, workers, per_round[mode, workers]) for mode, workers in CONFIGURATIONS]


def _summary(mode: str, workers: int, rounds: list[list[_Tally]]) -> Throughput:
    speeds, p50s, p99s = [], [], []
    for tallies in rounds:
        elapsed = max(t.end for t in tallies) - min(t.start for t in tallies)
        speeds.append(sum(t.done for t in tallies) / elapsed if elapsed > 0 else 0.0)
        latencies = sorted(value for t in tallies for value in t.latencies)
        p50s.append(percentile(latencies, 0.50) * 1000)
        p99s.append(percentile(latencies, 0.99) * 1000)
    every = [tally for tallies in rounds for tally in tallies]
    return Throughput(
        mode=mode,
        workers=workers,
        rounds=tuple(speeds),
        lock_errors=sum(t.lock_errors for t in every),
        errors=sum(t.errors for t in every),
        first_error=next((t.first_error for t in every if t.first_error), None),
        p50_rounds_ms=tuple(p50s),
        p99_rounds_ms=tuple(p99s),
    )
