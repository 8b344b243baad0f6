"""The overview (``/``) and its JSON (``/api/overview``): counts by state, the last
hour's chart, resources, pauses and schedules."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from readyq.reports import pause_json, resource_json, schedule_json
from readyq.web.dashboard import DashboardContext

# The overview's chart: the last hour in 30 buckets.
SERIES_WINDOW = 3600.0
SERIES_BUCKETS = 30


def routes(context: DashboardContext) -> list[Route]:
    d, q, store = context.dashboard, context.queue, context.store

    async def overview_data() -> dict[str, Any]:
        ov = await d.call(store.overview, window=SERIES_WINDOW, buckets=SERIES_BUCKETS)
        resources = await d.call(q.resource_stats)
        pauses = await d.call(q.pauses)
        schedules = await d.call(q.schedules)
        return {"ov": ov, "cap": d.cap, "resources": list(resources.values()),
                "pauses": pauses, "schedules": schedules}

    async def overview_page(request: Request) -> Response:
        await d.allow(request, "view")
        return d.render(request, "overview.html", page_name="overview", **await overview_data())

    async def api_overview(request: Request) -> Response:
        await d.allow(request, "view")
        data = await overview_data()
        return JSONResponse({
            **data["ov"].to_json(), "cap": data["cap"],
            "resources": [resource_json(r) for r in data["resources"]],
            "pauses": [pause_json(p) for p in data["pauses"]],
            "schedules": [schedule_json(s) for s in data["schedules"]],
        })

    return [
        Route("/", overview_page, name="overview"),
        Route("/api/overview", api_overview),
    ]
