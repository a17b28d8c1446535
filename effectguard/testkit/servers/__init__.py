"""Real local servers for recipe and integration tests: an HTTP payments API and SMTP.

:mod:`~effectguard.testkit.servers.http_payments` needs nothing beyond the
standard library; :mod:`~effectguard.testkit.servers.smtp` needs ``aiosmtpd``
(in the ``dev`` extra), so import it from its module.
"""

from effectguard.testkit.servers.http_payments import (
    FakePaymentServer,
    ReceivedRequest,
    ServerFault,
)

__all__ = ["FakePaymentServer", "ReceivedRequest", "ServerFault"]
