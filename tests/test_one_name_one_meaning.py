"""One name, one meaning: no two concepts of the package share a name."""

from __future__ import annotations

from effectguard import _decorator as tool
from effectguard._executor import _leases as lease
from effectguard._executor import _machine as reconcile
from effectguard._executor._machine import StateMachine
from effectguard.runtime import Decision


def test_decision_is_only_the_permission_policys_answer():
    """The reconcile table answers with a Ruling; runtime.Decision stays the policy's answer."""
    assert not hasattr(reconcile, "Decision")
    assert "Ruling" in reconcile.__all__
    assert {d.name for d in Decision} == {"ALLOW", "DENY", "REQUIRE_APPROVAL"}


def test_settle_is_only_the_state_machines_recording_of_an_outcome():
    """The decorator turns a result into a return or a raise with outcome_of, not settle."""
    assert hasattr(StateMachine, "settle")
    assert "outcome_of" in tool.__all__
    assert "settle" not in tool.__all__
    assert not hasattr(tool, "settle")


def test_hold_is_only_a_lease_token_being_held():
    """The state machine works an operation under its lease; TOKENS.hold holds a token."""
    assert not hasattr(StateMachine, "hold")
    assert hasattr(StateMachine, "work")
    assert hasattr(lease.TOKENS, "hold")
