"""The middleware in front of every route: the access token, then the security headers.

A first visit brings the token in the URL (``?token=…``, as printed at
start-up); the console answers with a redirect to the same page without it
and sets the token as an HttpOnly, SameSite=Strict cookie, so the token does
not linger in the address bar, the history or a screenshot. A request with
neither a valid cookie nor a valid token gets 403 and touches nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlencode

from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp

from effectguard.console.security import COOKIE, SECURITY_HEADERS, AccessGuard

__all__ = ["GuardMiddleware"]


class GuardMiddleware(BaseHTTPMiddleware):
    """Refuses every request without the access token; sets the security headers on all."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        guard: AccessGuard,
        forbidden: Callable[[str, int], Response],
        hosts: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__(app)
        self.guard = guard
        self.forbidden = forbidden
        self.hosts = frozenset(host.lower() for host in hosts)

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        """Let the request through only with the token; add the headers to whatever answers."""
        offered = request.query_params.get("token")
        host = request.headers.get("host", "").lower()
        if self.hosts and host not in self.hosts:
            # A page on another name that resolves here (DNS rebinding) is not this console.
            response: Response = self.forbidden(
                "this console answers only to the address it printed at start-up", 421
            )
        elif offered is not None and self.guard.token_ok(offered):
            rest = {k: v for k, v in request.query_params.items() if k != "token"}
            # Exactly one leading slash: "//evil.example/" would leave the origin.
            path = "/" + request.url.path.lstrip("/\\")
            target = path + (f"?{urlencode(rest)}" if rest else "")
            response = RedirectResponse(target, status_code=303)
            response.set_cookie(
                COOKIE,
                offered,
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
        elif self.guard.token_ok(request.cookies.get(COOKIE)):
            response = await call_next(request)
        else:
            response = self.forbidden(
                "this console needs its access token: open the URL it printed at start-up", 403
            )
        for name, value in SECURITY_HEADERS.items():
            response.headers[name] = value
        return response
