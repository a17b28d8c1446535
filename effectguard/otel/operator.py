"""An operator's resolution as a span, so an incident's trace shows the human step.

The ``agent-effect-ops`` CLI calls :func:`record_operator_action` after a
``confirm``, ``reject`` or ``authorize-retry`` is committed, when the process
has a tracer provider installed (``opentelemetry-instrument agent-effect-ops ...``,
or an application that runs the CLI in-process). What the span says is read
from the event the resolution appended, so it holds the reason as the ledger
keeps it: with the operation's redacted values masked.
"""

from __future__ import annotations

from opentelemetry import metrics, trace

from effectguard import __version__
from effectguard._model import EffectEvent
from effectguard.otel import names
from effectguard.otel.metrics import AWAITING_A_PERSON, Instruments

__all__ = ["configured", "record_operator_action"]


def configured() -> bool:
    """Whether the application installed a tracer provider (the default one drops every span)."""
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def record_operator_action(
    event: EffectEvent,
    contract: str,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
) -> None:
    """Emit the span ``operator {action}`` for the resolution ``event`` recorded.

    Attributes: the operation, its contract, the actor, the action (the event's
    type), the reason and evidence reference, and the statuses before and after;
    one fewer operation awaiting an operator when it left QUARANTINED or
    AWAITING_APPROVAL.
    """
    evidence = event.evidence
    attributes: dict[str, str | int] = {
        names.OPERATION_ID: event.operation_id,
        names.CONTRACT_NAME: contract,
        names.ACTION: event.type.value,
        names.TO_STATUS: event.to_status.value,
        names.ATTEMPT: event.attempt,
    }
    for attribute, key in (
        (names.ACTOR, "actor"),
        (names.REASON, "reason"),
        (names.EVIDENCE_REFERENCE, "evidence_reference"),
    ):
        if isinstance(evidence.get(key), str):
            attributes[attribute] = evidence[key]
    if event.from_status is not None:
        attributes[names.FROM_STATUS] = event.from_status.value
    tracer = trace.get_tracer(
        names.INSTRUMENTATION_NAME, __version__, tracer_provider=tracer_provider
    )
    span = tracer.start_span(
        f"operator {event.type.value}", kind=trace.SpanKind.INTERNAL, attributes=attributes
    )
    span.end()
    if event.from_status in AWAITING_A_PERSON:
        Instruments(meter_provider).awaiting(-1, contract, event.from_status)
