"""FakeSMTPServer over real SMTP: its sent log, its faults, and AUTH."""

from __future__ import annotations

import smtplib
import subprocess
import sys
from email.message import EmailMessage

import pytest

from effectguard.testkit.servers.smtp import FakeSMTPServer, SMTPFault

MESSAGE_ID = "<order-1@example.com>"


@pytest.fixture
def server():
    """An SMTP server on 127.0.0.1 for this test."""
    with FakeSMTPServer() as server:
        yield server


def send(server, message_id=MESSAGE_ID, to="ada@example.com"):
    """Send one message with ``smtplib``; return what ``send_message`` returns."""
    message = EmailMessage()
    message["From"] = "shop@example.com"
    message["To"] = to
    message["Subject"] = "Receipt"
    message["Message-ID"] = message_id
    message.set_content("Thank you.")
    with smtplib.SMTP(server.host, server.port, timeout=5) as smtp:
        return smtp.send_message(message)


def test_an_accepted_message_is_in_the_sent_log(server, clock):
    """A message acknowledged with 250 is in the log, found by its Message-ID."""
    server.clock = clock

    assert send(server) == {}

    [message] = server.messages()
    assert message.message_id == MESSAGE_ID
    assert message.sender == "shop@example.com"
    assert message.recipients == ("ada@example.com",)
    assert b"Thank you." in message.content
    assert message.accepted_at == clock.now
    assert server.find(MESSAGE_ID) == message
    assert server.sent_to(MESSAGE_ID) == ("ada@example.com",)
    assert server.sent_to("<other@example.com>") is None


def test_drop_after_accept_logs_the_message_and_loses_the_reply(server):
    """DROP_AFTER_ACCEPT: the client sees the connection end, yet the message was accepted."""
    server.schedule(SMTPFault.DROP_AFTER_ACCEPT)

    with pytest.raises(smtplib.SMTPServerDisconnected):
        send(server)

    assert server.received() == 1
    assert server.sent_to(MESSAGE_ID) == ("ada@example.com",)


def test_drop_before_accept_logs_nothing(server):
    """DROP_BEFORE_ACCEPT: the client sees the connection end, and nothing was accepted."""
    server.schedule(SMTPFault.DROP_BEFORE_ACCEPT)

    with pytest.raises(smtplib.SMTPServerDisconnected):
        send(server)

    assert server.received() == 0


def test_reject_is_a_permanent_refusal(server):
    """REJECT answers 554 at the end of data and logs nothing."""
    server.schedule(SMTPFault.REJECT)

    with pytest.raises(smtplib.SMTPDataError) as refused:
        send(server)

    assert refused.value.smtp_code == 554
    assert server.received() == 0


def test_faults_meet_messages_in_order(server):
    """Each scheduled fault meets the next message; later messages meet none."""
    server.schedule(SMTPFault.REJECT, SMTPFault.NONE, SMTPFault.REJECT)

    outcomes = []
    for number in range(4):
        try:
            send(server, message_id=f"<m{number}@example.com>")
            outcomes.append("sent")
        except smtplib.SMTPDataError:
            outcomes.append("refused")

    assert outcomes == ["refused", "sent", "refused", "sent"]
    assert [m.message_id for m in server.messages()] == ["<m1@example.com>", "<m3@example.com>"]


@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
def test_credentials_require_auth():
    """With credentials, a wrong password is refused and the right one sends."""
    with FakeSMTPServer(credentials={"shop": "right"}) as server:
        with smtplib.SMTP(server.host, server.port, timeout=5) as smtp:
            with pytest.raises(smtplib.SMTPAuthenticationError):
                smtp.login("shop", "wrong")
            with pytest.raises(smtplib.SMTPSenderRefused):
                smtp.sendmail("shop@example.com", ["ada@example.com"], b"Subject: x\r\n\r\nx")
        with smtplib.SMTP(server.host, server.port, timeout=5) as smtp:
            smtp.login("shop", "right")
            smtp.sendmail("shop@example.com", ["ada@example.com"], b"Subject: x\r\n\r\nx")

        assert server.received() == 1


def test_a_server_can_be_started_only_once(server):
    """Starting a running server again is a clear error."""
    with pytest.raises(RuntimeError, match="already started"):
        server.start()


def test_effectguard_never_imports_aiosmtpd():
    """Importing effectguard and its testkit loads no aiosmtpd: it is a test-only dependency."""
    code = (
        "import sys, effectguard, effectguard.testkit; "
        "print('aiosmtpd' in sys.modules or 'effectguard.testkit.servers.smtp' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
