"""effectguard's three instruments: calls, their duration, and operations awaiting an operator.

``effectguard.calls`` counts calls by contract and final status (``error``
when the call raised instead of returning a result); ``effectguard.call.duration``
is their duration in seconds, from before the first read to the result;
``effectguard.operations.awaiting_operator`` goes up when an executor
quarantines an operation or records a request awaiting a person's approval,
and down when an operator resolves, approves or denies one (from the
``agent-effect-ops`` CLI when it has a meter); its ``effectguard.status``
attribute (``QUARANTINED`` or ``AWAITING_APPROVAL``) says which. It is a sum of
changes per process: summed over every process that reports it, it is the
number awaiting.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import metrics

from effectguard import __version__
from effectguard._model import EffectStatus
from effectguard.otel import names

__all__ = ["AWAITING_A_PERSON", "Instruments"]

#: The statuses an operation waits in until a person acts on it.
AWAITING_A_PERSON = frozenset({EffectStatus.QUARANTINED, EffectStatus.AWAITING_APPROVAL})

# Bucket bounds (seconds) fit to a call that commits twice and calls a provider:
# the SDK's default bounds start at 0 and step in whole seconds from 5 ms.
_DURATION_BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

_Attributes = Mapping[str, str | bool | int]


class Instruments:
    """The instruments of one meter provider (the global one when None)."""

    def __init__(self, meter_provider: metrics.MeterProvider | None) -> None:
        meter = metrics.get_meter(
            names.INSTRUMENTATION_NAME, __version__, meter_provider=meter_provider
        )
        self._calls = meter.create_counter(
            names.CALLS, unit="{call}", description="Effect calls, by contract and final status"
        )
        self._duration = meter.create_histogram(
            names.CALL_DURATION,
            unit="s",
            description="Duration of effect calls, from the first ledger read to the result",
            explicit_bucket_boundaries_advisory=list(_DURATION_BOUNDS),
        )
        self._awaiting = meter.create_up_down_counter(
            names.AWAITING_OPERATOR,
            unit="{operation}",
            description=(
                "Operations quarantined or awaiting approval, less those an operator resolved"
            ),
        )

    def call(self, seconds: float, attributes: _Attributes) -> None:
        """Count one call that ended with ``attributes`` after ``seconds``."""
        self._calls.add(1, attributes)
        self._duration.record(seconds, attributes)

    def awaiting(self, change: int, contract: str, status: EffectStatus) -> None:
        """One more (+1) or one fewer (-1) operation of ``contract`` waiting in ``status``."""
        self._awaiting.add(change, {names.CONTRACT_NAME: contract, names.STATUS: status.value})
