"""100 asyncio tasks calling an async tool through ``execute_async``, beside 1 sync thread.

Each round runs ``ops`` distinct operations both ways, which goes first
alternating round by round: the tasks take the next operation from a shared
counter until none is left, while a ticker task asks to wake every
millisecond and records how late it woke (the event loop's lag: how long a
coroutine on the loop waits behind the effects' work).
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from benchmarks._calls import CONTRACT, arguments, handler
from benchmarks._config import BenchError
from benchmarks._stats import percentile, rounded
from effectguard import EffectExecutor, EffectResult, EffectStatus

__all__ = ["LAG_TARGET_MS", "SPEEDUP_TARGET", "TASKS", "AsyncThroughput", "measure"]

#: Concurrent asyncio tasks of the measurement.
TASKS = 100
#: 100 tasks must do at least this many times the operations per second of 1 thread.
SPEEDUP_TARGET = 2.0
#: The event loop's lag, 99th percentile, must stay below this.
LAG_TARGET_MS = 5.0
# How often the ticker asks to wake: short, so a blocked loop shows at once.
_TICK = 0.001


async def async_handler(arguments: Mapping[str, Any], *, idempotency_key: str | None) -> Any:
    """The async tool: yields to the loop once and returns what the sync tool returns."""
    await asyncio.sleep(0)
    return handler(arguments, idempotency_key=idempotency_key)


@dataclass(frozen=True, slots=True)
class AsyncThroughput:
    """Operations per second of 100 tasks and of 1 thread per round, and the loop's lag p99."""

    tasks_rounds: tuple[float, ...]
    thread_rounds: tuple[float, ...]
    lag_p99_rounds_ms: tuple[float, ...]

    @property
    def tasks_ops_per_second(self) -> float:
        """Median round's operations per second of the tasks."""
        return statistics.median(self.tasks_rounds)

    @property
    def thread_ops_per_second(self) -> float:
        """Median round's operations per second of the one sync thread."""
        return statistics.median(self.thread_rounds)

    @property
    def ratio(self) -> float:
        """Tasks' throughput over the thread's (0.0 when the thread's is 0)."""
        one = self.thread_ops_per_second
        return self.tasks_ops_per_second / one if one else 0.0

    @property
    def lag_p99_ms(self) -> float:
        """Median round's 99th-percentile lateness of the ticker, in milliseconds."""
        return statistics.median(self.lag_p99_rounds_ms)

    @property
    def speedup_met(self) -> bool:
        """Whether the tasks reach :data:`SPEEDUP_TARGET` times the thread's throughput."""
        return self.ratio >= SPEEDUP_TARGET

    @property
    def lag_met(self) -> bool:
        """Whether the loop's lag p99 is below :data:`LAG_TARGET_MS`."""
        return self.lag_p99_ms < LAG_TARGET_MS

    def to_json(self) -> dict[str, Any]:
        """The measurement as the bench's JSON report shows it."""
        return {
            "tasks": TASKS,
            "tasks_ops_per_second": round(self.tasks_ops_per_second, 1),
            "thread_ops_per_second": round(self.thread_ops_per_second, 1),
            "ratio": round(self.ratio, 3),
            "target_ratio": SPEEDUP_TARGET,
            "loop_lag_p99_ms": round(self.lag_p99_ms, 3),
            "target_lag_ms": LAG_TARGET_MS,
            "rounds": {
                "tasks_ops_per_second": rounded(self.tasks_rounds),
                "thread_ops_per_second": rounded(self.thread_rounds),
                "loop_lag_p99_ms": rounded(self.lag_p99_rounds_ms, 3),
            },
        }


def _confirmed(result: EffectResult[Any]) -> None:
    if result.status is not EffectStatus.CONFIRMED:
        msg = (
            f"operation {result.operation_id} ended {result.status.value}: "
            "the bench's calls must confirm"
        )
        raise BenchError(msg)


def _thread(executor: EffectExecutor, ops: int, run: str) -> float:
    started = time.perf_counter()
    for n in range(ops):
        _confirmed(executor.execute(CONTRACT, arguments(run, n), handler))
    return ops / (time.perf_counter() - started)


async def _ticker(stop: asyncio.Event, lags: list[float]) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        due = loop.time() + _TICK
        await asyncio.sleep(_TICK)
        lags.append(max(0.0, loop.time() - due))


async def _tasks(executor: EffectExecutor, ops: int, run: str) -> tuple[float, float]:
    numbers: Iterator[int] = iter(range(ops))

    async def task() -> None:
        # One iterator shared by every task: next() never yields, so no number is taken twice.
        for n in numbers:
            _confirmed(await executor.execute_async(CONTRACT, arguments(run, n), async_handler))

    stop, lags = asyncio.Event(), list[float]()
    ticker = asyncio.create_task(_ticker(stop, lags))
    started = time.perf_counter()
    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(TASKS):
                group.create_task(task())
        elapsed = time.perf_counter() - started
    finally:
        stop.set()
        await ticker
    return ops / elapsed, percentile(sorted(lags), 0.99) * 1000


def measure(executor: EffectExecutor, ops: int, rounds: int) -> AsyncThroughput:
    """``rounds`` rounds of ``ops`` operations by 100 tasks and by 1 thread, interleaved."""
    tasks_rounds, thread_rounds, lag_rounds = [], [], []
    # One loop for every round, so its worker threads are started once, by the warm-up.
    with asyncio.Runner() as runner:
        runner.run(_tasks(executor, min(ops, TASKS), "awarm"))
        for index, tasks_first in zip(range(rounds), itertools.cycle((True, False)), strict=False):
            if not tasks_first:
                thread_rounds.append(_thread(executor, ops, f"s1r{index}"))
            speed, lag = runner.run(_tasks(executor, ops, f"a{TASKS}r{index}"))
            tasks_rounds.append(speed)
            lag_rounds.append(lag)
            if tasks_first:
                thread_rounds.append(_thread(executor, ops, f"s1r{index}"))
    return AsyncThroughput(tuple(tasks_rounds), tuple(thread_rounds), tuple(lag_rounds))
