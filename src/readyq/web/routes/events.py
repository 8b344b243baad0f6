"""The live event stream (``/api/events``, server-sent events) that tells an open page
when to refresh; see :mod:`readyq.web.live`."""

from __future__ import annotations

import asyncio
import math
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from readyq.errors import InvalidFilter
from readyq.web.dashboard import DashboardContext


def routes(context: DashboardContext) -> list[Route]:
    d = context.dashboard

    async def api_events(request: Request) -> Response:
        await d.allow(request, "view")
        await d.changes.start()
        try:
            timeout = float(request.query_params.get("timeout") or 55)
        except ValueError:
            raise InvalidFilter("timeout must be a number of seconds") from None
        if not math.isfinite(timeout):
            raise InvalidFilter("timeout must be a number of seconds")
        timeout = min(300.0, max(0.1, timeout))
        mode = "notify" if d.changes.listening else "poll"

        async def stream() -> Any:
            loop = asyncio.get_running_loop()
            end = loop.time() + timeout
            seen = d.changes.version
            yield f"retry: 3000\nevent: hello\ndata: {mode}\n\n"
            while (left := end - loop.time()) > 0:
                version = await d.changes.wait(seen, min(15.0, left))
                if version != seen:
                    seen = version
                    yield f"event: change\ndata: {version}\n\n"
                    await asyncio.sleep(min(1.0, max(0.0, end - loop.time())))
                else:
                    yield ": keep-alive\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"cache-control": "no-store"})

    return [
        Route("/api/events", api_events),
    ]
