"""OpenTelemetry for effectguard: a span, span events and metrics for every effect.

Needs the ``otel`` extra (``pip install 'effectguard[otel]'``), which brings
``opentelemetry-api`` only: which SDK and exporter receive the telemetry is the
application's choice. Without the extra nothing in effectguard imports
OpenTelemetry; importing this package then raises an ``ImportError`` naming
the extra.

:func:`instrument` reports every call of every effect in the process (or of
one executor) through the executor's observer hook; ``configure(telemetry=True)``
does the same for the executor it configures. See ``docs/telemetry.md``.
"""

from __future__ import annotations

try:
    import opentelemetry.trace  # noqa: F401 - fails here, with the extra named, when it is absent
except ModuleNotFoundError as exc:  # pragma: no cover - exercised in a subprocess test
    msg = (
        "effectguard.otel needs OpenTelemetry's API, which is not installed "
        f"({exc.name} is missing): pip install 'effectguard[otel]'"
    )
    raise ImportError(msg) from exc

from effectguard.otel.instrument import Instrumentation, instrument
from effectguard.otel.names import INSTRUMENTATION_NAME

__all__ = ["INSTRUMENTATION_NAME", "Instrumentation", "instrument"]
