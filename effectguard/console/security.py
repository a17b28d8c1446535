"""Who may use the console: an access token, a CSRF token per form, and headers on every response.

The console binds to the loopback interface by default, but any local process
(or a web page in the operator's browser) can reach a loopback port, so every
request must carry the random access token printed at start-up: in the URL on
the first visit, then in an HttpOnly, SameSite=Strict cookie. Every form also
carries a CSRF token derived from the access token, so a page from another
origin cannot post a resolution even through the operator's own browser.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets

__all__ = [
    "COOKIE",
    "SECURITY_HEADERS",
    "AccessGuard",
    "is_loopback",
    "new_token",
]

#: The cookie that carries the access token after the first visit.
COOKIE = "effectguard_console"

#: Headers on every response: no scripts, no framing, no caching of pages with data,
#: and no Referer that could carry a URL with the token in it.
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


def new_token() -> str:
    """Return a fresh access token: 32 random bytes, URL-safe."""
    return secrets.token_urlsafe(32)


def is_loopback(host: str) -> bool:
    """True when ``host`` names only this machine (``localhost`` or a loopback address)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class AccessGuard:
    """Checks the access token and the CSRF token in constant time."""

    __slots__ = ("_csrf", "_token")

    def __init__(self, token: str) -> None:
        if len(token) < 16:  # noqa: PLR2004 - a token shorter than this is guessable
            msg = "the console's access token must be at least 16 characters"
            raise ValueError(msg)
        self._token = token
        self._csrf = hmac.new(
            token.encode(), b"effectguard-console-csrf", hashlib.sha256
        ).hexdigest()

    @property
    def csrf(self) -> str:
        """The CSRF token every form carries (a keyed hash of the access token)."""
        return self._csrf

    def token_ok(self, candidate: str | None) -> bool:
        """True when ``candidate`` is the access token."""
        return candidate is not None and hmac.compare_digest(
            candidate.encode(), self._token.encode()
        )

    def csrf_ok(self, candidate: object) -> bool:
        """True when ``candidate`` is this console's CSRF token."""
        return isinstance(candidate, str) and hmac.compare_digest(
            candidate.encode(), self._csrf.encode()
        )
