"""FakePaymentServer keeps its documented Stripe-style key semantics and faults over real HTTP."""

from __future__ import annotations

import http.client
import json
import threading
from urllib.parse import urlsplit

import pytest

from effectguard.testkit import FakePaymentServer, ServerFault

BODY = {"amount": 1999, "currency": "usd"}


@pytest.fixture
def server(clock):
    """A payment server on 127.0.0.1, on the hand-moved clock."""
    with FakePaymentServer(clock=clock, key_retention=3600) as server:
        yield server


def send(server, method, path="/v1/captures", body=None, key=None, timeout=5.0, raw=None):
    """One request; return ``(status, headers, JSON answer)``."""
    url = urlsplit(server.url)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    payload = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    try:
        connection.request(method, path, payload, headers)
        response = connection.getresponse()
        return response.status, dict(response.headers), json.loads(response.read())
    finally:
        connection.close()


def test_a_new_key_commits_one_capture(server):
    """A POST with a new key answers 200 with the capture, and the server counts one."""
    status, headers, capture = send(server, "POST", body=BODY, key="k1")

    assert status == 200
    assert "Idempotent-Replayed" not in headers
    assert capture["status"] == "succeeded"
    assert capture["amount"] == 1999
    assert capture["idempotency_key"] == "k1"
    assert server.captures() == [capture]


def test_same_key_same_body_replays_the_first_answer(server):
    """The same key and body return the first answer, marked replayed, and commit nothing."""
    first = send(server, "POST", body=BODY, key="k1")[2]

    status, headers, again = send(server, "POST", body=BODY, key="k1")

    assert status == 200
    assert headers["Idempotent-Replayed"] == "true"
    assert again == first
    assert server.committed() == 1


def test_same_key_other_body_is_422(server):
    """The same key with another body is refused with 422 and commits nothing."""
    send(server, "POST", body=BODY, key="k1")

    status, _, answer = send(server, "POST", body={**BODY, "amount": 5}, key="k1")

    assert status == 422
    assert answer["error"]["code"] == "idempotency_key_reused"
    assert server.committed() == 1


def test_same_key_while_processing_is_409(server):
    """A POST with a key whose first request is still processing gets 409; one capture results."""
    server.schedule("k1", ServerFault.HOLD_BEFORE_COMMIT)
    answers = []
    first = threading.Thread(
        target=lambda: answers.append(send(server, "POST", body=BODY, key="k1"))
    )
    first.start()
    assert server.wait_for_waiting(1)

    status, _, answer = send(server, "POST", body=BODY, key="k1")
    [listed] = send(server, "GET", "/v1/captures?idempotency_key=k1")[2]["data"]
    server.release()
    first.join()

    assert status == 409
    assert answer["error"]["code"] == "idempotency_key_in_use"
    assert listed["status"] == "processing"
    assert answers[0][0] == 200
    assert server.committed() == 1


def test_a_key_past_its_retention_is_new_again(server, clock):
    """After key_retention the same key creates a second capture; the lookup lists both."""
    send(server, "POST", body=BODY, key="k1")
    clock.advance(3599)
    assert send(server, "POST", body=BODY, key="k1")[1].get("Idempotent-Replayed") == "true"
    clock.advance(1)

    status, headers, _ = send(server, "POST", body=BODY, key="k1")

    assert status == 200
    assert "Idempotent-Replayed" not in headers
    assert server.committed("k1") == 2
    assert len(send(server, "GET", "/v1/captures?idempotency_key=k1")[2]["data"]) == 2


def test_lookup_finds_by_key_and_answers_an_empty_list_otherwise(server):
    """The lookup lists the capture made with a key, an empty list for another, 400 for none."""
    capture = send(server, "POST", body=BODY, key="k1")[2]

    found = send(server, "GET", "/v1/captures?idempotency_key=k1")
    none = send(server, "GET", "/v1/captures?idempotency_key=k2")
    missing = send(server, "GET", "/v1/captures")

    assert (found[0], found[2]["data"]) == (200, [capture])
    assert (none[0], none[2]["data"]) == (200, [])
    assert missing[0] == 400


def test_fail_before_commit_is_503_and_saves_nothing(server):
    """A 503 before commit saves nothing for the key: the resend commits, once."""
    server.schedule("k1", ServerFault.FAIL_BEFORE_COMMIT)

    assert send(server, "POST", body=BODY, key="k1")[0] == 503
    assert server.committed() == 0
    status, headers, _ = send(server, "POST", body=BODY, key="k1")

    assert status == 200
    assert "Idempotent-Replayed" not in headers
    assert server.committed() == 1


def test_drop_after_commit_closes_without_an_answer(server):
    """DROP_AFTER_COMMIT commits, then the client sees the connection end with no answer."""
    server.schedule("k1", ServerFault.DROP_AFTER_COMMIT)

    with pytest.raises(http.client.RemoteDisconnected):
        send(server, "POST", body=BODY, key="k1")

    assert server.committed("k1") == 1


def test_answer_late_commits_then_answers_after_the_client_gave_up(server):
    """ANSWER_LATE commits before the client's timeout fires; the answer comes after it."""
    server.schedule("k1", ServerFault.ANSWER_LATE)

    with pytest.raises(TimeoutError):
        send(server, "POST", body=BODY, key="k1", timeout=0.2)

    assert server.wait_for_waiting(1)  # the answer is still held back
    assert server.committed("k1") == 1


def test_a_decline_is_402_saved_under_the_key(server):
    """A declined capture answers 402, commits nothing, and the resend replays the 402."""
    server.schedule("k1", ServerFault.DECLINE)

    first = send(server, "POST", body=BODY, key="k1")
    again = send(server, "POST", body=BODY, key="k1")

    assert first[0] == again[0] == 402
    assert again[1]["Idempotent-Replayed"] == "true"
    assert server.committed() == 0


@pytest.mark.parametrize(
    "raw",
    [b"not json", b"[]", json.dumps({"amount": 0, "currency": "usd"}).encode(), b"{}"],
    ids=["not-json", "not-object", "zero-amount", "no-fields"],
)
def test_an_invalid_body_is_400_and_saves_nothing_for_the_key(server, raw):
    """A body that fails validation answers 400 and leaves the key free for a valid request."""
    assert send(server, "POST", raw=raw, key="k1")[0] == 400

    status, headers, _ = send(server, "POST", body=BODY, key="k1")

    assert status == 200
    assert "Idempotent-Replayed" not in headers
    assert server.committed() == 1


def test_faults_are_scheduled_per_key_in_order(server):
    """Each key meets its own faults in order; other keys and later POSTs meet none."""
    server.schedule("k1", ServerFault.FAIL_BEFORE_COMMIT, ServerFault.FAIL_BEFORE_COMMIT)

    assert send(server, "POST", body=BODY, key="k2")[0] == 200
    assert send(server, "POST", body=BODY, key="k1")[0] == 503
    assert send(server, "POST", body=BODY, key="k1")[0] == 503
    assert send(server, "POST", body=BODY, key="k1")[0] == 200
    assert [r.fault for r in server.requests] == [
        ServerFault.NONE,
        ServerFault.FAIL_BEFORE_COMMIT,
        ServerFault.FAIL_BEFORE_COMMIT,
        ServerFault.NONE,
    ]


def test_without_a_key_every_post_commits(server):
    """POSTs without an Idempotency-Key are never deduplicated."""
    send(server, "POST", body=BODY)
    send(server, "POST", body=BODY)

    assert server.committed() == 2


def test_an_unknown_path_is_404(server):
    """A request to a path the API does not have is 404 and commits nothing."""
    assert send(server, "POST", "/v1/charges", body=BODY, key="k1")[0] == 404
    assert send(server, "GET", "/v1/nothing")[0] == 404
    assert server.committed() == 0


def test_url_needs_a_started_server():
    """Asking a server that is not started for its URL is a clear error."""
    with pytest.raises(RuntimeError, match="not started"):
        _ = FakePaymentServer().url
