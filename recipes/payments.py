# Recipe: capture a payment over HTTP so that a lost acknowledgement never charges twice.
#
# To use it with your provider, change:
#   - the base URL and API key: PaymentsClient.from_env() reads PAYMENTS_API_URL and
#     PAYMENTS_API_KEY;
#   - the paths, the request body and the answers in capture() and find_capture() to your
#     provider's API, and the HTTP statuses in _REFUSED to those it documents as "not executed";
#   - effectguard.configure(ledger=...) once at start-up (a SQLite path, or a postgresql:// URL).
#
# Verify in your provider's documentation before you keep idempotency_guaranteed=True:
#   - a request resent with the same idempotency key never executes twice and returns the first
#     result (Stripe: "Idempotent requests"), including while the first is still in flight;
#   - how long a key is kept at least: set provider_key_retention to that (Stripe: 24 hours);
#   - that the same key with other parameters is refused, not executed.
# Verify before the probe maps "not found" to NOT_COMMITTED:
#   - the lookup reads its own writes. A search index that lags behind (many "search" and
#     "list" endpoints do) proves nothing by not finding a capture: answer UNKNOWN instead.
# Turn off your HTTP client's own retries: effectguard decides when a resend is safe. A refused
# connection (the API is down) provably sent nothing: effectguard retries it after a backoff, and
# raises EffectNotSent if it stays down; calling again later captures once. A timeout or a reset
# after the request was written is never "not sent": the probe settles it.
"""Capture a payment with effectguard over real HTTP (run it for a demo against a local server).

``python recipes/payments.py`` captures against :class:`FakePaymentServer`, which
commits the capture and then closes the connection without answering.
effectguard finds the capture through the lookup endpoint, confirms it, and
replays it to a second call; the script exits 0 only if the server holds
exactly one capture.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import socket
import sys
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import effectguard
from effectguard import INJECTED, EffectRejected, OutcomeProbeResult, effect

Capture = dict[str, Any]

#: Answers after which the capture has not happened and never will for this request.
_REFUSED = {400: "invalid request", 402: "declined", 422: "key reused with other parameters"}


class PaymentsAPIError(Exception):
    """An answer that does not settle whether the capture happened (5xx, 409, 429...)."""


def _body(invoice_id: str, amount_cents: int, currency: str) -> dict[str, Any]:
    return {"amount": amount_cents, "currency": currency, "metadata": {"invoice_id": invoice_id}}


class PaymentsClient:
    """A payments API client whose captures are recorded, reconciled and never doubled.

    The API key lives on the client, never in a tool's arguments, so it is never
    written to the ledger. ``timeout`` bounds the connect and each read.
    """

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 10.0) -> None:
        self._url = urlsplit(base_url)
        if self._url.scheme not in ("http", "https") or not self._url.hostname:
            msg = f"base_url must be an http:// or https:// URL, not {base_url!r}"
            raise ValueError(msg)
        self._api_key = api_key
        self.timeout = timeout

    @classmethod
    def from_env(cls) -> PaymentsClient:
        """A client for ``PAYMENTS_API_URL`` with the key ``PAYMENTS_API_KEY``."""
        return cls(os.environ["PAYMENTS_API_URL"], os.environ["PAYMENTS_API_KEY"])

    def _request(
        self, method: str, path: str, body: object = None, *, idempotency_key: str | None = None
    ) -> tuple[int, Any]:
        """Send one request, with no retry and no redirect; return ``(status, JSON answer)``."""
        connection_type = (
            http.client.HTTPSConnection  # verifies the certificate and the host name
            if self._url.scheme == "https"
            else http.client.HTTPConnection
        )
        connection = connection_type(self._url.hostname or "", self._url.port, timeout=self.timeout)
        headers = {"Authorization": f"Bearer {self._api_key}", "Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        try:
            connection.request(method, self._url.path.rstrip("/") + path, payload, headers)
            response = connection.getresponse()
            return response.status, json.loads(response.read() or b"null")
        finally:
            connection.close()

    def find_capture(
        self, invoice_id: str, amount_cents: int, currency: str, *, idempotency_key: str
    ) -> OutcomeProbeResult:
        """The outcome probe: what the provider holds under this capture's idempotency key."""
        query = urlencode({"idempotency_key": idempotency_key})
        try:
            status, answer = self._request("GET", f"/v1/captures?{query}")
        except (OSError, http.client.HTTPException, ValueError) as exc:
            return OutcomeProbeResult.unknown({"lookup_error": f"{type(exc).__name__}: {exc}"})
        if status != http.HTTPStatus.OK or not isinstance(answer, dict):
            return OutcomeProbeResult.unknown({"lookup_status": status})
        found = answer.get("data")
        if found == []:
            # Authoritative only because this lookup reads its own writes (see the top). A
            # request still on the wire may yet arrive; the retry this allows has the same key.
            return OutcomeProbeResult.not_committed({"lookup": "no capture with this key"})
        if not isinstance(found, list) or not isinstance(found[0], dict):
            return OutcomeProbeResult.unknown({"lookup": "unexpected answer", "answer": answer})
        capture: Capture = found[0]
        evidence = {"lookup": capture.get("status"), "id": capture.get("id")}
        expected = _body(invoice_id, amount_cents, currency)
        if any(capture.get(name) != value for name, value in expected.items()):
            evidence["mismatch"] = "the capture under this key has other parameters"
            return OutcomeProbeResult.unknown(evidence)
        if capture.get("status") == "processing":
            return OutcomeProbeResult.pending(evidence)
        if capture.get("status") == "succeeded":
            return OutcomeProbeResult.committed(
                capture, provider_operation_id=str(capture["id"]), evidence=evidence
            )
        return OutcomeProbeResult.unknown(evidence)

    @effect(
        name="payments.capture",  # part of every fingerprint: keep it when you rename the code
        operation_id="invoice:{invoice_id}:capture",
        idempotency_key="invoice-{invoice_id}-capture",
        # The provider documents that a POST resent with the same Idempotency-Key returns the
        # first result and creates no second capture, for keys up to 24 hours old.
        idempotency_guaranteed=True,
        provider_key_retention=timedelta(hours=24),
        probe=find_capture,
        # Confirm only what the provider says succeeded; a capture still processing stays
        # unknown, and a later call asks find_capture() again.
        postcondition=lambda capture: capture.get("status") == "succeeded",
        provider_operation_id="id",
        # Raised by connection.request() while connecting, before any byte of the POST is
        # written. Not RemoteDisconnected, ConnectionResetError or a timeout: those can come
        # after the provider received the capture.
        not_sent_on=(ConnectionRefusedError, socket.gaierror),
    )
    def capture(
        self,
        invoice_id: str,
        amount_cents: int,
        currency: str = "usd",
        *,
        idempotency_key: str = INJECTED,
    ) -> Capture:
        """Capture ``amount_cents`` for ``invoice_id`` once, however often it is called.

        Raises :class:`EffectRejected` when the provider refused it, and
        :class:`effectguard.EffectNotConfirmed` when its outcome is not settled yet.
        """
        body = _body(invoice_id, amount_cents, currency)
        status, answer = self._request(
            "POST", "/v1/captures", body, idempotency_key=idempotency_key
        )
        if status == http.HTTPStatus.OK:
            capture: Capture = answer
            return capture
        if status in _REFUSED:
            raise EffectRejected(
                f"capture refused: {_REFUSED[status]}",
                evidence={"http_status": status, "answer": answer},
            )
        # Anything else may or may not have captured: effectguard asks find_capture().
        msg = f"HTTP {status}: {answer}"
        raise PaymentsAPIError(msg)


def main() -> int:
    """Drop the connection after the server commits; exit 0 if exactly one capture results."""
    # The demo's stand-in for a provider; the code above never needs it.
    from effectguard.testkit import FakePaymentServer, ServerFault  # noqa: PLC0415 - demo only

    with (
        tempfile.TemporaryDirectory() as workdir,
        FakePaymentServer() as server,
        effectguard.configure(ledger=Path(workdir) / "effects.db"),
    ):
        payments = PaymentsClient(server.url, api_key="sk_test_demo", timeout=5.0)
        server.schedule("invoice-INV-1042-capture", ServerFault.DROP_AFTER_COMMIT)

        first = payments.capture.execute("INV-1042", 1999)
        print(f"first call:  {first.status} after {first.attempts} attempt(s): {first.reason}")
        again = payments.capture.execute("INV-1042", 1999)
        print(f"second call: {again.status}, replayed={again.replayed}")
        print(f"captures on the server: {server.committed()}, POSTs sent: {server.posts()}")

        ok = first.confirmed and again.replayed and server.committed() == 1
    print("OK: one capture, confirmed through the probe" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    # effectguard installs no log handler; this one prints each event it logs as one short line.
    logging.basicConfig(level=logging.WARNING, format="  log: %(levelname)s %(message).100s")
    logging.getLogger("effectguard").setLevel(logging.INFO)
    sys.exit(main())
