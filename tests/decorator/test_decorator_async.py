"""@effect on ``async def`` tools: concurrency, async probes, and deadlines that cancel."""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any

import pytest

from effectguard import (
    INJECTED,
    EffectExecutor,
    EffectOutcomeUnknown,
    EffectStatus,
    EventType,
    OutcomeProbeResult,
    effect,
    use_executor,
)
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan


@pytest.fixture
def executor(ledger, clock) -> EffectExecutor:
    """An executor over this test's ledger, on the hand-moved clock."""
    return EffectExecutor(ledger, clock=clock)


def test_async_tool_keeps_its_nature_and_metadata():
    """An async tool stays a coroutine function with its name, doc and signature (less the key)."""

    async def capture(invoice_id: str, *, idempotency_key: str) -> dict:
        """Capture asynchronously."""
        return {}

    decorated = effect(operation_id="invoice:{invoice_id}")(capture)
    assert inspect.iscoroutinefunction(decorated)
    assert decorated.__wrapped__ is capture
    assert decorated.__doc__ == "Capture asynchronously."
    original = inspect.signature(capture)
    assert inspect.signature(decorated) == original.replace(
        parameters=[original.parameters["invoice_id"]]
    )


def test_fifty_distinct_async_operations_under_gather(ledger, executor):
    """50 distinct operations gathered at once: 50 CONFIRMED and 50 committed effects."""
    provider = FakePaymentProvider()

    @effect(
        operation_id="invoice:{invoice_id}:capture",
        idempotency_key="capture:{invoice_id}",
        idempotency_guaranteed=True,
        executor=executor,
    )
    async def capture(
        invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
    ) -> Any:
        await asyncio.sleep(0)
        return provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)

    async def main() -> list[Any]:
        return await asyncio.gather(*(capture.execute(f"INV-{i}", 100 + i) for i in range(50)))

    results = asyncio.run(main())
    assert [r.status for r in results] == [EffectStatus.CONFIRMED] * 50
    assert not any(r.replayed for r in results)
    assert provider.committed() == 50
    assert provider.duplicates() == 0
    assert len(ledger.list_operations(status=EffectStatus.CONFIRMED)) == 50


def test_same_async_operation_ten_times_concurrently_commits_once(executor):
    """Ten concurrent calls of one operation dispatch once; the rest replay it or see it held."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    dispatches = []

    @effect(operation_id="invoice:{invoice_id}:capture", executor=executor)
    async def capture(invoice_id: str, amount_cents: int) -> Any:
        dispatches.append(invoice_id)
        for _ in range(5):
            await asyncio.sleep(0)  # let the other callers reach the ledger meanwhile
        return provider.capture(invoice_id, amount_cents)

    async def main() -> list[Any]:
        return await asyncio.gather(*(capture.execute("INV-1", 100) for _ in range(10)))

    results = asyncio.run(main())
    assert provider.committed() == 1
    assert dispatches == ["INV-1"]
    fresh = [r for r in results if not r.replayed]
    assert len(fresh) == 1
    assert fresh[0].status is EffectStatus.CONFIRMED
    assert {r.status for r in results} <= {EffectStatus.CONFIRMED, EffectStatus.DISPATCHED}
    confirmed = asyncio.run(capture("INV-1", 100))
    assert confirmed == fresh[0].output


def test_async_lost_acknowledgement_is_settled_by_an_async_probe(executor):
    """An async tool's lost ack is reconciled by its async probe: output back, one effect."""
    provider = FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]))
    probed = []

    async def find_capture(invoice_id: str, amount_cents: int) -> OutcomeProbeResult:
        probed.append(invoice_id)
        await asyncio.sleep(0)
        return provider.probe({"invoice_id": invoice_id}, idempotency_key=None)

    @effect(operation_id="invoice:{invoice_id}:capture", probe=find_capture, executor=executor)
    async def capture(invoice_id: str, amount_cents: int) -> Any:
        return provider.capture(invoice_id, amount_cents)

    output = asyncio.run(capture("INV-9", 900))
    assert output["invoice_id"] == "INV-9"
    assert probed == ["INV-9"]
    assert provider.committed() == 1


def test_sync_tool_with_an_async_probe(executor):
    """A sync tool may have an async probe; it still settles a lost ack with one effect."""
    provider = FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]))

    async def find_capture(invoice_id: str, amount_cents: int) -> OutcomeProbeResult:
        return provider.probe({"invoice_id": invoice_id}, idempotency_key=None)

    @effect(operation_id="invoice:{invoice_id}:capture", probe=find_capture, executor=executor)
    def capture(invoice_id: str, amount_cents: int) -> Any:
        return provider.capture(invoice_id, amount_cents)

    assert capture("INV-10", 1000)["invoice_id"] == "INV-10"
    assert provider.committed() == 1


def test_async_handler_past_its_timeout_is_cancelled_and_retried_safely(ledger, executor):
    """A cancelled async handler leaves no overlap risk, so NOT_COMMITTED allows a retry."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    attempts = []
    cancelled = []

    async def find_capture(invoice_id: str) -> OutcomeProbeResult:
        return provider.probe({"invoice_id": invoice_id}, idempotency_key=None)

    @effect(
        operation_id="invoice:{invoice_id}:capture",
        probe=find_capture,
        timeout=0.05,
        executor=executor,
    )
    async def capture(invoice_id: str) -> Any:
        attempts.append(invoice_id)
        if len(attempts) == 1:
            try:
                await asyncio.Event().wait()  # never set: only the deadline ends this attempt
            except asyncio.CancelledError:
                cancelled.append(invoice_id)
                raise
        return provider.capture(invoice_id, 100)

    result = asyncio.run(capture.execute("INV-11"))
    assert result.status is EffectStatus.CONFIRMED
    assert result.attempts == 2
    assert cancelled == ["INV-11"]
    assert provider.committed() == 1
    unknown = [
        e for e in ledger.events("invoice:INV-11:capture") if e.type is EventType.OUTCOME_UNKNOWN
    ]
    assert unknown[0].evidence["overlap_risk"] is False


def test_thread_handler_past_its_timeout_keeps_overlap_risk(ledger, executor):
    """A sync handler past its deadline may still send, so NOT_COMMITTED does not allow a retry."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    release = threading.Event()
    attempts = []

    async def find_capture(invoice_id: str) -> OutcomeProbeResult:
        return provider.probe({"invoice_id": invoice_id}, idempotency_key=None)

    @effect(
        operation_id="invoice:{invoice_id}:capture",
        probe=find_capture,
        timeout=0.05,
        executor=executor,
    )
    def capture(invoice_id: str) -> Any:
        attempts.append(invoice_id)
        release.wait(10)
        return provider.capture(invoice_id, 100)

    try:
        with pytest.raises(EffectOutcomeUnknown) as info:
            capture("INV-12")
        assert info.value.result.evidence["overlap_risk"] is True
        assert provider.committed() == 0
    finally:
        release.set()
        for thread in threading.enumerate():
            if thread.name == "effectguard-handler-invoice:INV-12:capture":
                thread.join(10)
    # The late return is the effect's own acknowledgement: it confirms the operation.
    assert capture("INV-12")["invoice_id"] == "INV-12"
    assert attempts == ["INV-12"]
    assert provider.committed() == 1


def test_lent_executor_reaches_gathered_tasks(ledger, clock):
    """An executor lent with use_executor reaches every task gathered inside the block."""
    executor = EffectExecutor(ledger, clock=clock)

    @effect(operation_id="job:{n}")
    async def job(n: int) -> int:
        return n

    async def main() -> list[int]:
        with use_executor(executor):
            return await asyncio.gather(*(job(n) for n in range(3)))

    assert asyncio.run(main()) == [0, 1, 2]
    assert {r.operation_id for r in ledger.list_operations()} == {"job:0", "job:1", "job:2"}


class Mailer:
    """A client whose async method is a guarded tool with an async probe method."""

    def __init__(self, provider: FakePaymentProvider) -> None:
        self.provider = provider
        self.probes: list[Mailer] = []

    async def find(self, invoice_id: str) -> OutcomeProbeResult:
        """Look the capture up at this client's provider."""
        self.probes.append(self)
        return self.provider.probe({"invoice_id": invoice_id}, idempotency_key=None)

    @effect(operation_id="invoice:{invoice_id}:capture", probe=find)
    async def capture(self, invoice_id: str) -> Any:
        """Capture through this client's provider."""
        await asyncio.sleep(0)
        return self.provider.capture(invoice_id, 100)


def test_async_method_probes_on_its_own_instance(executor):
    """An async method's async probe method runs on the same instance after a lost ack."""
    provider = FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]))
    mailer = Mailer(provider)

    async def main() -> Any:
        with use_executor(executor):
            return await mailer.capture("INV-13")

    assert asyncio.run(main())["invoice_id"] == "INV-13"
    assert mailer.probes == [mailer]
    assert provider.committed() == 1
