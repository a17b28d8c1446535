"""Turning effectguard's telemetry on and off: :func:`instrument` and :class:`Instrumentation`."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from types import TracebackType
from typing import Any, Self

from opentelemetry import trace

from effectguard._executor import EffectExecutor
from effectguard._executor._observe import observe_everywhere
from effectguard.errors import ConfigurationError
from effectguard.otel.spans import EffectTelemetry

__all__ = ["Instrumentation", "instrument"]

# The instrumentations turned on and not yet off: two covering the same calls would
# report each of them twice (nested duplicate spans, doubled metrics).
_active: list[Instrumentation] = []
_active_lock = threading.Lock()


class Instrumentation:
    """Telemetry that :func:`instrument` turned on; :meth:`uninstrument` turns it off.

    As a context manager it turns it off on exit.
    """

    def __init__(self, telemetry: EffectTelemetry, executor: EffectExecutor | None) -> None:
        self.telemetry = telemetry
        self.executor = executor
        with _active_lock:
            overlapping = next((other for other in _active if other.overlaps(executor)), None)
            if overlapping is not None:
                msg = (
                    f"effectguard is already instrumented ({overlapping!r}): a second "
                    "instrumentation of the same calls would report each of them twice; "
                    "call uninstrument() on the first (or leave its with block) before "
                    "instrumenting again"
                )
                raise ConfigurationError(msg)
            _active.append(self)
        self._withdraw = (
            observe_everywhere(telemetry)
            if executor is None
            else (lambda: executor.remove_observer(telemetry))
        )
        if executor is not None:
            executor.add_observer(telemetry)

    def __repr__(self) -> str:
        where = "every executor" if self.executor is None else repr(self.executor)
        return f"Instrumentation({where})"

    def overlaps(self, executor: EffectExecutor | None) -> bool:
        """Whether this already reports calls of ``executor`` (None: of every executor)."""
        return self.executor is None or executor is None or self.executor is executor

    def uninstrument(self) -> None:
        """Stop reporting calls that start from now on; calling it twice does nothing more."""
        self._withdraw()
        with _active_lock:
            if self in _active:
                _active.remove(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.uninstrument()


def instrument(
    executor: EffectExecutor | None = None,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: Any = None,
    record_arguments: Iterable[str] = (),
) -> Instrumentation:
    """Report every effect call as OpenTelemetry spans, span events and metrics.

    Covers every call in the process, whichever executor runs it, or only the
    calls of ``executor`` when one is given, from calls that start from now
    on. Spans and metrics go to ``tracer_provider`` and ``meter_provider``
    (OpenTelemetry's global providers when None, which are no-ops until the
    application installs an SDK). Arguments are never recorded, except for
    the contracts named in ``record_arguments``, and even then a value named
    in the contract's ``redact=`` is recorded as ``"[redacted]"``.

    Raises :class:`~effectguard.errors.ConfigurationError` while another
    instrumentation covers some of the same calls (the process, or the same
    executor): each call would otherwise be reported twice.
    """
    if isinstance(record_arguments, str):
        msg = "record_arguments takes contract names (a list), not one string"
        raise TypeError(msg)
    if executor is not None and not isinstance(executor, EffectExecutor):
        msg = f"instrument() takes an EffectExecutor, not {type(executor).__name__}"
        raise TypeError(msg)
    telemetry = EffectTelemetry(tracer_provider, meter_provider, record_arguments)
    return Instrumentation(telemetry, executor)
