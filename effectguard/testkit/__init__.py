"""Fault injection for effectguard: fake providers that count what they commit, and fault plans.

Scenarios (:mod:`effectguard.testkit.scenarios`), the fault matrix
(:mod:`proofs.matrix`), the strategy study
(:mod:`proofs.study`) and the pytest plugin
(:mod:`effectguard.testkit.pytest_plugin`) are built on these. The SMTP test
server needs ``aiosmtpd``, so it is imported from its own module,
:mod:`effectguard.testkit.servers.smtp`.
"""

from effectguard._executor._machine import seeded_jitter
from effectguard.testkit.clock import ManualClock
from effectguard.testkit.fakes import (
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
from effectguard.testkit.faults import Fault, FaultPlan
from effectguard.testkit.servers.http_payments import (
    FakePaymentServer,
    ReceivedRequest,
    ServerFault,
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
    "seeded_jitter",
]
