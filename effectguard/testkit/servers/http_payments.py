"""A payment API over real HTTP on 127.0.0.1, with Stripe-style idempotency keys and faults.

:class:`FakePaymentServer` is the test double behind ``recipes/payments.py``:
a client speaks to it with a real socket, so a dropped connection or an
answer that arrives after the client's timeout happens exactly as it would in
production. Its semantics, which a recipe's contract relies on:

``POST /v1/captures`` (JSON object with a positive integer ``amount`` and a
``currency``; an optional ``Idempotency-Key`` header):

- a new key: the capture is created (``status: processing``), committed
  (``status: succeeded``) and answered ``200`` with the capture;
- the same key with the same body: the first answer again, nothing committed,
  with the header ``Idempotent-Replayed: true``;
- the same key with another body: ``422`` (``idempotency_error``);
- the same key while the first request is still processing: ``409``;
- a body that fails validation: ``400``, and nothing is saved for the key;
- a key older than ``key_retention`` seconds (by ``clock``) is forgotten: the
  request is new again, as with a provider that has pruned the key;
- without a key, every request is new.

``GET /v1/captures?idempotency_key=K`` lists every capture created with key
``K`` (``{"object": "list", "data": [...]}``), read from the same store the
captures are written to: an empty list is authoritative. Captures keep their
key after the key's retention has passed, so the lookup still finds them.

Faults are scheduled per idempotency key: the n-th POST carrying a key meets
the n-th fault given to :meth:`FakePaymentServer.schedule` for it. What the
server committed is counted independently of any client (:meth:`committed`,
:meth:`captures`): that count, never the client's report, is a test's truth.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import http
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

__all__ = ["FakePaymentServer", "ReceivedRequest", "ServerFault"]

CAPTURES = "/v1/captures"
REPLAYED_HEADER = "Idempotent-Replayed"


class ServerFault(enum.StrEnum):
    """What happens to one POST, as the client experiences it."""

    NONE = "none"
    """Processed and answered normally."""

    FAIL_BEFORE_COMMIT = "fail_before_commit"
    """Answered ``503`` before anything is processed; nothing is saved for the key."""

    DROP_AFTER_COMMIT = "drop_after_commit"
    """Processed and committed, then the connection is closed without an answer."""

    ANSWER_LATE = "answer_late"
    """Processed and committed; the answer waits ``answer_delay`` seconds (or :meth:`release`)."""

    HOLD_BEFORE_COMMIT = "hold_before_commit"
    """Held as ``processing`` until :meth:`release` (or ``hold_timeout``), then committed."""

    DECLINE = "decline"
    """Processed and refused with ``402 card_declined``, saved under the key; nothing committed."""


@dataclasses.dataclass(frozen=True, slots=True)
class ReceivedRequest:
    """One request as the server saw it."""

    method: str
    path: str
    idempotency_key: str | None
    fault: ServerFault


@dataclasses.dataclass(slots=True)
class _Saved:
    """What the server remembers for one idempotency key."""

    body: dict[str, Any]
    saved_at: float
    answer: tuple[int, dict[str, Any]] | None = None  # None while processing


def _error(kind: str, code: str, message: str) -> dict[str, Any]:
    return {"type": kind, "code": code, "message": message}


def _problem(body: object) -> str | None:
    """Why ``body`` is not a valid capture request, or None when it is."""
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    amount = body.get("amount")
    if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0:
        return "amount must be an integer > 0"
    if not isinstance(body.get("currency"), str) or not body["currency"]:
        return "currency must be a non-empty string"
    return None


class FakePaymentServer:
    """A Stripe-style payment API on ``127.0.0.1`` (see the module docstring for its rules).

    Use it as a context manager, or :meth:`start` and :meth:`stop` it; ``url``
    is its base URL. ``key_retention`` (seconds, by ``clock``) is how long a
    key is remembered. ``answer_delay`` bounds an ANSWER_LATE answer's wait and
    ``hold_timeout`` a HOLD_BEFORE_COMMIT's; :meth:`release` ends both at once.
    """

    def __init__(
        self,
        *,
        key_retention: float = 24 * 3600.0,
        clock: Callable[[], float] = time.time,
        answer_delay: float = 10.0,
        hold_timeout: float = 10.0,
    ) -> None:
        self.key_retention = key_retention
        self.clock = clock
        self.answer_delay = answer_delay
        self.hold_timeout = hold_timeout
        #: While True, lookups answer ``503`` (the lookup service is down).
        self.fail_lookups = False
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._keys: dict[str, _Saved] = {}
        self._captures: list[dict[str, Any]] = []
        self._schedule: dict[str, list[ServerFault]] = {}
        self._posts_by_key: dict[str, int] = {}
        self._requests: list[ReceivedRequest] = []
        self._waiting: set[threading.Event] = set()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:41234``; the server must be started."""
        if self._httpd is None:
            msg = "FakePaymentServer is not started"
            raise RuntimeError(msg)
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Self:
        """Listen on a free port of 127.0.0.1 and serve in a background thread."""
        if self._httpd is not None:
            msg = "FakePaymentServer is already started"
            raise RuntimeError(msg)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},  # how soon stop() is noticed
            name="fake-payment-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Release every waiting request, stop serving and close the socket."""
        httpd, thread = self._httpd, self._thread
        if httpd is None or thread is None:
            return
        self.release()
        httpd.shutdown()
        httpd.server_close()
        thread.join()
        self._httpd = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- test controls -----------------------------------------------------------------

    def schedule(self, idempotency_key: str, *faults: ServerFault) -> None:
        """Make the next POSTs with ``idempotency_key`` meet ``faults``, one each, in order.

        A POST with no fault left meets :attr:`ServerFault.NONE`. Delivery faults
        (DROP_AFTER_COMMIT, ANSWER_LATE) also apply to a replayed answer.
        """
        with self._lock:
            self._schedule.setdefault(idempotency_key, []).extend(ServerFault(f) for f in faults)

    def release(self) -> None:
        """Let every request now held (HOLD_BEFORE_COMMIT) or delayed (ANSWER_LATE) go on."""
        with self._lock:
            waiting = list(self._waiting)
        for event in waiting:
            event.set()

    def wait_for_waiting(self, count: int = 1, timeout: float = 10.0) -> bool:
        """Block until ``count`` requests are held or delayed; False if ``timeout`` passes."""
        with self._changed:
            return self._changed.wait_for(lambda: len(self._waiting) >= count, timeout)

    # -- ground truth ------------------------------------------------------------------

    def captures(self) -> list[dict[str, Any]]:
        """Every committed (``succeeded``) capture, in commit order."""
        with self._lock:
            return [dict(c) for c in self._captures if c["status"] == "succeeded"]

    def committed(self, idempotency_key: str | None = None) -> int:
        """How many captures are committed (with ``idempotency_key``, or in all)."""
        return sum(
            1
            for capture in self.captures()
            if idempotency_key is None or capture["idempotency_key"] == idempotency_key
        )

    @property
    def requests(self) -> list[ReceivedRequest]:
        """Every request received, in arrival order."""
        with self._lock:
            return list(self._requests)

    def posts(self, idempotency_key: str | None = None) -> int:
        """How many POSTs arrived (with ``idempotency_key``, or in all)."""
        return sum(
            1
            for request in self.requests
            if request.method == "POST"
            and (idempotency_key is None or request.idempotency_key == idempotency_key)
        )

    # -- request processing (called from handler threads) ------------------------------

    def _arrive(self, method: str, path: str, key: str | None) -> ServerFault:
        with self._lock:
            fault = ServerFault.NONE
            if method == "POST" and key is not None:
                planned = self._schedule.get(key, [])
                if planned:
                    fault = planned.pop(0)
            self._requests.append(ReceivedRequest(method, path, key, fault))
            return fault

    @contextlib.contextmanager
    def _waiter(self) -> Iterator[threading.Event]:
        event = threading.Event()
        with self._changed:
            self._waiting.add(event)
            self._changed.notify_all()
        try:
            yield event
        finally:
            with self._lock:
                self._waiting.discard(event)

    def _capture(
        self, key: str | None, raw: bytes, fault: ServerFault
    ) -> tuple[int, dict[str, Any], bool]:
        """Process one POST; return ``(status, body, replayed)``."""
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        problem = _problem(body)
        if problem is not None:
            error = _error("invalid_request_error", "parameter_invalid", problem)
            return http.HTTPStatus.BAD_REQUEST, {"error": error}, False
        with self._lock:
            saved = None if key is None else self._keys.get(key)
            if key is not None and saved is not None and self._expired(saved):
                del self._keys[key]  # pruned: from now on the key is new again
                saved = None
            if saved is not None:
                if saved.body != body:
                    error = _error(
                        "idempotency_error",
                        "idempotency_key_reused",
                        "this key was used with different parameters",
                    )
                    return http.HTTPStatus.UNPROCESSABLE_ENTITY, {"error": error}, False
                if saved.answer is None:
                    error = _error(
                        "idempotency_error",
                        "idempotency_key_in_use",
                        "a request with this key is still being processed",
                    )
                    return http.HTTPStatus.CONFLICT, {"error": error}, False
                return saved.answer[0], saved.answer[1], True
            capture = {
                **body,
                "id": f"cap_{len(self._captures) + 1:06d}",
                "object": "capture",
                "status": "processing",
                "idempotency_key": key,
                "created": int(self.clock()),
            }
            self._captures.append(capture)
            remembered = _Saved(dict(body), self.clock())
            if key is not None:
                self._keys[key] = remembered
        if fault is ServerFault.HOLD_BEFORE_COMMIT:
            with self._waiter() as event:
                event.wait(self.hold_timeout)
        with self._lock:
            if fault is ServerFault.DECLINE:
                capture["status"] = "failed"
                error = _error("card_error", "card_declined", "the card was declined")
                answer: tuple[int, dict[str, Any]] = (
                    http.HTTPStatus.PAYMENT_REQUIRED,
                    {"error": error},
                )
            else:
                capture["status"] = "succeeded"
                answer = (http.HTTPStatus.OK, dict(capture))
            remembered.answer = answer
        return answer[0], answer[1], False

    def _expired(self, saved: _Saved) -> bool:
        return self.clock() - saved.saved_at >= self.key_retention

    def _lookup(self, query: str) -> tuple[int, dict[str, Any]]:
        keys = parse_qs(query).get("idempotency_key")
        if not keys:
            error = _error(
                "invalid_request_error", "parameter_missing", "idempotency_key is required"
            )
            return http.HTTPStatus.BAD_REQUEST, {"error": error}
        if self.fail_lookups:
            error = _error("api_error", "unavailable", "the lookup service is unavailable")
            return http.HTTPStatus.SERVICE_UNAVAILABLE, {"error": error}
        with self._lock:
            found = [dict(c) for c in self._captures if c["idempotency_key"] == keys[0]]
        return http.HTTPStatus.OK, {"object": "list", "data": found, "has_more": False}


def _handler_for(server: FakePaymentServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "FakePaymentServer/1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
            """Stay quiet: tests read the ground truth, not an access log."""

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            server._arrive("GET", parts.path, None)  # noqa: SLF001 - the server's own handler
            if parts.path != CAPTURES:
                self._answer(http.HTTPStatus.NOT_FOUND, _not_found(parts.path))
                return
            self._answer(*server._lookup(parts.query))  # noqa: SLF001 - the request handler is the server's own inner class

        def do_POST(self) -> None:
            parts = urlsplit(self.path)
            key = self.headers.get("Idempotency-Key") or None
            fault = server._arrive("POST", parts.path, key)  # noqa: SLF001 - the request handler is the server's own inner class
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if parts.path != CAPTURES:
                self._answer(http.HTTPStatus.NOT_FOUND, _not_found(parts.path))
                return
            if fault is ServerFault.FAIL_BEFORE_COMMIT:
                error = _error("api_error", "unavailable", "the service is unavailable")
                self._answer(http.HTTPStatus.SERVICE_UNAVAILABLE, {"error": error})
                return
            status, body, replayed = server._capture(key, raw, fault)  # noqa: SLF001 - the request handler is the server's own inner class
            if fault is ServerFault.DROP_AFTER_COMMIT:
                self.close_connection = True  # the socket closes with no answer written
                return
            if fault is ServerFault.ANSWER_LATE:
                with server._waiter() as event:  # noqa: SLF001 - the request handler is the server's own inner class
                    event.wait(server.answer_delay)
            self._answer(status, body, replayed=replayed)

        def _answer(self, status: int, body: dict[str, Any], *, replayed: bool = False) -> None:
            payload = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                if replayed:
                    self.send_header(REPLAYED_HEADER, "true")
                self.end_headers()
                self.wfile.write(payload)
            except OSError:
                self.close_connection = True  # the client gave up waiting: nobody to answer

    return Handler


def _not_found(path: str) -> dict[str, Any]:
    return {"error": _error("invalid_request_error", "not_found", f"no route {path!r}")}
