"""The operator's resolutions as OpenTelemetry spans, when the process has a tracer.

Nothing here imports OpenTelemetry: only when it is already loaded (by
``opentelemetry-instrument`` or an application running the CLI in-process)
and a tracer provider is installed does a resolution become a span
(:mod:`effectguard.otel.operator`). Telemetry never changes the CLI's outcome:
a failure to emit is logged, and the resolution stands.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from effectguard._model import EffectEvent, OperationRecord

__all__ = ["trace_resolution"]

logger = logging.getLogger("effectguard.cli.ops")


def trace_resolution(record: OperationRecord, event: EffectEvent) -> None:
    """Emit the span of the resolution ``event`` of ``record``'s operation, if traced."""
    if "opentelemetry.trace" not in sys.modules:
        return
    try:
        from effectguard.otel import operator  # noqa: PLC0415 - only when OpenTelemetry is loaded

        if operator.configured():
            operator.record_operator_action(event, record.contract)
    except Exception:  # telemetry must not turn a recorded resolution into a failure
        logger.warning(
            "could not emit the span of %s on %s", event.type, record.operation_id, exc_info=True
        )
