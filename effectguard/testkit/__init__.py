"""Fault injection for effectguard: fake providers that count what they commit, and fault plans.

Scenarios (:mod:`effectguard.testkit.scenarios`), the fault matrix
(:mod:`effectguard.testkit.matrix`) and the pytest plugin
(:mod:`effectguard.testkit.pytest_plugin`) are built on these.
"""

from effectguard.testkit.clock import ManualClock
from effectguard.testkit.faults import Fault, FaultPlan
from effectguard.testkit.payment_server import FakePaymentServer, ReceivedRequest, ServerFault
from effectguard.testkit.providers import (
    FakeEmailProvider,
    FakePaymentProvider,
    FakeProvider,
    Lookup,
    ProviderConflict,
    ProviderError,
    ProviderKeyMismatch,
    ProviderTimeout,
    ProviderUnavailable,
)

__all__ = [
    "FakeEmailProvider",
    "FakePaymentProvider",
    "FakePaymentServer",
    "FakeProvider",
    "Fault",
    "FaultPlan",
    "Lookup",
    "ManualClock",
    "ProviderConflict",
    "ProviderError",
    "ProviderKeyMismatch",
    "ProviderTimeout",
    "ProviderUnavailable",
    "ReceivedRequest",
    "ServerFault",
]
