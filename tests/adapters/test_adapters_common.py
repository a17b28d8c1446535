"""What every framework adapter shares (effectguard.adapters._common), framework-free.

Each test asserts on what the fake provider committed, not only on what the
adapter reports.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from effectguard import (
    CallScope,
    ConfigurationError,
    EffectExecutor,
    EffectRejected,
    EffectStatus,
    InvalidRequestError,
    UnknownOutcomePolicy,
    call_scoped,
    effect,
    open_ledger,
)
from effectguard.adapters import (
    PENDING_KIND,
    Confirmed,
    Pending,
    PendingEffect,
    Refused,
    public_signature,
    resume_effect,
    resume_effect_async,
    run_effect,
    run_effect_async,
)
from effectguard.errors import OperationNotFoundError
from effectguard.testkit import FakePaymentProvider
from effectguard.testkit.fakes.base import Lookup
from effectguard.testkit.faults import Fault, FaultPlan

SCOPE = CallScope("thread-1", "call-1")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


@pytest.fixture
def executor(db: Path) -> EffectExecutor:
    return EffectExecutor(open_ledger(str(db)), poll_interval=0.01)


def capture_tool(provider: FakePaymentProvider, executor: EffectExecutor, **options: Any) -> Any:
    """A payment tool with a business operation id and the provider's probe."""

    def probe(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> Any:
        return provider.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)

    @effect(
        operation_id=options.pop("operation_id", "invoice:{invoice_id}:capture"),
        probe=probe,
        executor=executor,
        **options,
    )
    def capture(  # noqa: D417 - idempotency_key is the executor's, never described to a model
        invoice_id: str, amount_cents: int, *, idempotency_key: str
    ) -> dict[str, Any]:
        """Capture a payment for an invoice.

        Args:
            invoice_id: The invoice to charge, e.g. INV-1042.
            amount_cents: How much to capture, in cents.
        """
        return provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)

    return capture


def lost_ack(**options: Any) -> FakePaymentProvider:
    """A provider that commits the first request and loses its acknowledgement."""
    return FakePaymentProvider(
        idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]), **options
    )


def test_public_signature_offers_only_the_business_parameters_with_their_descriptions(executor):
    """No idempotency_key; the docstring's Args: become descriptions; hints are resolved."""
    shown = public_signature(capture_tool(FakePaymentProvider(), executor), name="pay")
    assert shown.name == "pay"
    assert shown.parameters == ("invoice_id", "amount_cents")
    assert shown.hints == {"invoice_id": str, "amount_cents": int}
    assert shown.descriptions == {
        "invoice_id": "The invoice to charge, e.g. INV-1042.",
        "amount_cents": "How much to capture, in cents.",
    }
    assert shown.description == "Capture a payment for an invoice."


def test_public_signature_refuses_a_function_that_is_not_an_effect():
    """A plain function would run unguarded: a ConfigurationError names the decorator."""

    def send(to: str) -> None: ...

    with pytest.raises(ConfigurationError, match="@effect"):
        public_signature(send)


def test_a_confirmed_call_runs_under_the_scope_and_commits_once(executor):
    """call_scoped ids come from the adapter's scope; a second run replays, no new commit."""
    provider = FakePaymentProvider()
    tool = capture_tool(provider, executor, operation_id=call_scoped("pay"))
    first = run_effect(
        tool,
        {"invoice_id": "INV-1", "amount_cents": 500},
        scope=SCOPE,
        tool="capture",
        tool_call_id="call-1",
    )
    again = run_effect(
        tool,
        {"invoice_id": "INV-1", "amount_cents": 500},
        scope=SCOPE,
        tool="capture",
        tool_call_id="call-1",
    )
    assert isinstance(first, Confirmed)
    assert first.result.operation_id == "pay:thread-1:call-1"
    assert isinstance(again, Confirmed)
    assert again.result.replayed
    assert again.output == first.output
    assert provider.committed() == 1


def test_a_lost_acknowledgement_without_a_lookup_is_pending_with_the_operator_command(executor, db):
    """QUARANTINED after one commit: the payload names the op, status, attempts and the command."""
    provider = lost_ack(lookup=Lookup.NONE)
    tool = capture_tool(provider, executor)
    outcome = run_effect(
        tool,
        {"invoice_id": "INV-2", "amount_cents": 700},
        scope=SCOPE,
        tool="capture",
        tool_call_id="call-9",
    )
    assert isinstance(outcome, Pending)
    pending = outcome.effect
    assert pending.operation_id == "invoice:INV-2:capture"
    assert pending.status is EffectStatus.QUARANTINED
    assert pending.tool == "capture"
    assert pending.tool_call_id == "call-9"
    assert pending.attempts == 1
    assert pending.operator_command.startswith(
        f"agent-effect-ops --db {db.resolve()} confirm invoice:INV-2:capture "
    )
    payload = pending.to_json()
    assert payload["kind"] == PENDING_KIND
    assert payload["status"] == EffectStatus.QUARANTINED.value
    assert PendingEffect.from_json(payload) == pending
    assert provider.committed() == 1


def test_resuming_a_quarantined_operation_sends_nothing_and_stays_pending(executor):
    """Whatever the framework resumes with, QUARANTINED stays paused and nothing is called."""
    provider = lost_ack(lookup=Lookup.NONE)
    tool = capture_tool(provider, executor)
    arguments = {"invoice_id": "INV-3", "amount_cents": 100}
    first = run_effect(tool, arguments, scope=SCOPE, tool="capture", tool_call_id="call-1")
    assert isinstance(first, Pending)
    requests, lookups = provider.requests, provider.lookups
    again = resume_effect(tool, arguments, pending=first.effect, scope=SCOPE)
    assert isinstance(again, Pending)
    assert again.effect.status is EffectStatus.QUARANTINED
    assert (provider.requests, provider.lookups) == (requests, lookups)
    assert provider.committed() == 1


def test_after_the_operator_confirms_resume_returns_the_confirmed_output(executor):
    """The operator's confirmation is replayed on resume; one commit in total."""
    provider = lost_ack(lookup=Lookup.NONE)
    tool = capture_tool(provider, executor)
    arguments = {"invoice_id": "INV-4", "amount_cents": 100}
    first = run_effect(tool, arguments, scope=SCOPE, tool="capture", tool_call_id="call-1")
    assert isinstance(first, Pending)
    capture = provider.find_capture("invoice:INV-4:capture")
    assert capture is not None
    executor.ledger.confirm(
        "invoice:INV-4:capture",
        output=capture,
        provider_operation_id=capture["id"],
        actor="ops@example.com",
        reason="found in the provider dashboard",
        evidence_reference="dashboard",
    )
    resumed = resume_effect(tool, arguments, pending=first.effect, scope=SCOPE)
    assert isinstance(resumed, Confirmed)
    assert resumed.output == capture
    assert provider.committed() == 1


def test_resume_reprobes_an_operation_kept_unknown(executor):
    """OUTCOME_UNKNOWN is probed again on resume; the now-visible commit confirms it."""
    provider = lost_ack(lookup=Lookup.EVENTUAL, visible_after_reads=1)
    tool = capture_tool(provider, executor, unknown_outcome=UnknownOutcomePolicy.KEEP_UNKNOWN)
    arguments = {"invoice_id": "INV-5", "amount_cents": 100}
    first = run_effect(tool, arguments, scope=SCOPE, tool="capture", tool_call_id="call-1")
    assert isinstance(first, Pending)
    assert first.effect.status is EffectStatus.OUTCOME_UNKNOWN
    lookups = provider.lookups
    resumed = resume_effect(tool, arguments, pending=first.effect, scope=SCOPE)
    assert isinstance(resumed, Confirmed)
    assert provider.lookups > lookups
    assert provider.committed() == 1
    assert provider.requests == 1


def test_a_rejected_operation_is_refused_without_inviting_a_retry(executor):
    """REJECTED is a tool error saying not to retry; the operation is never sent again."""
    calls = []

    @effect(operation_id="refund:{order}", executor=executor)
    def refund(order: str) -> dict[str, Any]:
        calls.append(order)
        raise EffectRejected("card closed")

    for _ in range(2):
        outcome = run_effect(refund, {"order": "O-1"}, scope=SCOPE, tool="refund", tool_call_id="c")
        assert isinstance(outcome, Refused)
        assert not outcome.retry_safe
        assert "do not retry" in outcome.message
        assert "card closed" in outcome.message
    assert calls == ["O-1"]


def test_a_conflicting_request_is_refused_and_nothing_is_sent(executor):
    """The same operation id with other arguments: a non-retry tool error, no second commit."""
    provider = FakePaymentProvider()
    tool = capture_tool(provider, executor, operation_id="invoice:{invoice_id}:capture")
    run_effect(
        tool,
        {"invoice_id": "INV-6", "amount_cents": 100},
        scope=SCOPE,
        tool="capture",
        tool_call_id="a",
    )
    outcome = run_effect(
        tool,
        {"invoice_id": "INV-6", "amount_cents": 999},
        scope=SCOPE,
        tool="capture",
        tool_call_id="b",
    )
    assert isinstance(outcome, Refused)
    assert not outcome.retry_safe
    assert outcome.operation_id == "invoice:INV-6:capture"
    assert "do not retry" in outcome.message
    assert provider.requests == 1
    assert provider.committed() == 1


def test_parallel_identical_calls_wait_for_each_other_and_commit_once(executor):
    """Two threads with one operation: the later waits for its peer; both confirmed, one commit."""
    provider = FakePaymentProvider(faults=FaultPlan([Fault.LATE_COMMIT]), late_commit_after=30)
    tool = capture_tool(provider, executor)
    outcomes: list[Any] = []

    def call(call_id: str) -> None:
        outcomes.append(
            run_effect(
                tool,
                {"invoice_id": "INV-7", "amount_cents": 100},
                scope=CallScope("t", call_id),
                tool="capture",
                tool_call_id=call_id,
            )
        )

    threads = [threading.Thread(target=call, args=(f"c{i}",)) for i in range(2)]
    threads[0].start()
    assert provider.wait_until_held(1)
    threads[1].start()
    provider.release_late()
    for thread in threads:
        thread.join(30)
    assert [type(o) for o in outcomes] == [Confirmed, Confirmed]
    assert outcomes[0].output == outcomes[1].output
    assert provider.committed() == 1


def test_resume_refuses_a_call_that_would_be_another_operation(executor):
    """A changed scope on resume would be a new operation: refused before anything is sent."""
    provider = lost_ack(lookup=Lookup.NONE)
    tool = capture_tool(provider, executor, operation_id=call_scoped("pay"))
    arguments = {"invoice_id": "INV-8", "amount_cents": 100}
    first = run_effect(tool, arguments, scope=SCOPE, tool="capture", tool_call_id="call-1")
    assert isinstance(first, Pending)
    with pytest.raises(ConfigurationError, match="nothing was sent"):
        resume_effect(tool, arguments, pending=first.effect, scope=CallScope("thread-2", "call-1"))
    assert provider.requests == 1
    assert provider.committed() == 1


def test_resume_refuses_an_operation_the_ledger_does_not_hold(executor, tmp_path):
    """Resuming against another ledger would dispatch afresh: refused, nothing sent."""
    provider = lost_ack(lookup=Lookup.NONE)
    tool = capture_tool(provider, executor)
    arguments = {"invoice_id": "INV-9", "amount_cents": 100}
    first = run_effect(tool, arguments, scope=SCOPE, tool="capture", tool_call_id="call-1")
    assert isinstance(first, Pending)
    other = capture_tool(provider, EffectExecutor(open_ledger(str(tmp_path / "other.db"))))
    with pytest.raises(OperationNotFoundError):
        resume_effect(other, arguments, pending=first.effect, scope=SCOPE)
    assert provider.requests == 1


def test_a_malformed_payload_is_a_clear_error():
    """from_json refuses anything that is not a pending-effect payload."""
    with pytest.raises(InvalidRequestError, match="not an effectguard pending-effect payload"):
        PendingEffect.from_json({"kind": "other"})
    with pytest.raises(InvalidRequestError, match="malformed"):
        PendingEffect.from_json({"kind": PENDING_KIND, "tool": "x"})


def test_async_tools_and_sync_tools_run_and_resume_from_async_code(executor):
    """run_effect_async awaits an async tool and runs a sync one in a thread, under the scope."""
    provider = lost_ack(lookup=Lookup.NONE)

    @effect(operation_id=call_scoped("async-pay"), executor=executor)
    async def pay(invoice_id: str, *, idempotency_key: str) -> dict[str, Any]:
        return provider.capture(invoice_id, 100, idempotency_key=idempotency_key)

    sync_tool = capture_tool(FakePaymentProvider(), executor, operation_id=call_scoped("sync"))

    async def main() -> tuple[Any, Any, Any]:
        paused = await run_effect_async(
            pay, {"invoice_id": "A-1"}, scope=SCOPE, tool="pay", tool_call_id="call-1"
        )
        assert isinstance(paused, Pending)
        again = await resume_effect_async(
            pay, {"invoice_id": "A-1"}, pending=paused.effect, scope=SCOPE
        )
        done = await run_effect_async(
            sync_tool,
            {"invoice_id": "S-1", "amount_cents": 5},
            scope=SCOPE,
            tool="capture",
            tool_call_id="call-1",
        )
        return paused, again, done

    paused, again, done = asyncio.run(main())
    assert paused.effect.operation_id == "async-pay:thread-1:call-1"
    assert isinstance(again, Pending)
    assert isinstance(done, Confirmed)
    assert done.result.operation_id == "sync:thread-1:call-1"
    assert provider.requests == 1
    assert provider.committed() == 1


def test_a_postgres_ledger_is_named_by_a_placeholder_never_by_its_url(postgres_target):
    """The payload a framework checkpoints never holds the connection string (or its password)."""
    executor = EffectExecutor(open_ledger(postgres_target), poll_interval=0.01)
    provider = lost_ack(lookup=Lookup.NONE)
    tool = capture_tool(provider, executor)
    outcome = run_effect(
        tool,
        {"invoice_id": "PG-1", "amount_cents": 100},
        scope=SCOPE,
        tool="capture",
        tool_call_id="call-1",
    )
    assert isinstance(outcome, Pending)
    command = outcome.effect.operator_command
    assert command.startswith("agent-effect-ops --db LEDGER_URL confirm invoice:PG-1:capture ")
    assert "postgresql" not in json.dumps(outcome.effect.to_json())
    assert provider.committed() == 1
