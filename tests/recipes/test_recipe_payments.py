"""recipes/payments.py over real HTTP against FakePaymentServer: lost answers, retries, replays."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from support import wait_until

from effectguard import (
    EffectExecutor,
    EffectNotSent,
    EffectOutcomeUnknown,
    EffectRejected,
    EffectStatus,
    ProbeStatus,
    use_executor,
)
from effectguard.testkit import FakePaymentServer, ManualClock, ServerFault

KEY = "invoice-INV-1042-capture"
SCRIPT = Path(__file__).resolve().parents[2] / "recipes" / "payments.py"


@pytest.fixture
def server():
    """A payment server on 127.0.0.1 for this test."""
    with FakePaymentServer() as server:
        yield server


@pytest.fixture
def payments(payments_recipe, server):
    """The recipe's client, pointed at the test's server."""
    return payments_recipe.PaymentsClient(server.url, "sk_test", timeout=5.0)


def test_connection_dropped_after_commit_is_confirmed_by_the_probe(executor, server, payments):
    """The server commits and drops the connection: the probe confirms it; one capture, one POST."""
    server.schedule(KEY, ServerFault.DROP_AFTER_COMMIT)

    result = payments.capture.execute("INV-1042", 1999)

    assert result.status is EffectStatus.CONFIRMED
    assert result.attempts == 1
    assert result.evidence["probe"] == ProbeStatus.COMMITTED
    [capture] = server.captures()
    assert result.output == capture
    assert result.provider_operation_id == capture["id"]
    assert server.committed() == 1
    assert server.posts() == 1


def test_answer_after_the_client_timeout_is_confirmed_by_the_probe(
    executor, server, payments_recipe
):
    """The answer comes after the client's timeout: the probe confirms; one capture, one POST."""
    payments = payments_recipe.PaymentsClient(server.url, "sk_test", timeout=1.0)
    server.schedule(KEY, ServerFault.ANSWER_LATE)

    result = payments.capture.execute("INV-1042", 1999)

    assert result.status is EffectStatus.CONFIRMED
    assert result.evidence["probe"] == ProbeStatus.COMMITTED
    assert server.committed() == 1
    assert server.posts() == 1


def test_503_before_commit_is_retried_with_the_same_key(executor, server, payments):
    """A 503 before commit: the probe finds nothing, the retry carries the same key; one capture."""
    server.schedule(KEY, ServerFault.FAIL_BEFORE_COMMIT)

    capture = payments.capture("INV-1042", 1999)

    assert server.captures() == [capture]
    posts = [r for r in server.requests if r.method == "POST"]
    assert [r.idempotency_key for r in posts] == [KEY, KEY]
    assert [r.fault for r in posts] == [ServerFault.FAIL_BEFORE_COMMIT, ServerFault.NONE]
    assert payments.capture.execute("INV-1042", 1999).attempts == 2


def test_a_replay_sends_no_request(executor, server, payments):
    """A confirmed capture is replayed from the ledger: no POST and no lookup reach the server."""
    first = payments.capture("INV-1042", 1999)
    seen = len(server.requests)

    again = payments.capture.execute("INV-1042", 1999)

    assert again.replayed
    assert again.output == first
    assert len(server.requests) == seen
    assert server.committed() == 1


def test_lookup_down_the_key_guarantee_makes_the_resend_safe(executor, server, payments):
    """Dropped answer and lookup down: the resend with the same key is replayed, not re-executed."""
    server.schedule(KEY, ServerFault.DROP_AFTER_COMMIT)
    server.fail_lookups = True

    result = payments.capture.execute("INV-1042", 1999)

    assert result.status is EffectStatus.CONFIRMED
    assert result.attempts == 2
    assert server.posts(KEY) == 2
    assert server.committed() == 1
    assert result.output == server.captures()[0]


def test_still_processing_stays_unknown_until_the_probe_sees_the_commit(
    executor, server, payments_recipe
):
    """A capture still processing is PENDING, never resent; a later call confirms it once."""
    payments = payments_recipe.PaymentsClient(server.url, "sk_test", timeout=1.0)
    server.schedule(KEY, ServerFault.HOLD_BEFORE_COMMIT)

    with pytest.raises(EffectOutcomeUnknown) as raised:
        payments.capture("INV-1042", 1999)
    assert raised.value.result.evidence["probe"] == ProbeStatus.PENDING

    server.release()
    wait_until(lambda: server.committed() == 1)
    result = payments.capture.execute("INV-1042", 1999)

    assert result.status is EffectStatus.CONFIRMED
    assert server.posts() == 1
    assert server.committed() == 1


def test_declined_capture_is_rejected_and_never_resent(executor, server, payments):
    """A 402 decline is REJECTED, replayed to later calls, and nothing is captured."""
    server.schedule(KEY, ServerFault.DECLINE)

    with pytest.raises(EffectRejected, match="declined"):
        payments.capture("INV-1042", 1999)
    again = payments.capture.execute("INV-1042", 1999)

    assert again.status is EffectStatus.REJECTED
    assert again.replayed
    assert server.posts() == 1
    assert server.committed() == 0


def test_probe_maps_the_lookup_to_outcomes(server, payments):
    """The probe: none → NOT_COMMITTED, found → COMMITTED, other parameters or 503 → UNKNOWN."""
    call = {"invoice_id": "INV-1042", "currency": "usd", "idempotency_key": KEY}

    assert payments.find_capture(amount_cents=1999, **call).status is ProbeStatus.NOT_COMMITTED
    payments._request("POST", "/v1/captures", _body(1999), idempotency_key=KEY)
    found = payments.find_capture(amount_cents=1999, **call)
    assert found.status is ProbeStatus.COMMITTED
    assert found.output == server.captures()[0]
    assert payments.find_capture(amount_cents=5, **call).status is ProbeStatus.UNKNOWN
    server.fail_lookups = True
    down = payments.find_capture(amount_cents=1999, **call)
    assert down.status is ProbeStatus.UNKNOWN
    assert down.evidence == {"lookup_status": 503}


def test_probe_is_unknown_when_the_provider_cannot_be_reached(payments_recipe):
    """A network error during the lookup is UNKNOWN, with the error as evidence."""
    with FakePaymentServer() as gone:
        url = gone.url
    payments = payments_recipe.PaymentsClient(url, "sk_test", timeout=1.0)

    result = payments.find_capture("INV-1042", 1999, "usd", idempotency_key=KEY)

    assert result.status is ProbeStatus.UNKNOWN
    assert "ConnectionRefusedError" in result.evidence["lookup_error"]


def test_client_refuses_a_base_url_that_is_not_http(payments_recipe):
    """A base URL that is not http(s) is refused when the client is made."""
    with pytest.raises(ValueError, match="http"):
        payments_recipe.PaymentsClient("file:///etc/passwd", "sk_test")


def test_the_recipe_runs_as_a_script():
    """``python recipes/payments.py`` exits 0 and reports one capture confirmed by the probe."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "captures on the server: 1" in done.stdout


def _body(amount: int) -> dict:
    return {"amount": amount, "currency": "usd", "metadata": {"invoice_id": "INV-1042"}}


def test_the_contract_declares_the_key_guarantee_and_confirms_only_success(payments_recipe):
    """The contract: a guaranteed key kept 24 h, and a capture confirmed only once succeeded."""
    contract = payments_recipe.PaymentsClient.capture.contract

    assert contract.name == "payments.capture"
    assert contract.provider_idempotency_guaranteed
    assert contract.provider_key_retention_seconds == 24 * 3600
    assert contract.postcondition({"status": "succeeded"})
    assert not contract.postcondition({"status": "processing"})


def test_a_refused_connection_is_not_sent_and_a_later_call_captures_once(
    ledger, server, payments_recipe
):
    """API down: EffectNotSent, no quarantine, nothing captured; back up: exactly one capture."""
    down = socket.socket()
    down.bind(("127.0.0.1", 0))  # bound but not listening: every connect is refused
    unreachable = payments_recipe.PaymentsClient(
        f"http://127.0.0.1:{down.getsockname()[1]}", "sk_test", timeout=5.0
    )
    with use_executor(EffectExecutor(ledger, clock=ManualClock())), down:
        with pytest.raises(EffectNotSent) as info:
            unreachable.capture("INV-1042", 1999)
        assert info.value.result.status is EffectStatus.PREPARED
        assert server.posts() == 0

        back = payments_recipe.PaymentsClient(server.url, "sk_test", timeout=5.0)
        result = back.capture.execute("INV-1042", 1999)

    assert result.status is EffectStatus.CONFIRMED
    assert server.posts() == 1
    assert server.committed() == 1
