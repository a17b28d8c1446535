"""HttpProxy in front of the testkit's payment server: one answer lost after the commit."""

from __future__ import annotations

import http.client
import json

import pytest

from effectguard.testkit import FakePaymentServer
from effectguard.testkit.http_proxy import HttpProxy


def post(port: int, key: str) -> tuple[int, object]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    body = json.dumps({"amount": 500, "currency": "usd"})
    headers = {"Idempotency-Key": key, "Content-Type": "application/json"}
    try:
        connection.request("POST", "/v1/captures", body, headers)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_the_marked_request_commits_and_its_answer_never_arrives():
    """The server commits the capture; the client sees the connection drop; others pass."""
    with FakePaymentServer() as server:
        proxy, url = HttpProxy.to(server.url)
        try:
            port = int(url.rsplit(":", 1)[1])
            proxy.lose_response_to("key-1")
            assert post(port, "key-0")[0] == 200  # another key: answered
            with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
                post(port, "key-1")
            assert server.committed("key-1") == 1
            assert server.posts("key-1") == 1
            assert proxy.responses_lost == 1
            status, answer = post(port, "key-1")  # the resend: the server's dedup answers it
            assert status == 200, answer
            assert server.committed("key-1") == 1
        finally:
            proxy.close()


def test_only_http_urls_can_be_proxied():
    """A TLS URL cannot be seen into: refused with the reason."""
    with pytest.raises(ValueError, match="not an http"):
        HttpProxy.to("https://sandbox.example.test")
