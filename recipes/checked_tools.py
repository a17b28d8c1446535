# The recipes' own tools, ready for `agent-effect check` (CI checks each one):
#
#   agent-effect check recipes.checked_tools:PAYMENTS.capture \
#       --counter recipes.checked_tools:count_captures \
#       --same-request amount_cents --same-request currency \
#       --sandbox-url-env EFFECTGUARD_CHECKED_PAYMENTS_URL
#   agent-effect check recipes.checked_tools:MAILER.send_receipt \
#       --counter recipes.checked_tools:count_messages --same-request to --same-request text
#   agent-effect check recipes.checked_tools:send_receipt_lying_probe \
#       --counter recipes.checked_tools:count_messages --same-request to --same-request text
#
# The payment recipe's operation id is one capture per invoice, the email recipe's one receipt
# per order: --same-request says so, or the checker reports the other arguments missing from
# the id. The last tool is broken on purpose (its probe answers NOT_COMMITTED for a message
# that was sent): the check must exit 1 on it.
"""Start the testkit's payment and SMTP servers, and expose the recipes' tools bound to them.

The first process that imports this module starts both servers and passes
their addresses on in its environment; the checker's child processes, which
import this module afresh, reach the same servers instead of starting their
own. The counters read the servers' own records, so they count only in the
process that started them (the checker calls them there).
"""

from __future__ import annotations

import atexit
import inspect
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, urlsplit

from effectguard import INJECTED, OutcomeProbeResult, effect
from effectguard.testkit import FakePaymentServer
from effectguard.testkit.servers.smtp import FakeSMTPServer

# The recipes are scripts, not a package: import the two beside this file by their own names.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from email_smtp import Mailer
from payments import PaymentsClient

_PAYMENTS_URL = "EFFECTGUARD_CHECKED_PAYMENTS_URL"
_SMTP_PORT = "EFFECTGUARD_CHECKED_SMTP_PORT"

PAYMENT_SERVER: FakePaymentServer | None = None
SMTP_SERVER: FakeSMTPServer | None = None

if _PAYMENTS_URL not in os.environ:
    PAYMENT_SERVER = FakePaymentServer().start()
    atexit.register(PAYMENT_SERVER.stop)
    os.environ[_PAYMENTS_URL] = PAYMENT_SERVER.url
if _SMTP_PORT not in os.environ:
    SMTP_SERVER = FakeSMTPServer().start()
    atexit.register(SMTP_SERVER.stop)
    os.environ[_SMTP_PORT] = str(SMTP_SERVER.port)


class _SandboxClient(PaymentsClient):
    """The recipe's client, reading its base URL from the environment at every request.

    So the proxy that ``agent-effect check --sandbox-url-env`` puts in front of
    the server after this module was imported is the one the captures go through.
    """

    @property
    def _url(self) -> SplitResult:
        return urlsplit(os.environ[_PAYMENTS_URL])

    @_url.setter
    def _url(self, value: SplitResult) -> None:
        """Ignored: the environment names the server."""


#: The payment recipe's client, bound to the testkit's payment server.
PAYMENTS = _SandboxClient(os.environ[_PAYMENTS_URL], api_key="sk_test_check", timeout=5.0)
#: The email recipe's mailer; its probe searches the SMTP server's sent log (in its own process).
MAILER = Mailer(
    "127.0.0.1",
    int(os.environ[_SMTP_PORT]),
    sender="shop@example.com",
    starttls=False,
    timeout=5.0,
    find_sent=None if SMTP_SERVER is None else SMTP_SERVER.sent_to,
)


def count_captures(operation_id: str, idempotency_key: str | None) -> int:
    """Captures the payment server committed under ``idempotency_key``."""
    if PAYMENT_SERVER is None:
        msg = f"count_captures for {operation_id!r}: the payment server runs in another process"
        raise RuntimeError(msg)
    return PAYMENT_SERVER.committed(idempotency_key)


def count_messages(operation_id: str, idempotency_key: str | None) -> int:
    """Messages the SMTP server accepted with the operation's Message-ID."""
    if SMTP_SERVER is None:
        msg = f"count_messages for {operation_id!r}: the SMTP server runs in another process"
        raise RuntimeError(msg)
    message_id = MAILER.message_id(idempotency_key or operation_id)
    return sum(message.message_id == message_id for message in SMTP_SERVER.messages())


def _never_found(**_: object) -> OutcomeProbeResult:
    return OutcomeProbeResult.not_committed({"sent_log": "searched the wrong mailbox"})


@effect(
    name="mail.receipt-lying-probe",
    operation_id="order:{order_id}:receipt",
    probe=_never_found,
)
def send_receipt_lying_probe(
    order_id: str, to: str, text: str, *, idempotency_key: str = INJECTED
) -> dict[str, str]:
    """The email recipe's send behind a broken contract: its probe never finds a message."""
    raw: Any = inspect.unwrap(Mailer.send_receipt)  # the recipe's undecorated send
    sent: dict[str, str] = raw(MAILER, order_id, to, text, idempotency_key=idempotency_key)
    return sent
