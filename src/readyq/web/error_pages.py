"""How the dashboard answers a failure: which exception is which status, each answered
as an error page, or as JSON under ``/api/``."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from readyq.errors import (
    AdminError,
    InvalidFilter,
    InvalidPause,
    InvalidSchedule,
    JobNotFound,
    ScheduleNotFound,
)
from readyq.untrusted import one_line
from readyq.web.dashboard import Dashboard, Forbidden

log = logging.getLogger("readyq.web")

Handler = Callable[[Request, Exception], Awaitable[Response]]


def exception_handlers(d: Dashboard) -> dict[type[Exception], Handler]:
    """The app's exception handlers, answering through ``d``'s error page."""

    async def on_forbidden(request: Request, exc: Exception) -> Response:
        return d.error_page(request, 403, str(exc))

    async def on_bad_filter(request: Request, exc: Exception) -> Response:
        return d.error_page(request, 400, str(exc))

    async def on_not_found(request: Request, exc: Exception) -> Response:
        return d.error_page(request, 404, str(exc).strip("'\""))

    async def on_admin_error(request: Request, exc: Exception) -> Response:
        return d.error_page(request, 409, str(exc))

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        messages = {404: "no such page", 405: "that method is not allowed here"}
        return d.error_page(request, exc.status_code,
                            messages.get(exc.status_code, exc.detail), exc.headers)

    async def on_error(request: Request, exc: Exception) -> Response:
        log.exception("dashboard error on %s", one_line(request.url.path))
        return d.error_page(request, 500, "the dashboard hit an error; the server's log has it")

    return {
        Forbidden: on_forbidden,
        InvalidFilter: on_bad_filter,
        InvalidPause: on_bad_filter,
        InvalidSchedule: on_bad_filter,
        JobNotFound: on_not_found,
        ScheduleNotFound: on_not_found,
        AdminError: on_admin_error,
        HTTPException: on_http,
        Exception: on_error,
    }
