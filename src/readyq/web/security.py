"""The dashboard's defences, each a small piece that the app composes.

* Every response carries a Content-Security-Policy that allows the package's own
  scripts, styles and workers only (no inline script, no inline style, nothing from
  another origin), and headers that keep it out of frames and stop content sniffing.
* Every action is a POST that carries a CSRF token: a signed double submit. A random
  value lives in a cookie (``SameSite=Strict``, ``HttpOnly``); the token sent with the
  form (or the ``X-CSRF-Token`` header) is that value signed with the app's secret. A
  request from another site can neither read the cookie nor forge the signature. A
  request whose ``Origin`` header names another origin is refused as well.
* The standalone server checks HTTP basic credentials (from the environment).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CSRF_COOKIE = "readyq_csrf"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; worker-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'"
)
SECURITY_HEADERS = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
)


class SecurityHeaders:
    """ASGI middleware: the security headers on every HTTP response, errors included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in SECURITY_HEADERS if k not in names]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, with_headers)


class Csrf:
    """Signed double-submit tokens under one secret."""

    def __init__(self, secret: bytes) -> None:
        self.secret = secret

    @staticmethod
    def new_cookie() -> str:
        return secrets.token_urlsafe(24)

    def token(self, cookie: str) -> str:
        """The token that goes with ``cookie``."""
        mac = hmac.new(self.secret, cookie.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")

    def check(self, cookie: str | None, token: str | None) -> bool:
        """Whether ``token`` is the signature of ``cookie`` (constant time)."""
        if not cookie or not token or len(cookie) > 200 or len(token) > 200:
            return False
        return hmac.compare_digest(self.token(cookie), token)


def origin_allowed(origin: str | None, host: str | None, scheme: str) -> bool:
    """A request with no Origin header (scripts, old browsers) passes; one whose Origin
    is not this server's (scheme and host) does not."""
    if origin is None:
        return True
    return host is not None and origin in (f"{scheme}://{host}", f"http://{host}",
                                           f"https://{host}")


class BasicAuth:
    """ASGI middleware: HTTP basic authentication against one user and password."""

    def __init__(self, app: ASGIApp, user: str, password: str, realm: str = "readyq") -> None:
        self.app = app
        self.expected = f"{user}:{password}".encode()
        self.realm = realm

    def allowed(self, header: bytes | None) -> bool:
        if not header or not header.lower().startswith(b"basic "):
            return False
        try:
            given = base64.b64decode(header[6:].strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        return hmac.compare_digest(given, self.expected)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = dict(scope.get("headers", [])).get(b"authorization")
        if self.allowed(header):
            await self.app(scope, receive, send)
            return
        body = b"Authentication required.\n"
        await send({
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"www-authenticate", f'Basic realm="{self.realm}", charset="UTF-8"'.encode()),
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                *SECURITY_HEADERS,
            ],
        })
        await send({"type": "http.response.body", "body": body})
