"""The state behind one dashboard app and what every route asks of it: whether a request
may do what it asks, a page rendered, a queue call run off the event loop, an error
answered as a page or as JSON."""

from __future__ import annotations

import inspect
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from readyq.queue import Queue
from readyq.store import Store
from readyq.web.live import Changes
from readyq.web.security import (
    CSRF_COOKIE,
    CSRF_FIELD,
    CSRF_HEADER,
    Csrf,
    origin_allowed,
)
from readyq.web.templating import template_environment

Authorize = Callable[[Request, str], "bool | Awaitable[bool]"]


class Forbidden(Exception):
    """The request may not do what it asks (read-only mode, the authorize hook, CSRF)."""


class Dashboard:
    """The state behind one dashboard app: the queue, its options, the templates."""

    def __init__(
        self,
        queue: Any,
        *,
        read_only: bool,
        authorize: Authorize | None,
        cap: int | None,
        secret: bytes | None,
        title: str,
        poll_seconds: float,
    ) -> None:
        self.queue = queue
        # An AsyncQueue's calls run in a greenlet on the event loop; a Queue's in a thread.
        self.aqueue = None if isinstance(queue, Queue) else queue
        self.sync: Queue = queue if isinstance(queue, Queue) else queue.queue
        self.read_only = read_only
        self.authorize_hook = authorize
        self.cap = cap
        self.csrf = Csrf(secret or secrets.token_bytes(32))
        self.title = title
        self.poll_seconds = poll_seconds
        self.changes = Changes(self.sync.store, self.call)
        self.env = template_environment()

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a blocking call of the queue (or its store) off the event loop."""
        if self.aqueue is not None:
            return await self.aqueue.run(fn, *args, **kwargs)
        return await run_in_threadpool(fn, *args, **kwargs)

    # -- requests ---------------------------------------------------------------------

    async def allow(self, request: Request, action: str) -> None:
        """Raise Forbidden unless ``action`` is allowed: read-only mode refuses every
        action, and the authorize hook decides the rest."""
        await self.changes.start()  # the first request decides the pages' live mode
        if action != "view" and self.read_only:
            raise Forbidden("this dashboard is read-only")
        if self.authorize_hook is not None:
            verdict = self.authorize_hook(request, action)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if not verdict:
                raise Forbidden(f"not allowed to {action}")

    async def check_action(self, request: Request, action: str) -> Any:
        """The form of an action request, once allowed and its CSRF token checked."""
        await self.allow(request, action)
        if not origin_allowed(
            request.headers.get("origin"), request.headers.get("host"), request.url.scheme
        ):
            raise Forbidden("the request comes from another origin")
        form = await request.form()
        token = request.headers.get(CSRF_HEADER) or form.get(CSRF_FIELD)
        if not self.csrf.check(request.cookies.get(CSRF_COOKIE), token if isinstance(
            token, str) else None):
            raise Forbidden("the CSRF token is missing or wrong: reload the page and retry")
        return form

    def base(self, request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/")

    def cookie_of(self, request: Request) -> tuple[str, bool]:
        """The request's CSRF cookie, or a new one (and whether it is new)."""
        cookie = request.cookies.get(CSRF_COOKIE)
        if cookie and len(cookie) <= 200:
            return cookie, False
        return Csrf.new_cookie(), True

    def set_cookie(self, request: Request, response: Response, cookie: str) -> None:
        response.set_cookie(
            CSRF_COOKIE, cookie, httponly=True, samesite="strict",
            secure=request.url.scheme == "https", path=self.base(request) or "/",
        )

    def render(
        self, request: Request, template: str, status_code: int = 200, **context: Any
    ) -> HTMLResponse:
        cookie, new = self.cookie_of(request)
        base = self.base(request)
        page = self.env.get_template(template).render(
            request=request,
            base=base,
            title=self.title,
            read_only=self.read_only,
            csrf=self.csrf.token(cookie),
            live_mode="notify" if self.changes.listening else "poll",
            poll_seconds=self.poll_seconds,
            u=lambda path: base + path,
            **context,
        )
        response = HTMLResponse(page, status_code=status_code)
        if new:
            self.set_cookie(request, response, cookie)
        return response

    def error_page(
        self, request: Request, status: int, message: str,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        response: Response
        if request.url.path.startswith(self.base(request) + "/api/"):
            response = JSONResponse({"error": message, "status": status}, status_code=status)
        else:
            response = self.render(request, "error.html", status_code=status, status=status,
                                   message=message, page_name="error")
        # An authorize hook's HTTPException says how to log in (WWW-Authenticate).
        response.headers.update(headers or {})
        return response


@dataclass(frozen=True)
class DashboardContext:
    """What each group of routes is built from, made once per app: the dashboard (its
    options, checks, templates and calls off the event loop), the queue it shows and
    that queue's store."""

    dashboard: Dashboard
    queue: Queue
    store: Store

    @classmethod
    def of(cls, dashboard: Dashboard) -> DashboardContext:
        return cls(dashboard, dashboard.sync, dashboard.sync.store)
