"""Pausing and resuming a group or a type: the overview's and the job listing's buttons
(``/pauses/{action}``) and the JSON API (``/api/pauses``)."""

from __future__ import annotations

import urllib.parse

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from readyq import admin
from readyq.errors import InvalidPause
from readyq.reports import pause_json
from readyq.web.dashboard import DashboardContext


def routes(context: DashboardContext) -> list[Route]:
    d, q = context.dashboard, context.queue

    async def pause_action(request: Request) -> str:
        """Pause or resume as the request's form says; the action done."""
        action = request.path_params["action"]
        if action not in ("pause", "resume"):
            raise HTTPException(404)
        form = await d.check_action(request, action)
        group = form.get("group") or None
        type_ = form.get("type") or None
        if action == "resume":
            await d.call(q.resume, group=group, type=type_)
            return "resumed"
        text = form.get("until") or ""
        try:
            until = admin.parse_duration(text) if text else None
        except ValueError as exc:
            raise InvalidPause(f"until: {exc}") from None
        await d.call(q.pause, group=group, type=type_, until=until)
        return "paused"

    async def pause_page_action(request: Request) -> Response:
        await pause_action(request)
        form = await request.form()
        if form.get("back") == "jobs":
            # Back to the listing the buttons were on: its group and type filter.
            back = {k: v for k in ("group", "type") if isinstance(v := form.get(k), str) and v}
            return RedirectResponse(
                f"{d.base(request)}/jobs?{urllib.parse.urlencode(back)}", status_code=303
            )
        return RedirectResponse(f"{d.base(request)}/", status_code=303)

    async def api_pauses(request: Request) -> Response:
        await d.allow(request, "view")
        pauses = await d.call(q.pauses)
        return JSONResponse({"pauses": [pause_json(p) for p in pauses]})

    async def api_pause_action(request: Request) -> Response:
        did = await pause_action(request)
        pauses = await d.call(q.pauses)
        return JSONResponse({"did": did, "pauses": [pause_json(p) for p in pauses]})

    return [
        Route("/pauses/{action}", pause_page_action, methods=["POST"], name="pause_action"),
        Route("/api/pauses", api_pauses),
        Route("/api/pauses/{action}", api_pause_action, methods=["POST"]),
    ]
