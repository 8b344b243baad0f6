"""readyq's web dashboard (``pip install 'readyq[web]'``): the overview, the jobs with
their filters and actions, each job, the dependency graph and the workers, with a JSON
API under ``/api/`` for scripts.

Mount it in an ASGI app, or run it with ``readyq dashboard``::

    from starlette.applications import Starlette
    from starlette.routing import Mount
    import readyq
    from readyq.web import create_app

    queue = readyq.Queue("postgresql+psycopg://app@db/app")
    app = Starlette(routes=[Mount("/jobs", app=create_app(queue, read_only=True))])

See docs/dashboard.md for the routes, the security model and live updates.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from readyq.errors import ConfigurationError

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request

__all__ = ["create_app"]


def create_app(
    queue: Any,
    *,
    read_only: bool = False,
    authorize: Callable[[Request, str], bool | Awaitable[bool]] | None = None,
    cap: int | None = None,
    secret: bytes | str | None = None,
    title: str = "readyq",
    poll_seconds: float = 5.0,
    allowed_hosts: Iterable[str] = (),
) -> Starlette:
    """The dashboard of ``queue`` (a :class:`readyq.Queue` or :class:`readyq.AsyncQueue`)
    as a Starlette (ASGI) application.

    Args:
        read_only: refuse every action (retry, cancel) with 403 and show no buttons.
        authorize: ``authorize(request, action) -> bool`` (or an awaitable of one), asked
            before every request with ``action`` ``"view"``, ``"retry"`` or ``"cancel"``;
            False answers 403. This is where a mounted app applies its own users and
            roles (the request carries its session or ``request.user``).
        cap: the workers' global cap, shown against the jobs in flight (the cap is a
            worker setting; the database does not know it).
        secret: the key that signs CSRF tokens (random per process by default: give one
            when several processes serve the dashboard).
        title: shown in the header and the window title.
        poll_seconds: how often an open page refreshes its live part (on PostgreSQL
            also at once when a notification says jobs became ready).
        allowed_hosts: the host names the dashboard is served under, besides
            ``localhost``, ``127.0.0.1`` and ``[::1]``: a request whose ``Host`` header
            names another host is answered 400, so that a site whose name its DNS points
            at this server (DNS rebinding) cannot use the dashboard from the browser.
            ``*.example.com`` takes every name under example.com; ``*`` takes any host,
            for an app whose server or proxy checks the Host header itself.

    Raises ConfigurationError when the ``web`` extra is not installed, or for an allowed
    host that is not a host name (a port, a URL).
    """
    try:
        from readyq.web.app import create_app as build
    except ImportError as exc:  # starlette or jinja2 missing
        raise ConfigurationError(
            f"the dashboard needs the web extra: pip install 'readyq[web]' ({exc})"
        ) from None
    return build(
        queue, read_only=read_only, authorize=authorize, cap=cap, secret=secret, title=title,
        poll_seconds=poll_seconds, allowed_hosts=allowed_hosts,
    )
