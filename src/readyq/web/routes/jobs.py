"""The job listing (``/jobs``), its bulk retry and cancel (``/jobs/actions``, confirmed
on a page before they run), and their JSON twins."""

from __future__ import annotations

import urllib.parse
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from readyq import admin
from readyq.errors import InvalidFilter
from readyq.listing import CANCEL_STATES, RETRY_STATES, JobFilter, check_order
from readyq.model import JobState
from readyq.reports import pauses_of
from readyq.web.dashboard import DashboardContext
from readyq.web.job_filters import (
    Params,
    filter_from,
    filter_query,
    job_id_param,
    page_limit,
)


def routes(context: DashboardContext) -> list[Route]:
    d, q = context.dashboard, context.queue

    async def jobs_data(params: Any) -> dict[str, Any]:
        flt = filter_from(params)
        order = check_order(params.get("order") or "newest")
        limit = page_limit(params)
        cursor = params.get("cursor") or None
        page = await d.call(q.jobs, flt, order=order, limit=limit, cursor=cursor)
        pauses = await d.call(q.pauses)
        paused_ids = {
            j.id for j in page.jobs
            if j.state is JobState.READY and pauses_of(pauses, j.group, j.type)
        }
        # The pause that the filter's group and type name exactly, if any stands.
        named = [p for p in pauses if (p.group, p.type) == (flt.group, flt.type)]
        return {"page": page, "filter": flt, "order": order, "limit": limit,
                "paused_ids": paused_ids, "filter_pause": named[0] if named else None}

    async def jobs_page(request: Request) -> Response:
        await d.allow(request, "view")
        params = request.query_params
        data = await jobs_data(params)
        return d.render(
            request, "jobs.html", page_name="jobs", params=params,
            query=lambda **kw: filter_query(params, **kw), **data,
        )

    async def bulk_action(request: Request) -> Response:
        form = await request.form()
        choice = str(form.get("do") or "")
        action, _, scope = choice.partition(":")
        if action not in ("retry", "cancel") or scope not in ("selected", "matching"):
            raise InvalidFilter("choose retry or cancel, of the selected jobs or of all that match")
        await d.check_action(request, action)
        filter_text = str(form.get("filter") or "")
        params = Params(urllib.parse.parse_qs(filter_text))
        if scope == "selected":
            ids = [job_id_param(str(x), "id") for x in form.getlist("id")]
            if not ids:
                raise InvalidFilter("no job is selected: tick the rows to act on")
            states = RETRY_STATES if action == "retry" else CANCEL_STATES
            flt = JobFilter(id=tuple(ids), state=states)
        else:
            flt = filter_from(params)
        run = admin.retry_many if action == "retry" else admin.cancel_many
        confirmed = form.get("confirm") == "yes"
        by = {} if action == "retry" else {"by": "dashboard"}
        result = await d.call(run, q, flt, dry_run=not confirmed, **by)
        return d.render(
            request, "confirm.html", page_name="jobs", result=result, action=action,
            scope=scope, confirmed=confirmed, filter_text=filter_text,
            ids=[str(x) for x in form.getlist("id")], choice=choice,
            back=f"{d.base(request)}/jobs" + (f"?{filter_text}" if filter_text else ""),
        )

    async def api_jobs(request: Request) -> Response:
        await d.allow(request, "view")
        data = await jobs_data(request.query_params)
        return JSONResponse(data["page"].to_json())

    async def api_bulk(request: Request) -> Response:
        action = request.path_params["action"]
        if action not in ("retry", "cancel"):
            raise HTTPException(404)
        form = await d.check_action(request, action)
        params = Params({k: [str(v) for v in form.getlist(k)] for k in form})
        for k, v in request.query_params.multi_items():
            params.add(k, v)
        flt = filter_from(params)
        dry_run = params.get("dry_run") in ("1", "true", "yes")
        run = admin.retry_many if action == "retry" else admin.cancel_many
        by = {} if action == "retry" else {"by": "dashboard"}
        result = await d.call(run, q, flt, dry_run=dry_run, **by)
        return JSONResponse(result.to_json())

    return [
        Route("/jobs", jobs_page, name="jobs"),
        Route("/jobs/actions", bulk_action, methods=["POST"], name="bulk"),
        Route("/api/jobs", api_jobs),
        Route("/api/jobs/{action}", api_bulk, methods=["POST"]),
    ]
