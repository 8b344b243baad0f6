"""Pausing and resuming a schedule: the overview's buttons (``/schedules/{action}``) and
the JSON API (``/api/schedules``)."""

from __future__ import annotations

from typing import Any

from starlette.routing import Route

from readyq.errors import InvalidSchedule
from readyq.reports import schedule_json
from readyq.web.dashboard import DashboardContext
from readyq.web.pause_resume import pause_resume_routes


def routes(context: DashboardContext) -> list[Route]:
    d, q = context.dashboard, context.queue

    async def pause_or_resume(action: str, form: Any) -> None:
        """Pause or resume the schedule the form names."""
        name = form.get("name")
        if not isinstance(name, str):
            raise InvalidSchedule("the form names no schedule")
        if action == "resume":
            await d.call(q.resume_schedule, name)
            return
        await d.call(q.pause_schedule, name)

    return pause_resume_routes(d, "schedules", name="schedule_action", act=pause_or_resume,
                               listed=q.schedules, to_json=schedule_json)
