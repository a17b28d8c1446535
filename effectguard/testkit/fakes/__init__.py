"""Fake providers that count what they really committed.

They are the ground truth of every fault test: the library's own report is
never trusted, the provider's committed-effect count is. State lives in a
SQLite file when ``path`` is given, so a provider can be shared by processes
(one of which may be killed with SIGKILL) and inspected afterwards.
"""

from effectguard.testkit.fakes.base import (
    FakeProvider,
    Lookup,
    ProviderConflict,
    ProviderError,
    ProviderKeyMismatch,
    ProviderTimeout,
    ProviderUnavailable,
)
from effectguard.testkit.fakes.mail import FakeEmailProvider
from effectguard.testkit.fakes.payments import FakePaymentProvider

__all__ = [
    "FakeEmailProvider",
    "FakePaymentProvider",
    "FakeProvider",
    "Lookup",
    "ProviderConflict",
    "ProviderError",
    "ProviderKeyMismatch",
    "ProviderTimeout",
    "ProviderUnavailable",
]
