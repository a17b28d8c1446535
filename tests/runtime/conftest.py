"""Fixtures for the agent runtime tests."""

from __future__ import annotations

import pytest

from effectguard import EffectExecutor, EffectLedger
from effectguard.runtime import InMemoryAuditSink, InMemoryCheckpointStore, InMemoryTraceSink
from effectguard.testkit import FakePaymentProvider


@pytest.fixture
def executor(ledger: EffectLedger, clock) -> EffectExecutor:
    """An executor over this test's ledger, on the hand-moved clock.

    With ``deadline=0`` a call never waits to re-probe or retry, so an effect the
    provider still reports pending leaves the run WAITING, as these tests need.
    """
    return EffectExecutor(ledger, clock=clock, deadline=0)


@pytest.fixture
def provider() -> FakePaymentProvider:
    """A payment provider with Stripe-like keys, a strong lookup and no faults."""
    return FakePaymentProvider()


@pytest.fixture
def checkpoints() -> InMemoryCheckpointStore:
    """An in-memory checkpoint store the test can look into."""
    return InMemoryCheckpointStore()


@pytest.fixture
def trace() -> InMemoryTraceSink:
    """A trace sink the test can look into."""
    return InMemoryTraceSink()


@pytest.fixture
def audit() -> InMemoryAuditSink:
    """An audit sink the test can look into."""
    return InMemoryAuditSink()
