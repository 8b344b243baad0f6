"""The CSRF token a script or an API client acts with (``/api/csrf``), with the names
of the cookie, header and form field it goes in."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from readyq.web.dashboard import DashboardContext
from readyq.web.security import CSRF_COOKIE, CSRF_FIELD, CSRF_HEADER


def routes(context: DashboardContext) -> list[Route]:
    d = context.dashboard

    async def api_csrf(request: Request) -> Response:
        await d.allow(request, "view")
        cookie, new = d.cookie_of(request)
        response = JSONResponse({"token": d.csrf.token(cookie), "cookie": CSRF_COOKIE,
                                 "header": CSRF_HEADER, "field": CSRF_FIELD})
        if new:
            d.set_cookie(request, response, cookie)
        return response

    return [
        Route("/api/csrf", api_csrf),
    ]
