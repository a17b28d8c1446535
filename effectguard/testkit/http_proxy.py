"""``HttpProxy``: a local TCP forwarder to an HTTP server that can lose one response on purpose.

``lose_response_to(marker)`` lets the next request whose bytes contain
``marker`` (an idempotency key, say; None for any request) reach the server
and be answered in full, then closes the client's connection without a byte
of the answer: the server committed, the client sees the connection drop, as
after a lost acknowledgement. Every other request passes through unchanged.
``responses_lost`` counts the answers dropped so far. ``agent-effect check
--sandbox-url-env`` puts one in front of the sandbox a tool calls.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import urlsplit, urlunsplit

__all__ = ["HttpProxy"]

#: How long a dropped answer may take to arrive in full from the server, in seconds.
_ANSWER_SECONDS = 10.0


def _complete(answer: bytes) -> bool:
    """True when ``answer`` holds a whole HTTP response with a Content-Length (or none needed)."""
    head, sep, body = answer.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            try:
                return len(body) >= int(value.strip())
            except ValueError:
                return False
    return False  # no length: the answer ends when the server closes


class HttpProxy:
    """Forwards a local port to ``host:port``; loses one response when told to."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._armed = False
        self._marker: bytes | None = None
        self.responses_lost = 0
        threading.Thread(target=self._accept, name="effectguard-http-proxy", daemon=True).start()

    @classmethod
    def to(cls, url: str) -> tuple[HttpProxy, str]:
        """A proxy to the server ``url`` names, and ``url`` rewritten to go through it."""
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            msg = f"{url!r} is not an http://host[:port] URL (the proxy cannot see into TLS)"
            raise ValueError(msg)
        proxy = cls(parts.hostname, parts.port or 80)
        return proxy, urlunsplit(parts._replace(netloc=f"127.0.0.1:{proxy.port}"))

    def lose_response_to(self, marker: str | None = None) -> None:
        """Drop the answer to the next request containing ``marker`` (any request when None)."""
        with self._lock:
            self._armed = True
            self._marker = None if marker is None else marker.encode()

    def keep_responses(self) -> None:
        """Forget a loss :meth:`lose_response_to` armed that no request has met yet."""
        with self._lock:
            self._armed = False
            self._marker = None

    def close(self) -> None:
        """Stop listening (connections in flight finish on their own)."""
        with contextlib.suppress(OSError):
            self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self._target)
        except OSError:
            client.close()  # the client sees a refused-like drop before sending anything
            return
        losing = threading.Event()
        threading.Thread(target=self._upward, args=(client, upstream, losing), daemon=True).start()
        self._downward(client, upstream, losing)

    def _upward(
        self, client: socket.socket, upstream: socket.socket, losing: threading.Event
    ) -> None:
        try:
            while data := client.recv(65536):
                with self._lock:
                    if self._armed and (self._marker is None or self._marker in data):
                        self._armed = False
                        losing.set()
                upstream.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            upstream.shutdown(socket.SHUT_WR)

    def _downward(
        self, client: socket.socket, upstream: socket.socket, losing: threading.Event
    ) -> None:
        answer = b""
        try:
            while data := upstream.recv(65536):
                if not losing.is_set():
                    client.sendall(data)
                    continue
                # The server is answering the request whose answer is lost: read it whole,
                # so its commit is done, then drop the client without a byte of it.
                answer += data
                upstream.settimeout(_ANSWER_SECONDS)
                if _complete(answer):
                    break
        except OSError:
            pass
        if losing.is_set():
            with self._lock:
                self.responses_lost += 1
        for sock in (client, upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()
