"""The workers page (``/workers``) and its JSON."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from readyq.web.dashboard import DashboardContext


def routes(context: DashboardContext) -> list[Route]:
    d, store = context.dashboard, context.store

    async def workers_page(request: Request) -> Response:
        await d.allow(request, "view")
        workers = await d.call(store.workers)
        return d.render(request, "workers.html", page_name="workers", workers=workers)

    async def api_workers(request: Request) -> Response:
        await d.allow(request, "view")
        workers = await d.call(store.workers)
        return JSONResponse({"workers": [w.to_json() for w in workers]})

    return [
        Route("/workers", workers_page, name="workers"),
        Route("/api/workers", api_workers),
    ]
