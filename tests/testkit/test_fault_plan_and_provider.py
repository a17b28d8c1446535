"""Fault plans a test can change as it goes, and the fakes' durable counts and held requests."""

from __future__ import annotations

import threading

import pytest

from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, ProviderTimeout


def test_set_update_and_clear_change_what_later_attempts_meet():
    """set/update/clear replace planned faults; unplanned attempts meet NONE."""
    plan = FaultPlan([Fault.LOSE_ACK])
    assert plan.set(3, Fault.PENDING) is plan
    assert plan.faults == {1: Fault.LOSE_ACK, 3: Fault.PENDING}
    plan.update([Fault.FAIL_BEFORE_COMMIT, Fault.NONE])
    assert plan.fault_for(1) is Fault.FAIL_BEFORE_COMMIT
    assert plan.fault_for(3) is Fault.PENDING
    plan.clear()
    assert plan.faults == {}
    assert plan.fault_for(1) is Fault.NONE


@pytest.mark.parametrize("attempt", [0, -1, True, 1.5])
def test_set_refuses_attempts_that_are_not_positive_integers(attempt):
    """Attempts are numbered from 1; anything else is a ValueError and changes nothing."""
    plan = FaultPlan()
    with pytest.raises(ValueError, match="numbered from 1"):
        plan.set(attempt, Fault.LOSE_ACK)
    assert plan.faults == {}


def test_a_plan_changed_mid_test_applies_to_the_next_request():
    """A provider reads its plan at each request, so a test may re-plan between calls."""
    plan = FaultPlan()
    provider = FakePaymentProvider(faults=plan)
    provider.capture("INV-1", 100, idempotency_key="k1")
    plan.set(1, Fault.LOSE_ACK)
    with pytest.raises(ProviderTimeout):
        provider.capture("INV-2", 100, idempotency_key="k2")
    assert provider.committed() == 2


def test_attempts_and_accepted_are_durable_across_provider_objects(tmp_path):
    """A second provider object on the same file sees the first one's requests and effects."""
    path = tmp_path / "provider.db"
    first = FakePaymentProvider(
        idempotency_guaranteed=False, faults=FaultPlan({2: Fault.PENDING}), path=path
    )
    first.capture("INV-1", 100, idempotency_key="k")
    with pytest.raises(ProviderTimeout):
        first.capture("INV-1", 100, idempotency_key="k")
    second = FakePaymentProvider(path=path)
    assert second.attempts() == 2
    assert second.attempts("k") == 2
    assert second.attempts("other") == 0
    assert second.committed("k") == 1
    assert second.accepted("k") == 2  # the pending one will commit too
    assert second.requests == 0  # the in-memory counter is per object


def test_wait_until_held_sees_a_late_commit_parked_and_rearm_holds_again():
    """A LATE_COMMIT request is observable while held; after rearm_late the next one is held too."""
    provider = FakePaymentProvider(faults=FaultPlan({1: Fault.LATE_COMMIT}), late_commit_after=30)
    worker = threading.Thread(
        target=provider.capture, args=("INV-1", 100), kwargs={"idempotency_key": "a"}
    )
    worker.start()
    assert provider.wait_until_held(1, timeout=30)
    assert provider.held == 1
    assert provider.committed() == 0
    provider.release_late()
    worker.join(30)
    assert provider.held == 0
    assert provider.committed() == 1
    provider.rearm_late()
    second = threading.Thread(
        target=provider.capture, args=("INV-2", 100), kwargs={"idempotency_key": "b"}
    )
    second.start()
    assert provider.wait_until_held(1, timeout=30)
    provider.release_late()
    second.join(30)
    assert provider.committed() == 2


def test_wait_until_held_times_out_when_nothing_is_held():
    """Without a held request the wait returns False after its timeout."""
    assert not FakePaymentProvider().wait_until_held(1, timeout=0.01)


def test_close_keeps_a_file_backed_providers_state(tmp_path):
    """Closing a file-backed provider releases it; a new object on the file still counts."""
    path = tmp_path / "provider.db"
    provider = FakePaymentProvider(path=path)
    provider.capture("INV-1", 100, idempotency_key="k")
    provider.close()
    assert FakePaymentProvider(path=path).committed("k") == 1
