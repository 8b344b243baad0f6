"""The dashboard's defences, each a small piece that the app composes.

* Every response carries a Content-Security-Policy that allows the package's own
  scripts, styles and workers only (no inline script, no inline style, nothing from
  another origin), and headers that keep it out of frames and stop content sniffing.
* Every action is a POST that carries a CSRF token: a signed double submit. A random
  value lives in a cookie (``SameSite=Strict``, ``HttpOnly``); the token sent with the
  form (or the ``X-CSRF-Token`` header) is that value signed with the app's secret. A
  request from another site can neither read the cookie nor forge the signature. A
  request whose ``Origin`` header names another origin is refused as well.
* Requests must name, in their ``Host`` header, a host the dashboard is served under
  (the loopback names and the names it is configured with). Otherwise a page of another
  site whose name its DNS points at 127.0.0.1 (DNS rebinding) is of the same origin as
  the dashboard in the browser's eyes, and gets past the Origin and CSRF checks.
* The standalone server checks HTTP basic credentials (from the environment).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import html
import ipaddress
import json
import re
import secrets
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
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


# The names a dashboard answers under whatever it is configured with: a page of another
# site cannot make a browser send them.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
_LABEL = r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?"
_HOST_NAME = re.compile(rf"(\*\.)?{_LABEL}(\.{_LABEL})*")


def host_pattern(value: object) -> str:
    """A configured host name in the form requests are compared with: lower case, an IPv6
    address in brackets, ``*.example.com`` for every name under example.com, ``*`` for
    any host (for an app whose server or proxy checks the Host header itself). Raises
    ValueError for anything else (a port, a URL, an empty string)."""
    if not isinstance(value, str):
        raise ValueError(f"an allowed host must be a host name, not {value!r}")
    text = value.strip().lower()
    if text == "*":
        return text
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        address = None
    if address is not None:
        return f"[{address}]" if address.version == 6 else str(address)
    if text.endswith("."):
        text = text[:-1]
    if len(text) > 253 or not _HOST_NAME.fullmatch(text):
        raise ValueError(
            f"an allowed host must be a host name or address without scheme, port or path "
            f"(example.com, *.example.com, 10.0.0.5, [::1], or *), not {value!r}"
        )
    return text


def host_of(header: str) -> str:
    """The host of a ``Host`` header, without its port, in the form of
    :func:`host_pattern` (an empty string when the header is not a host)."""
    text = header.strip().lower()
    if text.startswith("["):
        end = text.find("]")
        return text[: end + 1] if end > 0 else ""
    name = text.rsplit(":", 1)[0] if text.count(":") == 1 else text
    try:
        return host_pattern(name)
    except ValueError:
        return ""


def host_allowed(header: str | None, allowed: Iterable[str]) -> bool:
    """Whether a request with ``Host: header`` is for a host of ``allowed`` (patterns of
    :func:`host_pattern`); a request without the header is refused, as no browser sends
    one."""
    if "*" in allowed:
        return True
    host = host_of(header or "")
    if not host:
        return False
    for pattern in allowed:
        if host == pattern or (
            pattern.startswith("*.") and host.endswith(pattern[1:])
        ):
            return True
    return False


class TrustedHosts:
    """ASGI middleware: answer 400 to a request whose ``Host`` is not one of ``allowed``
    (patterns of :func:`host_pattern`), as JSON under ``/api/`` and as a page elsewhere;
    the host is shown escaped."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str]) -> None:
        self.app = app
        self.allowed = frozenset(allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        raw = headers.get(b"host")
        header = raw.decode("latin-1") if raw is not None else None
        if host_allowed(header, self.allowed):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        shown = (header or "")[:100]
        message = (
            f"this dashboard is not served under the host {shown!r}: give its name to "
            "create_app(allowed_hosts=...) or readyq dashboard --allowed-host"
        )
        root = str(scope.get("root_path", "")).rstrip("/")
        path = str(scope.get("path", ""))
        if path.startswith(root):  # Starlette keeps the mount's prefix in the path
            path = path[len(root):]
        if path.startswith("/api/"):
            body = json.dumps({"error": message, "status": 400}).encode()
            kind = b"application/json"
        else:
            body = (
                "<!doctype html><meta charset=utf-8><title>400 Bad Request</title>"
                f"<h1>400 Bad Request</h1><p>{html.escape(message)}</p>\n"
            ).encode()
            kind = b"text/html; charset=utf-8"
        await send({
            "type": "http.response.start",
            "status": 400,
            "headers": [(b"content-type", kind), (b"content-length", str(len(body)).encode())],
        })
        await send({"type": "http.response.body", "body": body})
