"""Fault injection for effectguard: fake providers that count what they commit, and fault plans."""

from effectguard.testkit.faults import Fault, FaultPlan
from effectguard.testkit.payment_server import FakePaymentServer, ReceivedRequest, ServerFault
from effectguard.testkit.providers import (
    FakePaymentProvider,
    Lookup,
    ProviderConflict,
    ProviderError,
    ProviderKeyMismatch,
    ProviderTimeout,
    ProviderUnavailable,
)

__all__ = [
    "FakePaymentProvider",
    "FakePaymentServer",
    "Fault",
    "FaultPlan",
    "Lookup",
    "ProviderConflict",
    "ProviderError",
    "ProviderKeyMismatch",
    "ProviderTimeout",
    "ProviderUnavailable",
    "ReceivedRequest",
    "ServerFault",
]
