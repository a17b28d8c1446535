"""Deterministic failure scenarios, each checking its own invariant against a fake provider.

``run_scenario(name, seed=, db=)`` returns a :class:`ScenarioReport`;
``SCENARIOS`` lists them by name with their summary and invariant.
"""

from effectguard.testkit.scenarios import crash, identity, outcomes, timing
from effectguard.testkit.scenarios._base import (
    SCENARIOS,
    Scenario,
    ScenarioEnv,
    ScenarioError,
    run_scenario,
)
from effectguard.testkit.scenarios._report import Check, ScenarioReport

# Registration happens on import; this fixes the order they are listed in.
_ORDER = (
    "after-commit-before-ack",
    "before-commit",
    "timeout-no-probe",
    "conflict",
    "replay-after-reopen",
    "pending",
    "late-commit-after-timeout",
    "eventual-read",
    "crash-after-dispatch",
    "concurrent-duplicate",
    "lease-expiry",
)
_registered = dict(SCENARIOS)
SCENARIOS.clear()
SCENARIOS.update({name: _registered.pop(name) for name in _ORDER})
SCENARIOS.update(_registered)
del _registered, crash, identity, outcomes, timing

__all__ = [
    "SCENARIOS",
    "Check",
    "Scenario",
    "ScenarioEnv",
    "ScenarioError",
    "ScenarioReport",
    "run_scenario",
]
