"""Fault injection for effectguard: fake providers that count what they commit, and fault plans.

Scenarios (:mod:`effectguard.testkit.scenarios`), the fault matrix
(:mod:`proofs.matrix`), the strategy study
(:mod:`proofs.study`) and the pytest plugin
(:mod:`effectguard.testkit.pytest_plugin`) are built on these. The SMTP test
server needs ``aiosmtpd``, so it is imported from its own module,
:mod:`effectguard.testkit.servers.smtp`.

Every name is loaded from its module on first use, so the pytest plugin (a
submodule of this package, loaded into every pytest run) costs nothing until
a test asks for a fixture.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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

#: The module that owns each name of ``__all__``.
_OWNERS: dict[str, str] = {
    "FakeEmailProvider": "effectguard.testkit.fakes",
    "FakePaymentProvider": "effectguard.testkit.fakes",
    "FakePaymentServer": "effectguard.testkit.servers.http_payments",
    "FakeProvider": "effectguard.testkit.fakes",
    "Fault": "effectguard.testkit.faults",
    "FaultPlan": "effectguard.testkit.faults",
    "Lookup": "effectguard.testkit.fakes",
    "ManualClock": "effectguard.testkit.clock",
    "ProviderConflict": "effectguard.testkit.fakes",
    "ProviderError": "effectguard.testkit.fakes",
    "ProviderKeyMismatch": "effectguard.testkit.fakes",
    "ProviderTimeout": "effectguard.testkit.fakes",
    "ProviderUnavailable": "effectguard.testkit.fakes",
    "ReceivedRequest": "effectguard.testkit.servers.http_payments",
    "ServerFault": "effectguard.testkit.servers.http_payments",
    "seeded_jitter": "effectguard._executor._machine",
}

if TYPE_CHECKING:
    from effectguard._executor._machine import seeded_jitter as seeded_jitter
    from effectguard.testkit.clock import ManualClock as ManualClock
    from effectguard.testkit.fakes import FakeEmailProvider as FakeEmailProvider
    from effectguard.testkit.fakes import FakePaymentProvider as FakePaymentProvider
    from effectguard.testkit.fakes import FakeProvider as FakeProvider
    from effectguard.testkit.fakes import Lookup as Lookup
    from effectguard.testkit.fakes import ProviderConflict as ProviderConflict
    from effectguard.testkit.fakes import ProviderError as ProviderError
    from effectguard.testkit.fakes import ProviderKeyMismatch as ProviderKeyMismatch
    from effectguard.testkit.fakes import ProviderTimeout as ProviderTimeout
    from effectguard.testkit.fakes import ProviderUnavailable as ProviderUnavailable
    from effectguard.testkit.faults import Fault as Fault
    from effectguard.testkit.faults import FaultPlan as FaultPlan
    from effectguard.testkit.servers.http_payments import FakePaymentServer as FakePaymentServer
    from effectguard.testkit.servers.http_payments import ReceivedRequest as ReceivedRequest
    from effectguard.testkit.servers.http_payments import ServerFault as ServerFault


def _load(name: str) -> Any:
    owner = _OWNERS.get(name)
    if owner is None:
        msg = f"module 'effectguard.testkit' has no attribute {name!r}"
        raise AttributeError(msg, name=name)
    value = getattr(importlib.import_module(owner), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if not TYPE_CHECKING:
    __getattr__ = _load
