"""Pausing and resuming a schedule: the overview's buttons (``/schedules/{action}``) and
the JSON API (``/api/schedules``)."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from readyq.errors import InvalidSchedule
from readyq.reports import schedule_json
from readyq.web.dashboard import DashboardContext


def routes(context: DashboardContext) -> list[Route]:
    d, q = context.dashboard, context.queue

    async def schedule_action(request: Request) -> str:
        """Pause or resume the schedule the request's form names; the action done."""
        action = request.path_params["action"]
        if action not in ("pause", "resume"):
            raise HTTPException(404)
        form = await d.check_action(request, action)
        name = form.get("name")
        if not isinstance(name, str):
            raise InvalidSchedule("the form names no schedule")
        if action == "resume":
            await d.call(q.resume_schedule, name)
            return "resumed"
        await d.call(q.pause_schedule, name)
        return "paused"

    async def schedule_page_action(request: Request) -> Response:
        await schedule_action(request)
        return RedirectResponse(f"{d.base(request)}/", status_code=303)

    async def api_schedules(request: Request) -> Response:
        await d.allow(request, "view")
        schedules = await d.call(q.schedules)
        return JSONResponse({"schedules": [schedule_json(s) for s in schedules]})

    async def api_schedule_action(request: Request) -> Response:
        did = await schedule_action(request)
        schedules = await d.call(q.schedules)
        return JSONResponse({"did": did, "schedules": [schedule_json(s) for s in schedules]})

    return [
        Route("/schedules/{action}", schedule_page_action, methods=["POST"],
              name="schedule_action"),
        Route("/api/schedules", api_schedules),
        Route("/api/schedules/{action}", api_schedule_action, methods=["POST"]),
    ]
