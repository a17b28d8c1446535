"""Waits between attempts: exponential backoff, full jitter, a per-call deadline.

No test sleeps: the executor advances the injected ManualClock by each wait.
"""

from __future__ import annotations

import asyncio

import pytest
from support import ARGS, capture_contract

from effectguard import (
    ConfigurationError,
    EffectExecutor,
    EffectStatus,
    EventType,
    configure,
)
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, ManualClock


@pytest.fixture
def manual() -> ManualClock:
    """A clock that only the executor's waits move."""
    return ManualClock(1_800_000_000.0)


class Ceilings:
    """A jitter that records each ceiling and waits exactly that long."""

    def __init__(self) -> None:
        self.seen: list[float] = []

    def __call__(self, ceiling: float) -> float:
        """Wait the whole ceiling, and remember it."""
        self.seen.append(ceiling)
        return ceiling


def test_retries_wait_with_exponential_backoff(ledger, manual):
    """Two failures before commit: waits of up to 0.1 s, then 0.2 s, before each retry."""
    provider = FakePaymentProvider(
        idempotency_guaranteed=False,
        faults=FaultPlan([Fault.FAIL_BEFORE_COMMIT, Fault.FAIL_BEFORE_COMMIT]),
    )
    jitter = Ceilings()
    executor = EffectExecutor(ledger, clock=manual, jitter=jitter)
    started = manual()

    result = executor.execute(capture_contract(provider), ARGS, provider.handler)

    assert result.status is EffectStatus.CONFIRMED
    assert jitter.seen == [0.1, 0.2]
    assert manual() - started == pytest.approx(0.3)
    assert provider.committed() == 1


def test_full_jitter_waits_anywhere_below_the_ceiling(ledger, manual):
    """The wait is what the jitter draws in [0, ceiling]; the ceiling is capped by the max."""
    provider = FakePaymentProvider(
        idempotency_guaranteed=False, faults=FaultPlan([Fault.FAIL_BEFORE_COMMIT] * 2)
    )
    executor = EffectExecutor(ledger, clock=manual, jitter=lambda ceiling: ceiling / 4)
    contract = capture_contract(provider, retry_wait_initial=2.0, retry_wait_max=3.0)
    started = manual()

    assert executor.execute(contract, ARGS, provider.handler).confirmed
    assert manual() - started == pytest.approx(2.0 / 4 + 3.0 / 4)
    assert provider.committed() == 1


def test_pending_probe_is_probed_again_without_an_attempt(ledger, manual):
    """A provider still processing is re-probed after a backoff, never resent: one call confirms."""
    provider = FakePaymentProvider(
        idempotency_guaranteed=False, faults=FaultPlan([Fault.PENDING], pending_probes=3)
    )
    executor = EffectExecutor(ledger, clock=manual, jitter=Ceilings())

    result = executor.execute(capture_contract(provider), ARGS, provider.handler)

    assert result.status is EffectStatus.CONFIRMED
    assert result.attempts == 1
    assert provider.requests == 1
    assert provider.lookups == 4
    assert provider.committed() == 1


def test_async_pending_probe_is_probed_again_without_an_attempt(ledger, manual):
    """The async driver re-probes a PENDING outcome the same way."""
    provider = FakePaymentProvider(
        idempotency_guaranteed=False, faults=FaultPlan([Fault.PENDING], pending_probes=2)
    )
    executor = EffectExecutor(ledger, clock=manual)

    result = asyncio.run(executor.execute_async(capture_contract(provider), ARGS, provider.handler))

    assert result.status is EffectStatus.CONFIRMED
    assert provider.requests == 1
    assert provider.committed() == 1


def test_pending_forever_returns_unknown_within_the_default_deadline(ledger, manual):
    """A probe that keeps answering PENDING: OUTCOME_UNKNOWN after at most 10 s, nothing resent."""
    provider = FakePaymentProvider(
        idempotency_guaranteed=False, faults=FaultPlan([Fault.PENDING], pending_probes=10_000)
    )
    executor = EffectExecutor(ledger, clock=manual)
    started = manual()

    result = executor.execute(capture_contract(provider), ARGS, provider.handler)

    assert result.status is EffectStatus.OUTCOME_UNKNOWN
    assert 0 < manual() - started <= 10.0
    assert provider.lookups > 1
    assert provider.requests == 1


def test_a_retry_past_the_deadline_is_left_prepared_for_the_next_call(ledger, manual):
    """The probe proves nothing was captured, but the wait would pass the deadline: PREPARED."""
    provider = FakePaymentProvider(
        idempotency_guaranteed=False, faults=FaultPlan([Fault.FAIL_BEFORE_COMMIT])
    )
    executor = EffectExecutor(ledger, clock=manual, jitter=Ceilings())
    contract = capture_contract(provider, deadline=0.05)

    first = executor.execute(contract, ARGS, provider.handler)
    assert first.status is EffectStatus.PREPARED
    assert "deadline" in (first.reason or "")
    assert provider.committed() == 0

    second = executor.execute(contract, ARGS, provider.handler)
    assert second.status is EffectStatus.CONFIRMED
    assert provider.committed() == 1
    events = [event.type for event in ledger.events(first.operation_id)]
    assert EventType.QUARANTINED not in events


def test_contract_values_override_the_executor_defaults(ledger, manual):
    """retry_wait_initial on the contract wins over the executor's default."""
    provider = FakePaymentProvider(
        idempotency_guaranteed=False, faults=FaultPlan([Fault.FAIL_BEFORE_COMMIT])
    )
    jitter = Ceilings()
    executor = EffectExecutor(ledger, clock=manual, jitter=jitter, retry_wait_initial=1.0)

    executor.execute(capture_contract(provider, retry_wait_initial=0.5), ARGS, provider.handler)

    assert jitter.seen == [0.5]
    assert provider.committed() == 1


def test_configure_sets_defaults_only_for_the_executor_it_makes(tmp_path, ledger):
    """configure(deadline=...) reaches the executor it builds; with executor= it is refused."""
    with configure(ledger=tmp_path / "effects.db", deadline=1.5, retry_wait_max=2.0) as made:
        assert made.executor.pacing.deadline == 1.5
        assert made.executor.pacing.retry_wait_max == 2.0
    with pytest.raises(ConfigurationError, match="deadline"):
        configure(executor=EffectExecutor(ledger), deadline=1.0)
    with pytest.raises(ConfigurationError, match="retry_wait_initial"):
        configure(ledger=tmp_path / "other.db", retry_wait_initial=3.0, retry_wait_max=1.0)
