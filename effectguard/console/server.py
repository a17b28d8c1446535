"""Serving the console on a local port with uvicorn, and the rules for where it may listen."""

from __future__ import annotations

import dataclasses
import logging
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

try:
    import uvicorn
except ModuleNotFoundError as exc:  # pragma: no cover - exercised by a subprocess test
    msg = (
        f"the effectguard console needs the 'console' extra ({exc.name} is not installed): "
        "pip install 'effectguard[console]'"
    )
    raise ImportError(msg) from exc

from effectguard.console.app import create_app
from effectguard.console.security import is_loopback

if TYPE_CHECKING:
    from effectguard.console.app import ConsoleSettings

__all__ = ["check_host", "serve"]

_log = logging.getLogger("effectguard.console")


def check_host(host: str, *, allow_remote: bool, tls: bool) -> str | None:
    """Refuse a non-loopback ``host`` unless allowed; return a warning to show, or None.

    Raises ``ValueError`` for a non-loopback host without ``allow_remote``; with
    it but without TLS, returns a warning that the token and pages cross the
    network in clear.
    """
    if is_loopback(host):
        return None
    if not allow_remote:
        msg = (
            f"refusing to serve on {host}: it is reachable from other machines; "
            "use 127.0.0.1, or pass --allow-remote (with --tls-cert and --tls-key)"
        )
        raise ValueError(msg)
    if not tls:
        return (
            f"serving on {host} without TLS: the access token and every page cross the "
            "network in clear; anyone on the path can read them and resolve operations"
        )
    return None


def serve(
    settings: ConsoleSettings,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve the console until interrupted; call ``ready(url)`` with the token URL once listening.

    ``port`` 0 picks a free port. The URL carries the access token: whoever
    has it can use the console with the rights of this process.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)  # connections made before uvicorn starts wait in the backlog
    bound = sock.getsockname()[1]
    scheme = "https" if tls_cert else "http"
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    url = f"{scheme}://{shown}:{bound}/?token={settings.token}"
    hosts = frozenset({f"{shown}:{bound}", f"localhost:{bound}"}) | settings.hosts
    config = uvicorn.Config(
        create_app(dataclasses.replace(settings, hosts=hosts)),
        log_level="warning",
        ssl_certfile=tls_cert,
        ssl_keyfile=tls_key,
        server_header=False,
    )
    server = uvicorn.Server(config)
    _log.info("console listening on %s://%s:%d", scheme, shown, bound)
    if ready is not None:
        ready(url)
    server.run(sockets=[sock])
