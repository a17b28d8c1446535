"""Nothing named in redact= reaches a span, an event, an attribute, a metric or a log record."""

from __future__ import annotations

import logging

import pytest
from extras_support import import_extra

from effectguard import (
    EffectContract,
    EffectExecutor,
    EffectStatus,
    OperationConflictError,
    OutcomeProbeResult,
)
from effectguard.testkit import FakePaymentProvider, ManualClock

import_extra("opentelemetry.sdk.trace", "otel")
otel = import_extra("effectguard.otel", "otel")

from otel_support import Telemetry, events  # noqa: E402 - imported once the extra is known to be installed

CARD = "4111111111111111"
OTHER_CARD = "5500005555555559"
HOLDER = "Zoe Q. Cardholder"


def _contract(provider: FakePaymentProvider, name: str) -> EffectContract:
    def probe(arguments, *, idempotency_key):
        found = provider.probe(arguments, idempotency_key=idempotency_key)
        # A probe quoting the secret in its evidence: scrubbed before anyone sees it.
        return OutcomeProbeResult(
            found.status,
            found.output,
            found.provider_operation_id,
            {"lookup": f"card {arguments['card']} of {arguments['holder']}"},
        )

    return EffectContract(
        name=name,
        operation_id=lambda a: f"invoice:{a['invoice_id']}:capture",
        provider_idempotency_key=lambda a: f"capture:{a['invoice_id']}",
        outcome_probe=probe,
        redact=frozenset({"card", "holder"}),
    )


@pytest.mark.parametrize("opted_in", [False, True])
def test_redacted_values_are_absent_from_every_span_event_attribute_metric_and_log(
    ledger, caplog, opted_in
):
    """A card quoted by the handler's exception and the probe's evidence reaches no telemetry.

    Then a conflicting call with another card: that one appears nowhere either.
    With the contract opted in to argument recording, the other arguments are recorded and
    the redacted ones are "[redacted]"; without it, no argument is recorded at all.
    """
    caplog.set_level(logging.DEBUG, logger="effectguard")
    telemetry = Telemetry.make()
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    name = "payments.capture_with_card"
    contract = _contract(provider, name)
    arguments = {"invoice_id": "INV-9", "amount_cents": 1250, "card": CARD, "holder": HOLDER}

    def handler(arguments, *, idempotency_key):
        provider.handler(arguments, idempotency_key=idempotency_key)
        msg = (
            f"gateway reset while charging card {arguments['card']} (holder {arguments['holder']})"
        )
        raise ConnectionResetError(msg)

    executor = EffectExecutor(ledger, clock=ManualClock())
    with otel.instrument(
        executor,
        tracer_provider=telemetry.tracer_provider,
        meter_provider=telemetry.meter_provider,
        record_arguments=[name] if opted_in else [],
    ):
        result = executor.execute(contract, arguments, handler)
        with pytest.raises(OperationConflictError):
            executor.execute(contract, {**arguments, "card": OTHER_CARD}, handler)

    assert result.status is EffectStatus.CONFIRMED
    first = telemetry.named("effect")[0]
    assert "outcome_unknown" in events(first)  # the exception did reach the trace, scrubbed
    exported = [span.to_json() for span in telemetry.spans()]
    metrics = telemetry.reader.get_metrics_data().to_json()
    logs = [record.getMessage() + repr(record.__dict__) for record in caplog.records]
    assert logs  # the executor did log the unknown outcome
    for secret in (CARD, OTHER_CARD, HOLDER):
        for text in (*exported, metrics, *logs):
            assert secret not in text
    recorded = {k: v for k, v in first.attributes.items() if k.startswith("effectguard.argument.")}
    if opted_in:
        assert recorded == {
            "effectguard.argument.invoice_id": "INV-9",
            "effectguard.argument.amount_cents": 1250,
            "effectguard.argument.card": "[redacted]",
            "effectguard.argument.holder": "[redacted]",
        }
    else:
        assert recorded == {}
    assert provider.committed() == 1
    telemetry.shutdown()
