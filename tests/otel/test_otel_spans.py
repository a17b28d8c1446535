"""The span tree, events, status and metrics of each kind of call, from the SDK's exporter.

Every test also counts what the fake provider committed, so a trace that
looks right cannot hide a duplicate or a lost effect.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from extras_support import import_extra
from support import ARGS, OPERATION, capture_contract, wait_until

from effectguard import (
    ConfigurationError,
    EffectAwaitingApproval,
    EffectExecutor,
    EffectRejected,
    EffectStatus,
    OperationConflictError,
    UnknownOutcomePolicy,
    call_scope,
    effect,
)
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, ManualClock

import_extra("opentelemetry.sdk.trace", "otel")
otel = import_extra("effectguard.otel", "otel")
trace = import_extra("opentelemetry.trace", "otel")
StatusCode = trace.StatusCode

from otel_support import Telemetry, event, events  # noqa: E402 - imported once the extra is known to be installed

CONTRACT = "payments.capture"


@pytest.fixture
def telemetry():
    made = Telemetry.make()
    yield made
    made.shutdown()


@pytest.fixture
def executor(ledger, telemetry):
    """An executor whose calls are instrumented, on every backend; uninstrumented afterwards."""
    made = EffectExecutor(ledger, clock=ManualClock(), jitter=lambda ceiling: ceiling)
    with otel.instrument(
        made,
        tracer_provider=telemetry.tracer_provider,
        meter_provider=telemetry.meter_provider,
    ):
        yield made


def _tree(telemetry):
    """The one effect span and its parent, the execute_tool span started for it."""
    [tool] = telemetry.named("execute_tool")
    [span] = telemetry.named("effect")
    assert span.parent is not None
    assert span.parent.span_id == tool.context.span_id
    assert tool.parent is None
    assert span.context.trace_id == tool.context.trace_id
    return tool, span


def test_a_confirmed_call_is_an_effect_span_under_its_own_execute_tool_span(
    executor, telemetry, ledger
):
    """No current span: execute_tool {tool} with the GenAI attributes, effect {contract} under it.

    The handler's own spans nest under the effect span, which is current while it runs.
    """
    provider = FakePaymentProvider()
    tracer = telemetry.tracer_provider.get_tracer("the-http-client")

    def handler(arguments, *, idempotency_key):
        with tracer.start_as_current_span("POST /captures"):
            return provider.handler(arguments, idempotency_key=idempotency_key)

    result = executor.execute(capture_contract(provider), ARGS, handler)

    assert result.status is EffectStatus.CONFIRMED
    tool, span = _tree(telemetry)
    assert tool.name == f"execute_tool {CONTRACT}"
    assert dict(tool.attributes) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": CONTRACT,
        "gen_ai.tool.type": "function",
    }
    assert span.name == f"effect {CONTRACT}"
    assert span.kind is trace.SpanKind.INTERNAL
    assert dict(span.attributes) == {
        "effectguard.operation.id": OPERATION,
        "effectguard.contract.name": CONTRACT,
        "effectguard.contract.version": 1,
        "effectguard.idempotency_guaranteed": False,
        "effectguard.status": "CONFIRMED",
        "effectguard.attempts": 1,
        "effectguard.replayed": False,
        "effectguard.provider.operation_id": "cap_000001",
        "effectguard.overlap_risk": False,
    }
    assert events(span) == ["claimed", "confirmed"]
    assert event(span, "claimed")["effectguard.attempt"] == 1
    assert span.status.status_code is StatusCode.UNSET
    assert tool.status.status_code is StatusCode.UNSET
    [http] = telemetry.named("POST")
    assert http.parent.span_id == span.context.span_id
    assert telemetry.points("effectguard.calls") == [
        (
            {
                "effectguard.contract.name": CONTRACT,
                "effectguard.status": "CONFIRMED",
                "effectguard.replayed": False,
            },
            1,
        )
    ]
    [(_, durations)] = telemetry.points("effectguard.call.duration")
    assert durations == 1
    assert provider.committed() == 1


def test_a_replay_is_a_replayed_event_and_no_dispatch(executor, telemetry):
    """The second call of a confirmed operation: replayed=True, a `replayed` event, nothing sent."""
    provider = FakePaymentProvider()
    contract = capture_contract(provider)
    executor.execute(contract, ARGS, provider.handler)
    telemetry.exporter.clear()

    result = executor.execute(contract, ARGS, provider.handler)

    assert result.replayed
    _, span = _tree(telemetry)
    assert events(span) == ["replayed"]
    assert span.attributes["effectguard.replayed"] is True
    assert span.attributes["effectguard.status"] == "CONFIRMED"
    assert span.status.status_code is StatusCode.UNSET
    replays = [
        value
        for attributes, value in telemetry.points("effectguard.calls")
        if attributes["effectguard.replayed"]
    ]
    assert replays == [1]
    assert provider.requests == 1
    assert provider.committed() == 1


def test_a_lost_acknowledgement_confirmed_by_the_probe(executor, telemetry):
    """Committed, ack lost: outcome_unknown (its exception type), probe COMMITTED, confirmed."""
    provider = FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]))

    result = executor.execute(capture_contract(provider), ARGS, provider.handler)

    assert result.status is EffectStatus.CONFIRMED
    tool, span = _tree(telemetry)
    assert events(span) == [
        "claimed",
        "outcome_unknown",
        "reconciling",
        "probe",
        "confirmed",
    ]
    unknown = event(span, "outcome_unknown")
    assert unknown["error.type"] == "ProviderTimeout"
    assert unknown["effectguard.overlap_risk"] is False
    assert event(span, "probe")["effectguard.probe.status"] == "COMMITTED"
    assert span.attributes["effectguard.status"] == "CONFIRMED"
    assert span.attributes["effectguard.attempts"] == 1
    assert span.status.status_code is StatusCode.UNSET
    assert tool.status.status_code is StatusCode.UNSET
    assert provider.requests == 1
    assert provider.committed() == 1


def test_a_quarantine_is_an_error_and_one_operation_awaiting_an_operator(executor, telemetry):
    """No probe, no guarantee: QUARANTINED, status ERROR with error.type on both spans."""
    provider = FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]))

    result = executor.execute(capture_contract(provider, probe=False), ARGS, provider.handler)

    assert result.status is EffectStatus.QUARANTINED
    tool, span = _tree(telemetry)
    assert events(span)[-2:] == ["quarantined", "exception"]
    assert event(span, "exception") == {
        "exception.type": "effectguard.testkit.fakes.base.ProviderTimeout"
    }
    for each in (tool, span):
        assert each.status.status_code is StatusCode.ERROR
        assert each.attributes["error.type"] == "effectguard.quarantined"
    assert span.status.description.startswith("QUARANTINED: ")
    assert telemetry.points("effectguard.operations.awaiting_operator") == [
        ({"effectguard.contract.name": CONTRACT, "effectguard.status": "QUARANTINED"}, 1)
    ]
    [(attributes, count)] = telemetry.points("effectguard.calls")
    assert attributes["effectguard.status"] == "QUARANTINED"
    assert attributes["error.type"] == "effectguard.quarantined"
    assert count == 1
    assert provider.requests == 1
    assert provider.committed() == 1


def test_a_request_awaiting_approval_awaits_a_person_until_one_approves_it(
    executor, telemetry, ledger
):
    """Recorded AWAITING_APPROVAL: one awaiting a person; approved: none; then one send."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)

    @effect(
        name="billing.refund",
        operation_id="refund:{invoice_id}",
        idempotency_key="refund:{invoice_id}",
        requires_approval=True,
        executor=executor,
    )
    def refund(invoice_id: str, *, idempotency_key: str) -> dict:
        return provider.capture(invoice_id, -500, idempotency_key=idempotency_key)

    with pytest.raises(EffectAwaitingApproval):
        refund("INV-9")
    with pytest.raises(EffectAwaitingApproval):
        refund("INV-9")  # asked again: nothing changes, nothing more awaits
    waiting = {
        "effectguard.contract.name": "billing.refund",
        "effectguard.status": "AWAITING_APPROVAL",
    }
    assert telemetry.points("effectguard.operations.awaiting_operator") == [(waiting, 1)]
    assert provider.committed() == 0

    ledger.approve("refund:INV-9", actor="ana", reason="checked", evidence_reference="T-2")
    from effectguard.otel.operator import record_operator_action  # noqa: PLC0415 - needs the extra

    record_operator_action(
        ledger.events("refund:INV-9")[-1],
        "billing.refund",
        tracer_provider=telemetry.tracer_provider,
        meter_provider=telemetry.meter_provider,
    )
    assert telemetry.points("effectguard.operations.awaiting_operator") == [(waiting, 0)]
    refund("INV-9")
    refund("INV-9")
    assert telemetry.points("effectguard.operations.awaiting_operator") == [(waiting, 0)]
    assert provider.committed() == 1


def test_an_outcome_kept_unknown_is_an_outcome_unknown_error(executor, telemetry):
    """KEEP_UNKNOWN: the span ends OUTCOME_UNKNOWN with error.type effectguard.outcome_unknown."""
    provider = FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]))
    contract = capture_contract(
        provider, probe=False, unknown_outcome=UnknownOutcomePolicy.KEEP_UNKNOWN
    )
    result = executor.execute(contract, ARGS, provider.handler)

    assert result.status is EffectStatus.OUTCOME_UNKNOWN
    _, span = _tree(telemetry)
    assert span.attributes["error.type"] == "effectguard.outcome_unknown"
    assert span.status.status_code is StatusCode.ERROR
    assert telemetry.points("effectguard.operations.awaiting_operator") == []
    assert provider.committed() == 1


def test_a_rejection_is_an_error_of_its_own_type(executor, telemetry):
    """A handler that raised EffectRejected: REJECTED, error.type effectguard.rejected."""
    provider = FakePaymentProvider()

    def handler(arguments, *, idempotency_key):
        msg = "card declined"
        raise EffectRejected(msg)

    result = executor.execute(capture_contract(provider), ARGS, handler)

    assert result.status is EffectStatus.REJECTED
    _, span = _tree(telemetry)
    assert events(span)[-1] == "rejected"
    assert span.attributes["error.type"] == "effectguard.rejected"
    assert span.status.status_code is StatusCode.ERROR
    assert provider.committed() == 0


def test_a_request_that_never_left_is_a_not_sent_error(executor, telemetry):
    """Unreachable on every attempt (not_sent_on): PREPARED, error.type effectguard.not_sent."""
    provider = FakePaymentProvider(faults=FaultPlan([Fault.UNREACHABLE] * 3))
    contract = capture_contract(provider, not_sent_on=(ConnectionRefusedError,))

    result = executor.execute(contract, ARGS, provider.handler)

    assert result.status is EffectStatus.PREPARED
    _, span = _tree(telemetry)
    assert events(span).count("not_sent") == 3
    assert events(span).count("retry_wait") == 2
    assert span.attributes["error.type"] == "effectguard.not_sent"
    assert span.status.status_code is StatusCode.ERROR
    assert provider.committed() == 0


def test_a_request_awaiting_approval_is_its_own_error_and_sends_nothing(executor, telemetry):
    """requires_approval: AWAITING_APPROVAL, an approval_requested event, error.type named."""
    provider = FakePaymentProvider()
    contract = capture_contract(provider, requires_approval=True)

    result = executor.execute(contract, ARGS, provider.handler)

    assert result.status is EffectStatus.AWAITING_APPROVAL
    _, span = _tree(telemetry)
    assert "approval_requested" in events(span)
    assert span.attributes["error.type"] == "effectguard.awaiting_approval"
    assert span.status.status_code is StatusCode.ERROR
    assert provider.committed() == 0


def test_a_retry_shows_the_probe_the_wait_and_the_second_dispatch(executor, telemetry):
    """Failed before commit, probe NOT_COMMITTED: retry_wait, retry, dispatched #2, confirmed."""
    provider = FakePaymentProvider(
        idempotency_guaranteed=False, faults=FaultPlan([Fault.FAIL_BEFORE_COMMIT])
    )

    result = executor.execute(capture_contract(provider), ARGS, provider.handler)

    assert result.attempts == 2
    _, span = _tree(telemetry)
    assert events(span) == [
        "claimed",
        "outcome_unknown",
        "reconciling",
        "retry_wait",
        "probe",
        "retry",
        "dispatched",
        "confirmed",
    ]
    assert event(span, "probe")["effectguard.probe.status"] == "NOT_COMMITTED"
    assert event(span, "retry_wait")["effectguard.wait.seconds"] == pytest.approx(0.1)
    assert event(span, "claimed")["effectguard.attempt"] == 1
    assert event(span, "dispatched")["effectguard.attempt"] == 2
    assert span.attributes["effectguard.attempts"] == 2
    assert provider.requests == 2
    assert provider.committed() == 1


def test_an_async_tool_is_traced_like_a_sync_one(ledger, telemetry):
    """A decorated async tool: the same tree, the handler's span under the effect span."""
    provider = FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]))
    executor = EffectExecutor(ledger, clock=ManualClock())
    tracer = telemetry.tracer_provider.get_tracer("the-http-client")

    async def find(invoice_id: str, amount_cents: int, *, idempotency_key: str):
        return provider.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)

    @effect(
        operation_id="invoice:{invoice_id}:capture",
        idempotency_key="capture:{invoice_id}",
        probe=find,
        executor=executor,
        name=CONTRACT,
    )
    async def capture(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> dict:
        with tracer.start_as_current_span("POST /captures"):
            await asyncio.sleep(0)
            return provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)

    with otel.instrument(
        tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider
    ):
        output = asyncio.run(capture("INV-1042", 1999))

    assert output["id"] == "cap_000001"
    _, span = _tree(telemetry)
    assert events(span) == [
        "claimed",
        "outcome_unknown",
        "reconciling",
        "probe",
        "confirmed",
    ]
    [http] = telemetry.named("POST")
    assert http.parent.span_id == span.context.span_id
    assert provider.committed() == 1


def test_effects_nest_under_the_current_span_and_under_a_frameworks_execute_tool(
    executor, telemetry
):
    """Under an agent's span, execute_tool is its child; under a framework's, the effect is.

    A framework's execute_tool span (Pydantic AI, an MCP server) gets no second execute_tool.
    """
    provider = FakePaymentProvider()
    tracer = telemetry.tracer_provider.get_tracer("agent")
    contract = capture_contract(provider)

    with tracer.start_as_current_span("invoke_agent billing") as agent:
        executor.execute(contract, ARGS, provider.handler)
    tool, span = (telemetry.named("execute_tool")[0], telemetry.named("effect")[0])
    assert tool.parent.span_id == agent.get_span_context().span_id
    assert span.parent.span_id == tool.context.span_id
    telemetry.exporter.clear()

    frameworks = [
        ("execute_tool capture", {"gen_ai.operation.name": "execute_tool"}),  # the semconv
        ("running tool", {"gen_ai.tool.name": "capture"}),  # Pydantic AI before it
        ("execute_tool capture", {}),  # named so, attributes left to later
    ]
    for index, (name, attributes) in enumerate(frameworks):
        with tracer.start_as_current_span(name, attributes=attributes) as theirs:
            executor.execute(contract, {**ARGS, "invoice_id": f"INV-{index}"}, provider.handler)
        [span] = telemetry.named("effect")
        assert span.parent.span_id == theirs.get_span_context().span_id
        assert [s.name for s in telemetry.spans()] == [span.name, name]
        telemetry.exporter.clear()
    assert provider.committed() == 4


def test_the_call_scope_gives_the_tool_call_id(executor, telemetry):
    """Inside call_scope(call_id=...), execute_tool carries gen_ai.tool.call.id."""
    provider = FakePaymentProvider()
    with call_scope(run_id="run-1", call_id="call_abc"):
        executor.execute(capture_contract(provider), ARGS, provider.handler)
    tool, _ = _tree(telemetry)
    assert tool.attributes["gen_ai.tool.call.id"] == "call_abc"
    assert provider.committed() == 1


def test_an_exception_ends_the_spans_with_its_type_and_no_message(executor, telemetry):
    """A conflicting request: ERROR, error.type the exception's qualified type, counted as error."""
    provider = FakePaymentProvider()
    contract = capture_contract(provider)
    executor.execute(contract, ARGS, provider.handler)
    telemetry.exporter.clear()

    with pytest.raises(OperationConflictError):
        executor.execute(contract, {**ARGS, "amount_cents": 5}, provider.handler)

    tool, span = _tree(telemetry)
    failure = "effectguard.errors.OperationConflictError"
    assert event(span, "exception") == {"exception.type": failure}
    for each in (tool, span):
        assert each.status.status_code is StatusCode.ERROR
        assert each.attributes["error.type"] == failure
    errors = [a for a, _ in telemetry.points("effectguard.calls") if a.get("error.type") == failure]
    assert errors == [
        {
            "effectguard.contract.name": CONTRACT,
            "effectguard.status": "error",
            "error.type": failure,
        }
    ]
    assert provider.committed() == 1


def test_a_late_result_after_the_call_gets_a_span_of_its_own(ledger, telemetry):
    """A handler past its deadline returns after its call ended: a span under the effect span."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    gate = threading.Event()

    def handler(arguments, *, idempotency_key):
        gate.wait(30)
        return provider.handler(arguments, idempotency_key=idempotency_key)

    executor = EffectExecutor(ledger, clock=ManualClock())
    contract = capture_contract(provider, probe=False, handler_timeout=0.05)
    with otel.instrument(
        executor,
        tracer_provider=telemetry.tracer_provider,
        meter_provider=telemetry.meter_provider,
    ):
        result = executor.execute(contract, ARGS, handler)
        assert result.status is EffectStatus.QUARANTINED
        gate.set()
        wait_until(lambda: len(telemetry.named("effect")) == 2)

    first, late = telemetry.named("effect")
    assert events(late) == ["late_result"]
    assert late.attributes["effectguard.status"] == "CONFIRMED"
    assert late.parent.span_id == first.context.span_id
    assert provider.committed() == 1


def test_uninstrumenting_stops_the_spans(ledger, telemetry):
    """After uninstrument(), calls emit nothing."""
    provider = FakePaymentProvider()
    executor = EffectExecutor(ledger, clock=ManualClock())
    instrumentation = otel.instrument(
        executor, tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider
    )
    instrumentation.uninstrument()
    instrumentation.uninstrument()
    executor.execute(capture_contract(provider), ARGS, provider.handler)
    assert telemetry.spans() == []
    assert provider.committed() == 1


def test_instrument_refuses_what_is_not_an_executor_or_a_list_of_contracts():
    """Bad input is a one-line TypeError naming it."""
    with pytest.raises(TypeError, match="EffectExecutor"):
        otel.instrument("ledger.db")
    with pytest.raises(TypeError, match="contract names"):
        otel.instrument(record_arguments="payments.capture")


def test_a_second_instrumentation_of_the_same_calls_is_refused(ledger, telemetry):
    """Two instrumentations of the same calls would nest duplicate spans: the second is refused.

    Process-wide over per-executor, per-executor over process-wide and the same
    executor twice are refused in one line; another executor is not; after
    uninstrument() the same one is allowed again. Each call reports one span tree.
    """
    provider = FakePaymentProvider()
    executor = EffectExecutor(ledger, clock=ManualClock())
    other = EffectExecutor(ledger, clock=ManualClock())
    providers = {
        "tracer_provider": telemetry.tracer_provider,
        "meter_provider": telemetry.meter_provider,
    }
    with otel.instrument(executor, **providers):
        for scope in (executor, None):
            with pytest.raises(ConfigurationError, match="already instrumented") as caught:
                otel.instrument(scope, **providers)
            assert "\n" not in str(caught.value)
        with otel.instrument(other, **providers):
            executor.execute(capture_contract(provider), ARGS, provider.handler)
    assert len(telemetry.named("effect")) == 1
    assert len(telemetry.named("execute_tool")) == 1
    with otel.instrument(None, **providers):
        with pytest.raises(ConfigurationError, match="already instrumented"):
            otel.instrument(other, **providers)
        executor.execute(
            capture_contract(provider), {**ARGS, "invoice_id": "INV-2"}, provider.handler
        )
    assert len(telemetry.named("effect")) == 2
    assert provider.committed() == 2
