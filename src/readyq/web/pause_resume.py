"""The routes that pause and resume something, built once for each kind (a group or a
type, a schedule): the page's buttons (``/{kind}/{action}``), which redirect, the
JSON list (``/api/{kind}``) and the JSON action (``/api/{kind}/{action}``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from readyq.web.dashboard import Dashboard

# Each action a path may name, and the word for it done.
DONE = {"pause": "paused", "resume": "resumed"}

# Pauses or resumes (the action) what the action request's form names.
Act = Callable[[str, Any], Awaitable[None]]
# Where a page's button returns to, from the request and its form.
Back = Callable[[Request, Any], str]


def pause_resume_routes(
    d: Dashboard,
    kind: str,
    *,
    name: str,
    act: Act,
    listed: Callable[[], Any],
    to_json: Callable[[Any], dict[str, Any]],
    back: Back | None = None,
) -> list[Route]:
    """The three routes of ``kind`` (``pauses``, ``schedules``): ``act`` does the action,
    ``listed`` is the queue call that lists what stands, ``to_json`` one of its items as
    JSON; a page's button returns to ``back``, or to the overview. ``name`` names the
    page's route and, after ``api_``, the JSON action's."""

    async def action(request: Request) -> str:
        """The action the path names, once allowed and done; the word for it done."""
        action = request.path_params["action"]
        if action not in DONE:
            raise HTTPException(404)
        form = await d.check_action(request, action)
        await act(action, form)
        return DONE[action]

    async def standing() -> list[dict[str, Any]]:
        return [to_json(item) for item in await d.call(listed)]

    async def page_action(request: Request) -> Response:
        await action(request)
        target = f"{d.base(request)}/" if back is None else back(request, await request.form())
        return RedirectResponse(target, status_code=303)

    async def api_list(request: Request) -> Response:
        await d.allow(request, "view")
        return JSONResponse({kind: await standing()})

    async def api_action(request: Request) -> Response:
        did = await action(request)
        return JSONResponse({"did": did, kind: await standing()})

    return [
        Route(f"/{kind}/{{action}}", page_action, methods=["POST"], name=name),
        Route(f"/api/{kind}", api_list, name=f"api_{kind}"),
        Route(f"/api/{kind}/{{action}}", api_action, methods=["POST"], name=f"api_{name}"),
    ]
