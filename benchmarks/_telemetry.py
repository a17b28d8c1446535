"""What telemetry costs per call: instrumented with no-op OpenTelemetry providers vs not at all.

The no-op providers are what an application gets from OpenTelemetry's API
when it installs no SDK, so this is the cost of effectguard's own work for
telemetry (observer, call watch, spans and instruments asked for and
dropped), not of exporting. Both executors share one ledger; their calls
are interleaved in chunks like every other measurement. Without the ``otel``
extra the section is left out of the report.
"""

from __future__ import annotations

from collections.abc import Callable

from benchmarks._calls import CONTRACT, _check, arguments, handler, interleave
from benchmarks._stats import Comparison
from effectguard import EffectExecutor, EffectLedger

__all__ = ["measure"]


def _calls(executor: EffectExecutor, run: str, *, replayed: bool) -> Callable[[int], None]:
    execute = executor.execute

    def call(n: int) -> None:
        _check(execute(CONTRACT, arguments(run, n), handler), replayed=replayed)

    return call


def measure(ledger: EffectLedger, ops: int, rounds: int) -> tuple[Comparison, Comparison] | None:
    """Fresh calls, then their replays, instrumented vs not; None without the ``otel`` extra."""
    try:
        from opentelemetry.metrics import NoOpMeterProvider  # noqa: PLC0415 - the extra is optional
        from opentelemetry.trace import NoOpTracerProvider  # noqa: PLC0415 - ditto

        from effectguard.otel import instrument  # noqa: PLC0415 - ditto
    except ImportError:
        return None
    traced, plain = EffectExecutor(ledger), EffectExecutor(ledger)
    with instrument(
        traced, tracer_provider=NoOpTracerProvider(), meter_provider=NoOpMeterProvider()
    ):
        fresh_subject, fresh_baseline = interleave(
            rounds,
            ops,
            lambda r: _calls(traced, f"t{r}", replayed=False),
            lambda r: _calls(plain, f"p{r}", replayed=False),
        )
        replay_subject, replay_baseline = interleave(
            rounds,
            ops,
            lambda _: _calls(traced, "t0", replayed=True),
            lambda _: _calls(plain, "p0", replayed=True),
        )
    subject = "EffectExecutor.execute, instrumented (no-op tracer and meter providers)"
    baseline = "EffectExecutor.execute, not instrumented"
    return (
        Comparison(subject, baseline, fresh_subject, fresh_baseline, note="fresh operations"),
        Comparison(
            subject,
            baseline,
            replay_subject,
            replay_baseline,
            note="replays: no commit, so the telemetry's own cost shows most",
        ),
    )
