# Recipe: send an email over SMTP so that a lost acknowledgement never sends it twice.
#
# SMTP has no idempotency key: a message sent again is a second message. So this recipe never
# declares idempotency_guaranteed. It gives each message a Message-ID derived from the
# operation id and, when the outcome is uncertain, looks that Message-ID up in the provider's
# sent log: found -> CONFIRMED; not found, or no sent log -> QUARANTINED for an operator
# (agent-effect-ops), and nothing is sent again. A server that refuses the connection (it is
# down) provably received nothing: effectguard retries after a backoff and, if it stays down,
# raises EffectNotSent; calling again later sends the message, once.
#
# To use it with your provider, change:
#   - host, port, sender and credentials given to Mailer (keep starttls=True);
#   - find_sent: a search of your provider's sent log (its messages or events API) by
#     Message-ID, returning the recipients it accepted the message for, or None;
#   - the operation id: unique across everything that sends from your domain, since the
#     Message-ID is derived from it (prefix it with your application's name if need be);
#   - effectguard.configure(ledger=...) once at start-up (a SQLite path, or a postgresql:// URL);
#   - if your sent log lags, unknown_outcome="KEEP_UNKNOWN": a later call then searches again
#     instead of waiting for an operator (it still never resends).
#
# Verify in your provider's documentation:
#   - that it keeps the Message-ID you set (some replace it with their own: then search by the
#     header they keep, or by their id if the SMTP reply carries it);
#   - how soon an accepted message appears in the sent log: this recipe treats "not found" as
#     UNKNOWN, never as "not sent", because sent logs lag behind;
#   - which replies are permanent refusals (5xx): those become REJECTED, with nothing sent.
"""Send an email with effectguard over real SMTP (run it for a demo against a local server).

``python recipes/email_smtp.py`` sends to a local :class:`FakeSMTPServer` (it
needs ``aiosmtpd``), which accepts the message and then closes the connection
before its ``250`` reply. effectguard finds the message in the sent log by its
Message-ID and confirms it. A second receipt, with no sent log to search, is
quarantined and not resent. The script exits 0 only if the server received
exactly one copy of each.
"""

from __future__ import annotations

import hashlib
import logging
import smtplib
import socket
import ssl
import sys
import tempfile
from collections.abc import Callable, Collection
from email.message import EmailMessage
from email.utils import formatdate, parseaddr
from pathlib import Path

import effectguard
from effectguard import INJECTED, EffectRejected, EffectStatus, OutcomeProbeResult, effect

#: Your provider's sent-log search: the recipients of the message with this Message-ID, or
#: None when the log does not show it. Raise when the search itself fails.
FindSent = Callable[[str], Collection[str] | None]

#: SMTP replies from 500 up are permanent: the server will not take the message.
_PERMANENT = 500


class Mailer:
    """Sends mail whose uncertain outcomes are confirmed by Message-ID, never resent blindly.

    ``starttls`` upgrades the connection with a verified certificate before
    ``username``/``password`` are sent. ``timeout`` bounds the connect and each reply.
    """

    def __init__(
        self,
        host: str,
        port: int = 587,
        *,
        sender: str,
        username: str | None = None,
        password: str | None = None,
        starttls: bool = True,
        timeout: float = 30.0,
        find_sent: FindSent | None = None,
    ) -> None:
        _, at, self.domain = parseaddr(sender)[1].rpartition("@")
        if not at or not self.domain:
            msg = f"sender must be an email address, not {sender!r}"
            raise ValueError(msg)
        self.host, self.port, self.sender = host, port, sender
        self._login = None if username is None else (username, password or "")
        self.starttls = starttls
        self.timeout = timeout
        self.find_sent = find_sent

    def message_id(self, operation_id: str) -> str:
        """The Message-ID of the operation's message: the same on every attempt."""
        return f"<{hashlib.sha256(operation_id.encode()).hexdigest()}@{self.domain}>"

    def find_receipt(self, to: str, *, idempotency_key: str, **_: object) -> OutcomeProbeResult:
        """The outcome probe: is the message with this operation's Message-ID in the sent log?"""
        message_id = self.message_id(idempotency_key)
        evidence = {"message_id": message_id}
        if self.find_sent is None:
            return OutcomeProbeResult.unknown({**evidence, "sent_log": "none to search"})
        recipients = self.find_sent(message_id)
        if recipients is None:
            # Not "not sent": the message may be accepted and not yet in the log.
            return OutcomeProbeResult.unknown({**evidence, "sent_log": "not found"})
        if to not in recipients:
            return OutcomeProbeResult.unknown({**evidence, "sent_log": "other recipients"})
        return OutcomeProbeResult.committed(
            {"message_id": message_id, "to": to},
            provider_operation_id=message_id,
            evidence={**evidence, "sent_log": "found"},
        )

    # effectguard hands the tool its operation id as idempotency_key (no key template is
    # given); SMTP takes no key, so the tool turns it into the Message-ID instead.
    @effect(
        name="mail.receipt",  # part of every fingerprint: keep it when you rename the code
        operation_id="order:{order_id}:receipt",
        probe=find_receipt,
        provider_operation_id="message_id",
        # Raised by smtplib.SMTP(host, port) while connecting, before any of the message is
        # written: provably not sent. Never SMTPServerDisconnected or a timeout, which can come
        # after the server accepted the message.
        not_sent_on=(ConnectionRefusedError, socket.gaierror),
    )
    def send_receipt(
        self, order_id: str, to: str, text: str, *, idempotency_key: str = INJECTED
    ) -> dict[str, str]:
        """Send the receipt of ``order_id`` to ``to`` once, however often it is called.

        Raises :class:`EffectRejected` when the server refused it for good,
        :class:`effectguard.EffectNotSent` when the server could not be reached (call
        again later), and :class:`effectguard.EffectNotConfirmed` when its outcome is
        not settled.
        """
        message_id = self.message_id(idempotency_key)
        message = EmailMessage()
        message["From"] = self.sender
        message["To"] = to
        message["Subject"] = f"Your receipt for order {order_id}"
        message["Date"] = formatdate()
        message["Message-ID"] = message_id
        message.set_content(text)
        with smtplib.SMTP(self.host, self.port, timeout=self.timeout) as smtp:
            if self.starttls:
                # Without a context, smtplib encrypts but does not verify the server's certificate.
                smtp.starttls(context=ssl.create_default_context())
            if self._login is not None:
                smtp.login(*self._login)
            try:
                smtp.send_message(message)
            except smtplib.SMTPRecipientsRefused as exc:
                codes = [code for code, _ in exc.recipients.values()]
                if min(codes) >= _PERMANENT:
                    reason = "the server refused every recipient"
                    raise EffectRejected(reason, evidence={"smtp_codes": codes}) from exc
                raise
            except (smtplib.SMTPSenderRefused, smtplib.SMTPDataError) as exc:
                if exc.smtp_code >= _PERMANENT:
                    reason = f"the server refused the message: {exc.smtp_code}"
                    raise EffectRejected(reason, evidence={"smtp_code": exc.smtp_code}) from exc
                raise
        # Any other error may or may not have sent it: effectguard asks find_receipt().
        return {"message_id": message_id, "to": to}


def main() -> int:
    """Lose the reply after the server accepts; exit 0 if no message is sent twice."""
    try:
        # The demo's stand-in for a provider; the code above never needs it.
        from effectguard.testkit.servers.smtp import FakeSMTPServer, SMTPFault  # noqa: PLC0415 - demo only; needs aiosmtpd
    except ImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with (
        tempfile.TemporaryDirectory() as workdir,
        FakeSMTPServer() as server,
        effectguard.configure(ledger=Path(workdir) / "effects.db"),
    ):
        mailer = Mailer(
            server.host,
            server.port,
            sender="shop@example.com",
            starttls=False,
            find_sent=server.sent_to,
        )
        server.schedule(SMTPFault.DROP_AFTER_ACCEPT)
        sent = mailer.send_receipt.execute("A-1001", "ada@example.com", "Thank you!")
        print(f"with a sent log:    {sent.status}: {sent.reason}")

        blind = Mailer(server.host, server.port, sender="shop@example.com", starttls=False)
        server.schedule(SMTPFault.DROP_AFTER_ACCEPT)
        held = blind.send_receipt.execute("A-1002", "bob@example.com", "Thank you!")
        again = blind.send_receipt.execute("A-1002", "bob@example.com", "Thank you!")
        print(f"without a sent log: {held.status}, then {again.status}: {held.reason}")
        print(f"messages the server accepted: {server.received()}")

        quarantined = held.status is again.status is EffectStatus.QUARANTINED
        ok = sent.confirmed and quarantined and server.received() == 2  # noqa: PLR2004 - one each
    print("OK: each message sent once" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    # effectguard installs no log handler; this one prints each event it logs as one short line.
    logging.basicConfig(level=logging.WARNING, format="  log: %(levelname)s %(message).100s")
    logging.getLogger("effectguard").setLevel(logging.INFO)
    sys.exit(main())
