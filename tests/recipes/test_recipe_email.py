"""recipes/email_smtp.py over real SMTP against FakeSMTPServer: lost replies, no key, no resend."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from effectguard import (
    EffectExecutor,
    EffectNotSent,
    EffectQuarantined,
    EffectRejected,
    EffectStatus,
    EventType,
    ProbeStatus,
    use_executor,
)
from effectguard.testkit import ManualClock
from effectguard.testkit.servers.smtp import FakeSMTPServer, SMTPFault

SCRIPT = Path(__file__).resolve().parents[2] / "recipes" / "email_smtp.py"
CREDENTIALS = {"shop": "s3cret"}
RECEIPT = ("A-1001", "ada@example.com", "Thank you for your order.")


@pytest.fixture
def server():
    """An SMTP server on 127.0.0.1 for this test."""
    with FakeSMTPServer() as server:
        yield server


def mailer_for(email_recipe, server, **options):
    """The recipe's mailer, pointed at ``server`` without STARTTLS unless told otherwise."""
    settings = {"sender": "Shop <shop@example.com>", "starttls": False, "timeout": 5.0}
    settings.update(options)
    return email_recipe.Mailer(server.host, server.port, **settings)


def test_reply_lost_after_accept_is_confirmed_through_the_sent_log(executor, server, email_recipe):
    """Accepted, then the connection drops: found by Message-ID, CONFIRMED, one message."""
    mailer = mailer_for(email_recipe, server, find_sent=server.sent_to)
    server.schedule(SMTPFault.DROP_AFTER_ACCEPT)

    result = mailer.send_receipt.execute(*RECEIPT)

    assert result.status is EffectStatus.CONFIRMED
    assert result.evidence["probe"] == ProbeStatus.COMMITTED
    [message] = server.messages()
    assert message.message_id == mailer.message_id("order:A-1001:receipt")
    assert result.output == {"message_id": message.message_id, "to": "ada@example.com"}
    assert message.recipients == ("ada@example.com",)
    assert server.received() == 1


def test_without_a_sent_log_it_is_quarantined_and_never_resent(executor, server, email_recipe):
    """No sent log to search: QUARANTINED, later calls send nothing, exactly one message arrived."""
    mailer = mailer_for(email_recipe, server)
    server.schedule(SMTPFault.DROP_AFTER_ACCEPT)

    first = mailer.send_receipt.execute(*RECEIPT)
    with pytest.raises(EffectQuarantined):
        mailer.send_receipt(*RECEIPT)

    assert first.status is EffectStatus.QUARANTINED
    assert first.evidence["probe"] == ProbeStatus.UNKNOWN
    assert server.received() == 1


def test_not_in_the_sent_log_is_not_permission_to_resend(executor, server, email_recipe):
    """Dropped before acceptance and absent from the log: still QUARANTINED, nothing resent."""
    mailer = mailer_for(email_recipe, server, find_sent=server.sent_to)
    server.schedule(SMTPFault.DROP_BEFORE_ACCEPT)

    result = mailer.send_receipt.execute(*RECEIPT)

    assert result.status is EffectStatus.QUARANTINED
    assert result.evidence["probe_evidence"]["sent_log"] == "not found"
    assert server.received() == 0


def test_a_message_to_someone_else_does_not_confirm(executor, server, email_recipe):
    """A logged message with this Message-ID but other recipients leaves the outcome UNKNOWN."""
    mailer = mailer_for(email_recipe, server, find_sent=lambda _: ("eve@example.com",))
    server.schedule(SMTPFault.DROP_BEFORE_ACCEPT)

    result = mailer.send_receipt.execute(*RECEIPT)

    assert result.status is EffectStatus.QUARANTINED
    assert result.evidence["probe_evidence"]["sent_log"] == "other recipients"


def test_a_permanent_refusal_is_rejected(executor, server, email_recipe):
    """A 554 at the end of data is REJECTED: nothing was sent and nothing is retried."""
    mailer = mailer_for(email_recipe, server, find_sent=server.sent_to)
    server.schedule(SMTPFault.REJECT)

    with pytest.raises(EffectRejected, match="554"):
        mailer.send_receipt(*RECEIPT)
    again = mailer.send_receipt.execute(*RECEIPT)

    assert again.status is EffectStatus.REJECTED
    assert again.replayed
    assert server.received() == 0


def test_a_replay_sends_nothing(executor, server, email_recipe):
    """A confirmed message is replayed from the ledger; the server receives it once."""
    mailer = mailer_for(email_recipe, server, find_sent=server.sent_to)
    first = mailer.send_receipt(*RECEIPT)

    again = mailer.send_receipt.execute(*RECEIPT)

    assert again.replayed
    assert again.output == first
    assert server.received() == 1


def test_starttls_verifies_the_certificate_then_logs_in(
    executor, email_recipe, certificates, monkeypatch
):
    """STARTTLS with a certificate the client trusts, then AUTH: the message is sent once."""
    monkeypatch.setenv("SSL_CERT_FILE", str(certificates.ca))
    secure = FakeSMTPServer(tls_context=certificates.server_context(), credentials=CREDENTIALS)
    with secure:
        mailer = mailer_for(
            email_recipe, secure, starttls=True, username="shop", password=CREDENTIALS["shop"]
        )
        result = mailer.send_receipt.execute(*RECEIPT)

        assert result.status is EffectStatus.CONFIRMED
        assert secure.received() == 1


def test_starttls_refuses_a_certificate_it_cannot_verify(
    executor, email_recipe, certificates, monkeypatch, tmp_path
):
    """A server certificate from an untrusted CA stops the send before any credential or data."""
    empty = tmp_path / "no-cas.pem"
    empty.write_text("")
    monkeypatch.setenv("SSL_CERT_FILE", str(empty))
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))
    secure = FakeSMTPServer(tls_context=certificates.server_context(), credentials=CREDENTIALS)
    with secure:
        mailer = mailer_for(
            email_recipe, secure, starttls=True, username="shop", password=CREDENTIALS["shop"]
        )
        result = mailer.send_receipt.execute(*RECEIPT)

        assert result.status is EffectStatus.QUARANTINED
        assert secure.received() == 0
        [unknown] = [
            e
            for e in executor.ledger.events(result.operation_id)
            if e.type is EventType.OUTCOME_UNKNOWN
        ]
        assert "CERTIFICATE_VERIFY_FAILED" in unknown.evidence["handler"]


def test_sender_must_be_an_address(email_recipe):
    """A sender without a domain is refused when the mailer is made."""
    with pytest.raises(ValueError, match="email address"):
        email_recipe.Mailer("127.0.0.1", 25, sender="shop")


def test_the_recipe_runs_as_a_script():
    """``python recipes/email_smtp.py`` exits 0: one message confirmed, one quarantined."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "messages the server accepted: 2" in done.stdout


def test_a_refused_connection_is_not_sent_and_a_later_call_sends_it_once(
    ledger, server, email_recipe
):
    """SMTP server down: EffectNotSent, nothing quarantined; back up: exactly one message."""
    down = socket.socket()
    down.bind(("127.0.0.1", 0))  # bound but not listening: every connect is refused
    mailer = mailer_for(email_recipe, server)
    mailer.port = down.getsockname()[1]
    with use_executor(EffectExecutor(ledger, clock=ManualClock())), down:
        with pytest.raises(EffectNotSent) as info:
            mailer.send_receipt(*RECEIPT)
        assert info.value.result.status is EffectStatus.PREPARED
        assert server.received() == 0

        mailer.port = server.port  # the server is back
        result = mailer.send_receipt.execute(*RECEIPT)

    assert result.status is EffectStatus.CONFIRMED
    assert server.received() == 1
    kinds = [event.type for event in ledger.events(result.operation_id)]
    assert EventType.QUARANTINED not in kinds
