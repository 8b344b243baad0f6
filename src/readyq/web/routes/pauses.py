"""Pausing and resuming a group or a type: the overview's and the job listing's buttons
(``/pauses/{action}``) and the JSON API (``/api/pauses``)."""

from __future__ import annotations

import urllib.parse
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from readyq import admin
from readyq.errors import InvalidPause
from readyq.reports import pause_json
from readyq.web.dashboard import DashboardContext
from readyq.web.pause_resume import pause_resume_routes


def routes(context: DashboardContext) -> list[Route]:
    d, q = context.dashboard, context.queue

    async def pause_or_resume(action: str, form: Any) -> None:
        """Pause or resume the group or type the form names."""
        group = form.get("group") or None
        type_ = form.get("type") or None
        if action == "resume":
            await d.call(q.resume, group=group, type=type_)
            return
        text = form.get("until") or ""
        try:
            until = admin.parse_duration(text) if text else None
        except ValueError as exc:
            raise InvalidPause(f"until: {exc}") from None
        await d.call(q.pause, group=group, type=type_, until=until)

    def back(request: Request, form: Any) -> str:
        if form.get("back") == "jobs":
            # Back to the listing the buttons were on: its group and type filter.
            back = {k: v for k in ("group", "type") if isinstance(v := form.get(k), str) and v}
            return f"{d.base(request)}/jobs?{urllib.parse.urlencode(back)}"
        return f"{d.base(request)}/"

    return pause_resume_routes(d, "pauses", name="pause_action", act=pause_or_resume,
                               listed=q.pauses, to_json=pause_json, back=back)
