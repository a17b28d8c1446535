"""``TcpProxy``: a local TCP forwarder to a PostgreSQL server that a test can break on purpose.

``cut()`` drops every connection and refuses new ones, as a server restart or a
failover looks to a client; ``restore()`` lets connections through again.
``lose_reply_to(marker)`` lets the next request containing ``marker`` reach the
server and run to completion (its ReadyForQuery, so any commit, is seen), then
drops the connection before the client reads the answer: a lost acknowledgement;
its ``then`` runs at that moment, before the client learns of the drop.
``round_trips`` counts the requests the server has finished (its ReadyForQuery
messages), so a test can count what a call costs in round trips, not time.
The shared server itself is never touched. Used by the ledger's PostgreSQL
tests and by the fault matrix's ledger faults.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

__all__ = ["TcpProxy"]

# ReadyForQuery ('Z', length 5): the server has finished the request, commit included.
_READY_FOR_QUERY = b"Z\x00\x00\x00\x05"


class _Pair:
    """One client connection and its upstream connection to the server."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.losing_reply = False
        self.then: Callable[[], None] | None = None

    def close(self) -> None:
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()


class TcpProxy:
    """Forwards a local port to ``host:port`` until told to fail."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: set[_Pair] = set()
        self._refusing = False
        self._marker: bytes | None = None
        self._then: Callable[[], None] | None = None
        self.replies_lost = 0
        self.round_trips = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @classmethod
    def to(cls, url: str) -> tuple[TcpProxy, str]:
        """Return a proxy to the server ``url`` names, and ``url`` rewritten to go through it."""
        parts = urlsplit(url)
        proxy = cls(parts.hostname or "127.0.0.1", parts.port or 5432)
        user = f"{parts.username}@" if parts.username else ""
        netloc = f"{user}127.0.0.1:{proxy.port}"
        return proxy, urlunsplit(parts._replace(netloc=netloc))

    def cut(self) -> None:
        """Drop every connection and refuse new ones."""
        with self._lock:
            self._refusing = True
            pairs, self._pairs = self._pairs, set()
        for pair in pairs:
            pair.close()

    def restore(self) -> None:
        """Accept connections again."""
        with self._lock:
            self._refusing = False

    def lose_reply_to(self, marker: bytes, then: Callable[[], None] | None = None) -> None:
        """Drop the connection after the server answers the next request containing ``marker``.

        ``then`` runs (in the proxy's thread) after the answer is complete, before the drop.
        """
        with self._lock:
            self._marker = marker
            self._then = then

    def keep_replies(self) -> None:
        """Forget a reply loss armed by :meth:`lose_reply_to` that no request has met yet."""
        with self._lock:
            self._marker = None
            self._then = None

    def close(self) -> None:
        """Stop listening and drop every connection."""
        self.cut()
        with contextlib.suppress(OSError):
            self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refusing = self._refusing
            if refusing:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self._target)
            except OSError:
                client.close()
                continue
            pair = _Pair(client, upstream)
            with self._lock:
                self._pairs.add(pair)
            threading.Thread(target=self._upward, args=(pair,), daemon=True).start()
            threading.Thread(target=self._downward, args=(pair,), daemon=True).start()

    def _upward(self, pair: _Pair) -> None:
        try:
            while data := pair.client.recv(65536):
                with self._lock:
                    if self._marker is not None and self._marker in data:
                        self._marker = None
                        pair.losing_reply = True
                        pair.then, self._then = self._then, None
                pair.upstream.sendall(data)
        except OSError:
            pass
        pair.close()

    def _downward(self, pair: _Pair) -> None:
        seen = b""
        tail = b""
        try:
            while data := pair.upstream.recv(65536):
                # The bytes kept from the last chunk cannot hold a whole ReadyForQuery.
                window = tail + data
                tail = window[-(len(_READY_FOR_QUERY) - 1) :]
                finished = window.count(_READY_FOR_QUERY)
                if finished:
                    with self._lock:
                        self.round_trips += finished
                if pair.losing_reply:
                    seen = (seen + data)[-len(_READY_FOR_QUERY) - 1 :]
                    if _READY_FOR_QUERY in seen or _READY_FOR_QUERY in data:
                        with self._lock:
                            self.replies_lost += 1
                        if pair.then is not None:
                            pair.then()
                        break
                    continue
                pair.client.sendall(data)
        except OSError:
            pass
        pair.close()
