"""One job's page (``/jobs/{id}``), its retry and cancel buttons, and their JSON twins."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from readyq import admin
from readyq.errors import NotCancellable, NotRetryable
from readyq.reports import INSTANTS
from readyq.web.dashboard import DashboardContext
from readyq.web.job_paths import job_id_of

# What the job page says after an action's redirect (``?did=``).
DID = {
    "retried": "Retried: the job is back in the queue, with what failed because of it.",
    "cancelled": "Cancel done: a pending job ends at once; a running one is asked to stop.",
}


def routes(context: DashboardContext) -> list[Route]:
    d, q, store = context.dashboard, context.queue, context.store

    async def job_page(request: Request) -> Response:
        await d.allow(request, "view")
        job_id = job_id_of(request)
        detail = await d.call(admin.show, q, job_id)
        did = request.query_params.get("did")
        return d.render(request, "job.html", page_name="jobs", detail=detail, f=detail.fields,
                        INSTANTS=INSTANTS, notice=DID.get(did or ""), problem=None)

    async def job_action(request: Request) -> Response:
        action = request.path_params["action"]
        if action not in ("retry", "cancel"):
            raise HTTPException(404)
        await d.check_action(request, action)
        job_id = job_id_of(request)
        try:
            if action == "retry":
                await d.call(admin.retry, q, job_id)
            else:
                await d.call(admin.cancel, q, job_id, by="dashboard")
        except (NotRetryable, NotCancellable) as exc:
            detail = await d.call(store.job_detail, job_id)
            return d.render(request, "job.html", status_code=409, page_name="jobs",
                            detail=detail, f=detail.fields, INSTANTS=INSTANTS, notice=None,
                            problem=str(exc))
        did = "retried" if action == "retry" else "cancelled"
        return RedirectResponse(f"{d.base(request)}/jobs/{job_id}?did={did}", status_code=303)

    async def api_job(request: Request) -> Response:
        await d.allow(request, "view")
        detail = await d.call(store.job_detail, job_id_of(request))
        return JSONResponse(detail.to_json())

    async def api_job_action(request: Request) -> Response:
        action = request.path_params["action"]
        if action not in ("retry", "cancel"):
            raise HTTPException(404)
        await d.check_action(request, action)
        job_id = job_id_of(request)
        if action == "retry":
            result = await d.call(admin.retry, q, job_id)
        else:
            result = await d.call(admin.cancel, q, job_id, by="dashboard")
        return JSONResponse(result.to_json())

    return [
        Route("/jobs/{job_id:readyq_job_id}", job_page, name="job"),
        Route("/jobs/{job_id:readyq_job_id}/{action}", job_action, methods=["POST"],
              name="job_action"),
        Route("/api/jobs/{job_id:readyq_job_id}", api_job),
        Route("/api/jobs/{job_id:readyq_job_id}/{action}", api_job_action, methods=["POST"]),
    ]
