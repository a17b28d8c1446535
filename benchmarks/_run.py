"""One bench run, start to end: every measurement on one backend, then everything removed."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from benchmarks import _asyncio, _big, _startup, _telemetry, _throughput
from benchmarks._calls import CallBench, count_calls
from benchmarks._config import BenchConfig
from benchmarks._report import BenchReport, WrittenLedger
from benchmarks._site import Site, open_site
from effectguard import EffectExecutor, __version__

__all__ = ["run_bench"]

_COUNTED_CALLS = 10


def _load() -> list[float]:
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return []


def _environment(site: Site) -> dict[str, Any]:
    return {
        "effectguard": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_average_start": _load(),
        **site.environment(),
    }


def run_bench(config: BenchConfig, progress: Callable[[str], None] | None = None) -> BenchReport:
    """Run every measurement of ``config`` and return the report.

    ``progress`` receives a line before each phase. Whatever happens, every
    ledger, file and schema the run made is removed before it returns.
    """
    say = progress or (lambda _: None)
    started = time.perf_counter()
    site = open_site(config.backend, config.db)
    try:
        environment = _environment(site)
        ledger = site.ledger("calls")
        bench = CallBench(
            EffectExecutor(ledger), site.raw(), config.ops, config.rounds, config.backend
        )
        bench.warm_up()
        say(f"guarded calls: {config.rounds} rounds of {config.ops}")
        guarded, primitives = bench.guarded()
        say("replays")
        replay = bench.replay()
        say("decorator")
        decorator, decorator_replay = bench.decorator()
        ledger_calls = count_calls(ledger, _COUNTED_CALLS)
        written = WrittenLedger(
            bench.created + _COUNTED_CALLS, site.ledger_bytes("calls"), config.backend
        )
        throughput = _throughput.measure(
            EffectExecutor(site.ledger("throughput")),
            site.target("throughput"),
            config.ops,
            config.rounds,
            say,
        )
        say(f"asyncio: {_asyncio.TASKS} tasks vs 1 thread, {config.rounds} rounds")
        asyncio = _asyncio.measure(
            EffectExecutor(site.ledger("asyncio")), config.ops, config.rounds
        )
        say("telemetry: instrumented with no-op providers vs not")
        telemetry = _telemetry.measure(site.ledger("telemetry"), config.ops, config.rounds)
        big = _big.measure(site, config.big_ledger_size, config.rounds, say)
        runs = _startup.runs_for(config.rounds)
        say(f"CLI start-up: {runs} runs")
        startup = _startup.measure(runs)
        environment["load_average_end"] = _load()
    finally:
        site.close()
    return BenchReport(
        config=config,
        environment=environment,
        guarded=guarded,
        primitives_rounds=primitives,
        replay=replay,
        decorator=decorator,
        decorator_replay=decorator_replay,
        ledger_calls=ledger_calls,
        throughput=tuple(throughput),
        written=written,
        big=big,
        startup=startup,
        asyncio=asyncio,
        telemetry=telemetry,
        seconds=time.perf_counter() - started,
    )
