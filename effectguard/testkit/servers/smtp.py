"""An SMTP server on 127.0.0.1 with a sent log searchable by Message-ID (needs ``aiosmtpd``).

:class:`FakeSMTPServer` is the test double behind ``recipes/email_smtp.py``. A
client sends to it with ``smtplib`` over a real socket. A message is accepted
(committed to the sent log) when the server has received its end of data; the
log is read from the same store it is written to, so it never lags.

Faults are planned per message, in order: the n-th message that reaches the
end of its data meets the n-th fault given to :meth:`FakeSMTPServer.schedule`.
The number of accepted messages (:meth:`FakeSMTPServer.received`) is counted
independently of any client: it is a test's truth.

This module imports ``aiosmtpd``, which effectguard itself never needs; it is
not imported by :mod:`effectguard.testkit`. Install ``aiosmtpd`` (it is in the
``dev`` extra) to use it.
"""

from __future__ import annotations

import dataclasses
import enum
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from email.parser import BytesHeaderParser
from types import TracebackType
from typing import Any, Self

try:
    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session
except ImportError as exc:  # pragma: no cover - depends on the environment
    msg = "effectguard.testkit.servers.smtp needs aiosmtpd: pip install aiosmtpd"
    raise ImportError(msg) from exc

__all__ = ["FakeSMTPServer", "SMTPFault", "SentMessage"]


class SMTPFault(enum.StrEnum):
    """What happens to one message at the end of its data, as the client experiences it."""

    NONE = "none"
    """Accepted and acknowledged with ``250``."""

    DROP_AFTER_ACCEPT = "drop_after_accept"
    """Accepted into the sent log, then the connection closes before the ``250`` reply."""

    DROP_BEFORE_ACCEPT = "drop_before_accept"
    """Not accepted: the connection closes at the end of data and nothing is logged."""

    REJECT = "reject"
    """Refused with a permanent ``554``; nothing is logged."""


@dataclasses.dataclass(frozen=True, slots=True)
class SentMessage:
    """One accepted message, as the sent log holds it."""

    message_id: str | None
    sender: str
    recipients: tuple[str, ...]
    content: bytes
    accepted_at: float


class _Handler:
    """aiosmtpd's handler: applies the planned fault and keeps the sent log."""

    def __init__(self, server: FakeSMTPServer) -> None:
        self._server = server

    async def handle_DATA(  # noqa: N802 - the hook name aiosmtpd looks up
        self, smtp: SMTP, _session: Session, envelope: Envelope
    ) -> str:
        fault = self._server._next_fault()  # noqa: SLF001 - the server's own handler
        if fault is SMTPFault.REJECT:
            return "554 5.7.1 Message refused"
        if fault is not SMTPFault.DROP_BEFORE_ACCEPT:
            content = envelope.original_content or b""
            self._server._accept(  # noqa: SLF001 - the SMTP handler is the server's own helper
                SentMessage(
                    message_id=BytesHeaderParser().parsebytes(content)["Message-ID"],
                    sender=envelope.mail_from or "",
                    recipients=tuple(envelope.rcpt_tos),
                    content=content,
                    accepted_at=self._server.clock(),
                )
            )
        if fault is not SMTPFault.NONE and smtp.transport is not None:
            # The reply below then goes nowhere: the client sees the connection end instead.
            smtp.transport.close()
        return "250 2.0.0 OK: queued"


class _Controller(Controller):
    """A controller serving on a socket bound in advance, so port 0 works."""

    def __init__(self, handler: _Handler, sock: socket.socket, **smtp: Any) -> None:
        super().__init__(handler, hostname="127.0.0.1", port=sock.getsockname()[1], **smtp)
        self._sock = sock

    def _create_server(self) -> Any:
        return self.loop.create_server(self._factory_invoker, sock=self._sock, ssl=self.ssl_context)


class FakeSMTPServer:
    """An SMTP server on ``127.0.0.1`` that logs what it accepts (see the module docstring).

    Use it as a context manager, or :meth:`start` and :meth:`stop` it; ``host``
    and ``port`` say where it listens. ``tls_context`` (a server-side
    :class:`ssl.SSLContext`) offers STARTTLS and then requires it;
    ``credentials`` (user name to password) requires AUTH, after STARTTLS if offered.
    """

    def __init__(
        self,
        *,
        tls_context: ssl.SSLContext | None = None,
        credentials: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.host = "127.0.0.1"
        self.port = 0
        self.clock = clock
        self._tls_context = tls_context
        self._credentials = dict(credentials or {})
        self._lock = threading.Lock()
        self._log: list[SentMessage] = []
        self._faults: list[SMTPFault] = []
        self._controller: _Controller | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> Self:
        """Listen on a free port of 127.0.0.1 and serve in a background thread."""
        if self._controller is not None:
            msg = "FakeSMTPServer is already started"
            raise RuntimeError(msg)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((self.host, 0))
        smtp: dict[str, Any] = {}
        if self._tls_context is not None:
            smtp.update(tls_context=self._tls_context, require_starttls=True)
        if self._credentials:
            smtp.update(
                authenticator=self._authenticate,
                auth_required=True,
                auth_require_tls=self._tls_context is not None,
            )
        controller = _Controller(_Handler(self), sock, **smtp)
        controller.start()
        self._controller, self.port = controller, sock.getsockname()[1]
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

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

    def schedule(self, *faults: SMTPFault) -> None:
        """Make the next messages meet ``faults``, one each, in order; later ones meet none."""
        with self._lock:
            self._faults.extend(SMTPFault(f) for f in faults)

    # -- the sent log ------------------------------------------------------------------

    def messages(self) -> list[SentMessage]:
        """Every accepted message, in order."""
        with self._lock:
            return list(self._log)

    def received(self) -> int:
        """How many messages were accepted."""
        return len(self.messages())

    def find(self, message_id: str) -> SentMessage | None:
        """The first accepted message with this Message-ID, or None."""
        return next((m for m in self.messages() if m.message_id == message_id), None)

    def sent_to(self, message_id: str) -> tuple[str, ...] | None:
        """The recipients of the message with this Message-ID, or None if none was accepted."""
        found = self.find(message_id)
        return None if found is None else found.recipients

    # -- called from the server's thread -----------------------------------------------

    def _next_fault(self) -> SMTPFault:
        with self._lock:
            return self._faults.pop(0) if self._faults else SMTPFault.NONE

    def _accept(self, message: SentMessage) -> None:
        with self._lock:
            self._log.append(message)

    def _authenticate(
        self, _server: SMTP, _session: Session, _envelope: Envelope, _mechanism: str, data: Any
    ) -> AuthResult:
        ok = (
            isinstance(data, LoginPassword)
            and self._credentials.get(data.login.decode()) == data.password.decode()
        )
        return AuthResult(success=ok, handled=False)  # aiosmtpd then answers 235 or 535
