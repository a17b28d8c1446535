"""Identical calls in parallel share one dispatch: the later one waits for its peer's outcome."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from effectguard import (
    EffectContract,
    EffectExecutor,
    EffectInProgress,
    EffectLedger,
    EffectStatus,
    configure,
    effect,
)
from effectguard.ledger import OperationRecord
from effectguard.testkit import FakePaymentProvider, ManualClock

WAIT = 10.0


class DispatchedReads:
    """The test's ledger, reporting when some caller reads the operation as DISPATCHED.

    Every call goes to the real ledger; this only tells the test that a second
    caller has found the first one's live lease, so the first may then finish.
    """

    def __init__(self, ledger: EffectLedger) -> None:
        self._ledger = ledger
        self.seen = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger, name)

    def get(self, operation_id: str, **kwargs: Any) -> OperationRecord | None:
        """Read from the real ledger; note a DISPATCHED record."""
        record = self._ledger.get(operation_id, **kwargs)
        if record is not None and record.status is EffectStatus.DISPATCHED:
            self.seen.set()
        return record


@pytest.fixture
def reads(ledger) -> DispatchedReads:
    """The ledger under test, watched for a caller that finds a live peer."""
    return DispatchedReads(ledger)


def test_two_threads_with_the_same_call_share_one_dispatch(reads):
    """The second thread waits for the first and returns its output; one commit, one request."""
    provider = FakePaymentProvider()
    executor = EffectExecutor(reads, poll_interval=0.01)  # type: ignore[arg-type]

    @effect(operation_id="invoice:{invoice_id}:capture", executor=executor)
    def capture(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> dict[str, Any]:
        assert reads.seen.wait(WAIT), "the second caller never found this one's lease"
        return provider.handler(
            {"invoice_id": invoice_id, "amount_cents": amount_cents},
            idempotency_key=idempotency_key,
        )

    outputs: list[Any] = []

    def call() -> None:
        try:
            outputs.append(capture("INV-1", 500))
        except Exception as exc:
            outputs.append(exc)

    threads = [threading.Thread(target=call) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT * 2)

    assert len(outputs) == 2
    assert outputs[0] == outputs[1]
    assert isinstance(outputs[0], dict)
    assert provider.requests == 1
    assert provider.committed() == 1


def test_two_asyncio_tasks_with_the_same_call_share_one_dispatch(reads):
    """Two concurrent tasks of one async tool: one dispatch, the same output for both."""
    provider = FakePaymentProvider()
    executor = EffectExecutor(reads, poll_interval=0.01)  # type: ignore[arg-type]

    @effect(operation_id="invoice:{invoice_id}:capture", executor=executor)
    async def capture(
        invoice_id: str, amount_cents: int, *, idempotency_key: str
    ) -> dict[str, Any]:
        assert await asyncio.to_thread(reads.seen.wait, WAIT), "no second caller arrived"
        return provider.handler(
            {"invoice_id": invoice_id, "amount_cents": amount_cents},
            idempotency_key=idempotency_key,
        )

    async def both() -> list[Any]:
        return await asyncio.gather(
            capture("INV-2", 700), capture("INV-2", 700), return_exceptions=True
        )

    first, second = asyncio.run(both())

    assert first == second
    assert isinstance(first, dict)
    assert provider.requests == 1
    assert provider.committed() == 1


def test_a_peer_slower_than_wait_for_peer_gives_effect_in_progress(reads):
    """A peer outlasting wait_for_peer (on the executor's clock): EffectInProgress, one commit."""
    provider = FakePaymentProvider()
    clock = ManualClock()
    executor = EffectExecutor(reads, clock=clock, poll_interval=0.01)  # type: ignore[arg-type]
    started, release = threading.Event(), threading.Event()

    @effect(operation_id="invoice:{invoice_id}:capture", executor=executor, wait_for_peer=5)
    def capture(invoice_id: str, *, idempotency_key: str) -> dict[str, Any]:
        started.set()
        release.wait(WAIT)
        return provider.handler(
            {"invoice_id": invoice_id, "amount_cents": 1}, idempotency_key=idempotency_key
        )

    first: list[Any] = []
    worker = threading.Thread(target=lambda: first.append(capture("INV-3")))
    worker.start()
    try:
        assert started.wait(WAIT)
        errors: list[EffectInProgress] = []

        def second() -> None:
            try:
                capture("INV-3")
            except EffectInProgress as exc:
                errors.append(exc)

        waiter = threading.Thread(target=second)
        reads.seen.clear()
        waiter.start()
        assert reads.seen.wait(WAIT)
        clock.advance(6)  # past wait_for_peer, well within the peer's 30 s lease
        waiter.join(WAIT)
        assert not waiter.is_alive()
    finally:
        release.set()
        worker.join(WAIT)

    assert len(errors) == 1
    assert errors[0].result.status is EffectStatus.DISPATCHED
    assert "waited 5s" in str(errors[0])
    assert first == [capture("INV-3")]
    assert provider.committed() == 1


def test_executor_execute_keeps_answering_dispatched_without_a_wait(reads):
    """EffectExecutor.execute without wait_for_peer returns DISPATCHED at once, as before."""
    provider = FakePaymentProvider()
    executor = EffectExecutor(reads)  # type: ignore[arg-type]
    started, release = threading.Event(), threading.Event()

    def slow(arguments: Any, *, idempotency_key: str) -> Any:
        started.set()
        release.wait(WAIT)
        return provider.handler(arguments, idempotency_key=idempotency_key)

    contract = EffectContract(
        name="payments.capture",
        operation_id=lambda a: f"invoice:{a['invoice_id']}",
        provider_idempotency_key=lambda a: f"capture:{a['invoice_id']}",
    )
    arguments = {"invoice_id": "INV-4", "amount_cents": 9}
    worker = threading.Thread(target=lambda: executor.execute(contract, arguments, slow))
    worker.start()
    try:
        assert started.wait(WAIT)
        assert executor.execute(contract, arguments, slow).status is EffectStatus.DISPATCHED
    finally:
        release.set()
        worker.join(WAIT)
    waited = executor.execute(contract, arguments, slow, wait_for_peer=1)
    assert waited.status is EffectStatus.CONFIRMED
    assert provider.committed() == 1


def test_wait_for_peer_is_checked_and_reaches_the_contract(tmp_path):
    """@effect takes seconds or a timedelta into the contract; configure() checks its own value."""
    from datetime import timedelta  # noqa: PLC0415 - only this test needs it

    @effect(operation_id="x:{n}", wait_for_peer=timedelta(seconds=2))
    def tool(n: int) -> int:
        return n

    assert tool.contract.wait_for_peer == 2.0
    with pytest.raises(ValueError, match="wait_for_peer"):
        effect(operation_id="x:{n}", wait_for_peer=-1)(lambda n: n)
    with pytest.raises(ValueError, match="wait_for_peer"):
        configure(ledger=tmp_path / "l.db", wait_for_peer=-1)
    with configure(ledger=tmp_path / "l.db", wait_for_peer=0) as configured:
        assert configured.executor.wait_for_peer == 0
