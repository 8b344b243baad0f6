"""A job's graph (``/jobs/{id}/graph``) and its JSON: the job's family drawn around it,
what cannot progress on its own set apart."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from readyq import admin
from readyq.errors import InvalidFilter
from readyq.web.dashboard import DashboardContext
from readyq.web.job_paths import job_id_of

# The graph page draws this many jobs at first, and at most MAX_GRAPH_NODES when widened;
# a larger graph is counted (up to GRAPH_COUNT_LIMIT) and says how much is hidden.
GRAPH_NODES = 200
MAX_GRAPH_NODES = admin.MAX_DAG_NODES
GRAPH_COUNT_LIMIT = 20_000
# An empty container counts as stuck in the graph after this long, as in the overview.
STUCK_EMPTY_AFTER = 60.0


def routes(context: DashboardContext) -> list[Route]:
    d, store = context.dashboard, context.store

    async def graph_data(job_id: int, params: Any) -> dict[str, Any]:
        text = params.get("max_nodes") or str(GRAPH_NODES)
        try:
            limit = int(text)
        except ValueError:
            raise InvalidFilter("max_nodes must be an integer") from None
        if not 1 <= limit <= MAX_GRAPH_NODES:
            raise InvalidFilter(f"max_nodes must be from 1 to {MAX_GRAPH_NODES}")
        g = await d.call(store.graph, job_id, max_nodes=limit)
        total = len(g.nodes)
        if g.truncated:
            total = await d.call(store.graph_size, job_id, limit=GRAPH_COUNT_LIMIT)
        # What in view cannot progress on its own, drawn apart from what is under way.
        stuck = await d.call(store.stuck, empty_after=STUCK_EMPTY_AFTER, limit=1000)
        return {"graph": g, "limit": limit, "total": total,
                "total_is_lower_bound": total >= GRAPH_COUNT_LIMIT,
                "stuck": sorted(s.id for s in stuck if s.id in g.nodes)}

    async def graph_page(request: Request) -> Response:
        await d.allow(request, "view")
        job_id = job_id_of(request)
        data = await graph_data(job_id, request.query_params)
        root = data["graph"].nodes[job_id]
        return d.render(request, "graph.html", page_name="jobs", root=root,
                        wider=min(MAX_GRAPH_NODES, data["limit"] * 2), max_graph=MAX_GRAPH_NODES,
                        **data)

    async def api_graph(request: Request) -> Response:
        await d.allow(request, "view")
        data = await graph_data(job_id_of(request), request.query_params)
        g = data["graph"]
        return JSONResponse({
            **g.to_json(), "limit": data["limit"], "shown": len(g.nodes),
            "total": data["total"], "hidden": data["total"] - len(g.nodes),
            "total_is_lower_bound": data["total_is_lower_bound"], "stuck": data["stuck"],
        })

    return [
        Route("/jobs/{job_id:readyq_job_id}/graph", graph_page, name="graph"),
        Route("/api/jobs/{job_id:readyq_job_id}/graph", api_graph),
    ]
