"""The dashboard's Starlette application: pages, the JSON API and the actions.

Pages are rendered on the server from Jinja2 templates with autoescaping on; every value
from the database (args, results, errors, types, groups, keys, worker ids) is user data
and reaches the page escaped. Each page's live region is refreshed in place by htmx
when the page's script says so (see :mod:`readyq.web.live`). Every read and write goes
through the queue's store and :mod:`readyq.admin`, off the event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import math
import os
import secrets
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from readyq import admin
from readyq.errors import (
    AdminError,
    ConfigurationError,
    InvalidFilter,
    InvalidPause,
    InvalidSchedule,
    JobNotFound,
    NotCancellable,
    NotRetryable,
    ScheduleNotFound,
)
from readyq.listing import (
    CANCEL_STATES,
    MAX_LIMIT,
    RETRY_STATES,
    STATES,
    JobFilter,
    check_limit,
    check_order,
)
from readyq.model import IN_FLIGHT_STATES, JobState
from readyq.queue import Queue
from readyq.reports import (
    INSTANTS,
    iso,
    number_text,
    pause_json,
    pauses_of,
    progress_text,
    resource_json,
    schedule_json,
)
from readyq.schema import MAX_ID
from readyq.untrusted import one_line
from readyq.web.live import Changes
from readyq.web.mounting import RootPathPaths
from readyq.web.security import (
    CSRF_COOKIE,
    CSRF_FIELD,
    CSRF_HEADER,
    LOOPBACK_HOSTS,
    Csrf,
    SecurityHeaders,
    TrustedHosts,
    host_pattern,
    origin_allowed,
)

log = logging.getLogger("readyq.web")

HERE = Path(__file__).resolve().parent
# The graph page draws this many jobs at first, and at most MAX_GRAPH_NODES when widened;
# a larger graph is counted (up to GRAPH_COUNT_LIMIT) and says how much is hidden.
GRAPH_NODES = 200
MAX_GRAPH_NODES = admin.MAX_DAG_NODES
GRAPH_COUNT_LIMIT = 20_000
# An empty container counts as stuck in the graph after this long, as in the overview.
STUCK_EMPTY_AFTER = 60.0
# The overview's chart: the last hour in 30 buckets.
SERIES_WINDOW = 3600.0
SERIES_BUCKETS = 30
POLL_SECONDS = 5.0
ACTIONS = ("view", "retry", "cancel")

Authorize = Callable[[Request, str], "bool | Awaitable[bool]"]


class Forbidden(Exception):
    """The request may not do what it asks (read-only mode, the authorize hook, CSRF)."""


def _fmt_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


# The saved state a job page shows, in characters of its indented JSON; the API has it all.
STATE_CHARS = 2000


def _short_pretty(value: Any, limit: int = STATE_CHARS) -> str:
    """``value`` as indented JSON, cut to ``limit`` characters with how long it was."""
    text = _fmt_json(value)
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… ({len(text):,} characters; the JSON API has all of it)"


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = max(0.0, seconds)
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m {int(s % 60):02d}s"
    if s < 86400:
        return f"{int(s // 3600)}h {int(s % 3600 // 60):02d}m"
    return f"{int(s // 86400)}d {int(s % 86400 // 3600):02d}h"


def _epoch(value: datetime | float | None) -> float | None:
    if value is None:
        return None
    return value.timestamp() if isinstance(value, datetime) else float(value)


def _time_bound(text: str, name: str) -> datetime | timedelta:
    """A ``since``/``until`` value: a duration ago (``1h``, ``90m``, ``3600``) or an ISO
    8601 instant (naive means UTC)."""
    try:
        return timedelta(seconds=admin.parse_duration(text))
    except ValueError:
        pass
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidFilter(
            f"{name} {text!r} is neither a duration (1h, 7d, 90m) nor an ISO 8601 time"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def _int(text: str, name: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InvalidFilter(f"{name} must be an integer, not {text[:40]!r}") from None
    if value <= 0 or value > MAX_ID:
        raise InvalidFilter(f"{name} must be a job id (a positive integer), not {value}")
    return value


FILTER_PARAMS = ("state", "type", "group", "parent", "unique_key", "id", "since", "until",
                 "time")


def filter_from(params: Any) -> JobFilter:
    """The JobFilter of a query string or form (``state`` repeated or comma-separated,
    ``type``, ``group``, ``parent``, ``unique_key``, ``id`` (repeated or comma-separated),
    ``since``/``until`` with ``time`` = created, started or finished). Empty values are
    ignored. Raises InvalidFilter."""

    def one(name: str) -> str | None:
        value = params.get(name)
        return value.strip() or None if isinstance(value, str) else None

    def many(name: str) -> list[str]:
        out: list[str] = []
        for v in params.getlist(name):
            if isinstance(v, str):
                out += [x.strip() for x in v.split(",") if x.strip()]
        return out

    time_field = one("time") or "created"
    if time_field not in ("created", "started", "finished"):
        raise InvalidFilter(f"time must be created, started or finished, not {time_field!r}")
    since, until = one("since"), one("until")
    parent = one("parent")
    bounds: dict[str, Any] = {}
    if since is not None:
        bounds[f"{time_field}_after"] = _time_bound(since, "since")
    if until is not None:
        bounds[f"{time_field}_before"] = _time_bound(until, "until")
    return JobFilter(
        state=tuple(many("state")),
        type=one("type"),
        group=one("group"),
        parent=None if parent is None else _int(parent, "parent"),
        unique_key=one("unique_key"),
        id=tuple(_int(x, "id") for x in many("id")),
        **bounds,
    )


def filter_query(params: Any, **changes: Any) -> str:
    """The query string of the listing's parameters in ``params``, with ``changes``
    (None removes a parameter)."""
    keep = [*FILTER_PARAMS, "order", "limit"]
    pairs: list[tuple[str, str]] = []
    for name in keep:
        if name in changes:
            continue
        for v in params.getlist(name) if hasattr(params, "getlist") else []:
            if isinstance(v, str) and v.strip():
                pairs.append((name, v))
    for name, value in changes.items():
        if value is None:
            continue
        for v in value if isinstance(value, (list, tuple)) else [value]:
            pairs.append((name, str(v)))
    return urllib.parse.urlencode(pairs)


class Dashboard:
    """The state behind one dashboard app: the queue, its options, the templates."""

    def __init__(
        self,
        queue: Any,
        *,
        read_only: bool,
        authorize: Authorize | None,
        cap: int | None,
        secret: bytes | None,
        title: str,
        poll_seconds: float,
    ) -> None:
        self.queue = queue
        # An AsyncQueue's calls run in a greenlet on the event loop; a Queue's in a thread.
        self.aqueue = None if isinstance(queue, Queue) else queue
        self.sync: Queue = queue if isinstance(queue, Queue) else queue.queue
        self.read_only = read_only
        self.authorize_hook = authorize
        self.cap = cap
        self.csrf = Csrf(secret or secrets.token_bytes(32))
        self.title = title
        self.poll_seconds = poll_seconds
        self.changes = Changes(self.sync.store, self.call)
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(HERE / "templates")),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.env.filters["ago"] = _ago
        self.env.filters["iso"] = iso
        self.env.filters["pretty"] = _fmt_json
        self.env.filters["short_pretty"] = _short_pretty
        self.env.filters["progress_text"] = progress_text
        self.env.filters["number"] = number_text
        self.env.globals["IN_FLIGHT"] = IN_FLIGHT_STATES
        self.env.globals["STATES"] = STATES

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a blocking call of the queue (or its store) off the event loop."""
        if self.aqueue is not None:
            return await self.aqueue.run(fn, *args, **kwargs)
        return await run_in_threadpool(fn, *args, **kwargs)

    # -- requests ---------------------------------------------------------------------

    async def allow(self, request: Request, action: str) -> None:
        """Raise Forbidden unless ``action`` is allowed: read-only mode refuses every
        action, and the authorize hook decides the rest."""
        await self.changes.start()  # the first request decides the pages' live mode
        if action != "view" and self.read_only:
            raise Forbidden("this dashboard is read-only")
        if self.authorize_hook is not None:
            verdict = self.authorize_hook(request, action)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if not verdict:
                raise Forbidden(f"not allowed to {action}")

    async def check_action(self, request: Request, action: str) -> Any:
        """The form of an action request, once allowed and its CSRF token checked."""
        await self.allow(request, action)
        if not origin_allowed(
            request.headers.get("origin"), request.headers.get("host"), request.url.scheme
        ):
            raise Forbidden("the request comes from another origin")
        form = await request.form()
        token = request.headers.get(CSRF_HEADER) or form.get(CSRF_FIELD)
        if not self.csrf.check(request.cookies.get(CSRF_COOKIE), token if isinstance(
            token, str) else None):
            raise Forbidden("the CSRF token is missing or wrong: reload the page and retry")
        return form

    def base(self, request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/")

    def cookie_of(self, request: Request) -> tuple[str, bool]:
        """The request's CSRF cookie, or a new one (and whether it is new)."""
        cookie = request.cookies.get(CSRF_COOKIE)
        if cookie and len(cookie) <= 200:
            return cookie, False
        return Csrf.new_cookie(), True

    def set_cookie(self, request: Request, response: Response, cookie: str) -> None:
        response.set_cookie(
            CSRF_COOKIE, cookie, httponly=True, samesite="strict",
            secure=request.url.scheme == "https", path=self.base(request) or "/",
        )

    def render(
        self, request: Request, template: str, status_code: int = 200, **context: Any
    ) -> HTMLResponse:
        cookie, new = self.cookie_of(request)
        base = self.base(request)
        page = self.env.get_template(template).render(
            request=request,
            base=base,
            title=self.title,
            read_only=self.read_only,
            csrf=self.csrf.token(cookie),
            live_mode="notify" if self.changes.listening else "poll",
            poll_seconds=self.poll_seconds,
            u=lambda path: base + path,
            **context,
        )
        response = HTMLResponse(page, status_code=status_code)
        if new:
            self.set_cookie(request, response, cookie)
        return response

    def error_page(
        self, request: Request, status: int, message: str,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        response: Response
        if request.url.path.startswith(self.base(request) + "/api/"):
            response = JSONResponse({"error": message, "status": status}, status_code=status)
        else:
            response = self.render(request, "error.html", status_code=status, status=status,
                                   message=message, page_name="error")
        # An authorize hook's HTTPException says how to log in (WWW-Authenticate).
        response.headers.update(headers or {})
        return response


def _page_limit(params: Any) -> int:
    text = params.get("limit") or "50"
    try:
        return check_limit(int(text))
    except ValueError:
        raise InvalidFilter(f"limit must be an integer from 1 to {MAX_LIMIT}") from None


class JobIdConvertor(Convertor[int]):
    """A job id in a path: at most 19 digits, as the largest id has. A longer number is
    no job (and Python refuses to read one of a few thousand digits): no route matches
    it, so it is a 404 rather than an error."""

    regex = "[0-9]{1,19}"

    def convert(self, value: str) -> int:
        return int(value)

    def to_string(self, value: int) -> str:
        return str(value)


register_url_convertor("readyq_job_id", JobIdConvertor())


def _job_id(request: Request) -> int:
    job_id = int(request.path_params["job_id"])
    if job_id <= 0 or job_id > MAX_ID:
        raise JobNotFound(f"no job with id {job_id}")
    return job_id


def create_app(
    queue: Any,
    *,
    read_only: bool = False,
    authorize: Authorize | None = None,
    cap: int | None = None,
    secret: bytes | str | None = None,
    title: str = "readyq",
    poll_seconds: float = POLL_SECONDS,
    allowed_hosts: Iterable[str] = (),
) -> Starlette:
    """The dashboard as an ASGI app; see :func:`readyq.web.create_app`."""
    if isinstance(allowed_hosts, str):
        allowed_hosts = [allowed_hosts]
    try:
        hosts = {*LOOPBACK_HOSTS, *(host_pattern(h) for h in allowed_hosts)}
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"allowed_hosts: {exc}") from None
    if isinstance(secret, str):
        secret = secret.encode()
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise ValueError(f"cap must be a positive int, not {cap!r}")
    if isinstance(poll_seconds, bool) or not isinstance(poll_seconds, (int, float)) or not (
        0.2 <= poll_seconds <= 3600
    ):
        raise ValueError(f"poll_seconds must be from 0.2 to 3600, not {poll_seconds!r}")
    d = Dashboard(
        queue, read_only=read_only, authorize=authorize, cap=cap, secret=secret, title=title,
        poll_seconds=float(poll_seconds),
    )
    q = d.sync
    store = q.store

    # -- data shared by the pages and the API -------------------------------------------

    async def overview_data() -> dict[str, Any]:
        ov = await d.call(store.overview, window=SERIES_WINDOW, buckets=SERIES_BUCKETS)
        resources = await d.call(q.resource_stats)
        pauses = await d.call(q.pauses)
        schedules = await d.call(q.schedules)
        return {"ov": ov, "cap": d.cap, "resources": list(resources.values()),
                "pauses": pauses, "schedules": schedules}

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

    async def pause_action(request: Request) -> str:
        """Pause or resume as the request's form says; the action done."""
        action = request.path_params["action"]
        if action not in ("pause", "resume"):
            raise HTTPException(404)
        form = await d.check_action(request, action)
        group = form.get("group") or None
        type_ = form.get("type") or None
        if action == "resume":
            await d.call(q.resume, group=group, type=type_)
            return "resumed"
        text = form.get("until") or ""
        try:
            until = admin.parse_duration(text) if text else None
        except ValueError as exc:
            raise InvalidPause(f"until: {exc}") from None
        await d.call(q.pause, group=group, type=type_, until=until)
        return "paused"

    async def jobs_data(params: Any) -> dict[str, Any]:
        flt = filter_from(params)
        order = check_order(params.get("order") or "newest")
        limit = _page_limit(params)
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

    # -- pages ---------------------------------------------------------------------------

    async def overview_page(request: Request) -> Response:
        await d.allow(request, "view")
        return d.render(request, "overview.html", page_name="overview", **await overview_data())

    async def jobs_page(request: Request) -> Response:
        await d.allow(request, "view")
        params = request.query_params
        data = await jobs_data(params)
        return d.render(
            request, "jobs.html", page_name="jobs", params=params,
            query=lambda **kw: filter_query(params, **kw), **data,
        )

    async def job_page(request: Request) -> Response:
        await d.allow(request, "view")
        job_id = _job_id(request)
        detail = await d.call(admin.show, q, job_id)
        did = request.query_params.get("did")
        return d.render(request, "job.html", page_name="jobs", detail=detail, f=detail.fields,
                        INSTANTS=INSTANTS, notice=DID.get(did or ""), problem=None)

    async def graph_page(request: Request) -> Response:
        await d.allow(request, "view")
        job_id = _job_id(request)
        data = await graph_data(job_id, request.query_params)
        root = data["graph"].nodes[job_id]
        return d.render(request, "graph.html", page_name="jobs", root=root,
                        wider=min(MAX_GRAPH_NODES, data["limit"] * 2), max_graph=MAX_GRAPH_NODES,
                        **data)

    async def workers_page(request: Request) -> Response:
        await d.allow(request, "view")
        workers = await d.call(store.workers)
        return d.render(request, "workers.html", page_name="workers", workers=workers)

    # -- actions (POST, CSRF-checked) ------------------------------------------------------

    async def job_action(request: Request) -> Response:
        action = request.path_params["action"]
        if action not in ("retry", "cancel"):
            raise HTTPException(404)
        await d.check_action(request, action)
        job_id = _job_id(request)
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

    async def bulk_action(request: Request) -> Response:
        form = await request.form()
        choice = str(form.get("do") or "")
        action, _, scope = choice.partition(":")
        if action not in ("retry", "cancel") or scope not in ("selected", "matching"):
            raise InvalidFilter("choose retry or cancel, of the selected jobs or of all that match")
        await d.check_action(request, action)
        filter_text = str(form.get("filter") or "")
        params = _Params(urllib.parse.parse_qs(filter_text))
        if scope == "selected":
            ids = [_int(str(x), "id") for x in form.getlist("id")]
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

    async def pause_page_action(request: Request) -> Response:
        await pause_action(request)
        form = await request.form()
        if form.get("back") == "jobs":
            # Back to the listing the buttons were on: its group and type filter.
            back = {k: v for k in ("group", "type") if isinstance(v := form.get(k), str) and v}
            return RedirectResponse(
                f"{d.base(request)}/jobs?{urllib.parse.urlencode(back)}", status_code=303
            )
        return RedirectResponse(f"{d.base(request)}/", status_code=303)

    async def schedule_page_action(request: Request) -> Response:
        await schedule_action(request)
        return RedirectResponse(f"{d.base(request)}/", status_code=303)

    # -- the JSON API ------------------------------------------------------------------------

    async def api_schedules(request: Request) -> Response:
        await d.allow(request, "view")
        schedules = await d.call(q.schedules)
        return JSONResponse({"schedules": [schedule_json(s) for s in schedules]})

    async def api_schedule_action(request: Request) -> Response:
        did = await schedule_action(request)
        schedules = await d.call(q.schedules)
        return JSONResponse({"did": did, "schedules": [schedule_json(s) for s in schedules]})

    async def api_pauses(request: Request) -> Response:
        await d.allow(request, "view")
        pauses = await d.call(q.pauses)
        return JSONResponse({"pauses": [pause_json(p) for p in pauses]})

    async def api_pause_action(request: Request) -> Response:
        did = await pause_action(request)
        pauses = await d.call(q.pauses)
        return JSONResponse({"did": did, "pauses": [pause_json(p) for p in pauses]})

    async def api_overview(request: Request) -> Response:
        await d.allow(request, "view")
        data = await overview_data()
        return JSONResponse({
            **data["ov"].to_json(), "cap": data["cap"],
            "resources": [resource_json(r) for r in data["resources"]],
            "pauses": [pause_json(p) for p in data["pauses"]],
            "schedules": [schedule_json(s) for s in data["schedules"]],
        })

    async def api_jobs(request: Request) -> Response:
        await d.allow(request, "view")
        data = await jobs_data(request.query_params)
        return JSONResponse(data["page"].to_json())

    async def api_job(request: Request) -> Response:
        await d.allow(request, "view")
        detail = await d.call(store.job_detail, _job_id(request))
        return JSONResponse(detail.to_json())

    async def api_graph(request: Request) -> Response:
        await d.allow(request, "view")
        data = await graph_data(_job_id(request), request.query_params)
        g = data["graph"]
        return JSONResponse({
            **g.to_json(), "limit": data["limit"], "shown": len(g.nodes),
            "total": data["total"], "hidden": data["total"] - len(g.nodes),
            "total_is_lower_bound": data["total_is_lower_bound"], "stuck": data["stuck"],
        })

    async def api_workers(request: Request) -> Response:
        await d.allow(request, "view")
        workers = await d.call(store.workers)
        return JSONResponse({"workers": [w.to_json() for w in workers]})

    async def api_csrf(request: Request) -> Response:
        await d.allow(request, "view")
        cookie, new = d.cookie_of(request)
        response = JSONResponse({"token": d.csrf.token(cookie), "cookie": CSRF_COOKIE,
                                 "header": CSRF_HEADER, "field": CSRF_FIELD})
        if new:
            d.set_cookie(request, response, cookie)
        return response

    async def api_job_action(request: Request) -> Response:
        action = request.path_params["action"]
        if action not in ("retry", "cancel"):
            raise HTTPException(404)
        await d.check_action(request, action)
        job_id = _job_id(request)
        if action == "retry":
            result = await d.call(admin.retry, q, job_id)
        else:
            result = await d.call(admin.cancel, q, job_id, by="dashboard")
        return JSONResponse(result.to_json())

    async def api_bulk(request: Request) -> Response:
        action = request.path_params["action"]
        if action not in ("retry", "cancel"):
            raise HTTPException(404)
        form = await d.check_action(request, action)
        params = _Params({k: [str(v) for v in form.getlist(k)] for k in form})
        for k, v in request.query_params.multi_items():
            params.add(k, v)
        flt = filter_from(params)
        dry_run = params.get("dry_run") in ("1", "true", "yes")
        run = admin.retry_many if action == "retry" else admin.cancel_many
        by = {} if action == "retry" else {"by": "dashboard"}
        result = await d.call(run, q, flt, dry_run=dry_run, **by)
        return JSONResponse(result.to_json())

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

    # -- errors ------------------------------------------------------------------------------

    async def on_forbidden(request: Request, exc: Exception) -> Response:
        return d.error_page(request, 403, str(exc))

    async def on_bad_filter(request: Request, exc: Exception) -> Response:
        return d.error_page(request, 400, str(exc))

    async def on_not_found(request: Request, exc: Exception) -> Response:
        return d.error_page(request, 404, str(exc).strip("'\""))

    async def on_admin_error(request: Request, exc: Exception) -> Response:
        return d.error_page(request, 409, str(exc))

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        messages = {404: "no such page", 405: "that method is not allowed here"}
        return d.error_page(request, exc.status_code,
                            messages.get(exc.status_code, exc.detail), exc.headers)

    async def on_error(request: Request, exc: Exception) -> Response:
        log.exception("dashboard error on %s", one_line(request.url.path))
        return d.error_page(request, 500, "the dashboard hit an error; the server's log has it")

    routes = [
        Route("/", overview_page, name="overview"),
        Route("/jobs", jobs_page, name="jobs"),
        Route("/jobs/actions", bulk_action, methods=["POST"], name="bulk"),
        Route("/jobs/{job_id:readyq_job_id}", job_page, name="job"),
        Route("/jobs/{job_id:readyq_job_id}/graph", graph_page, name="graph"),
        Route("/jobs/{job_id:readyq_job_id}/{action}", job_action, methods=["POST"],
              name="job_action"),
        Route("/workers", workers_page, name="workers"),
        Route("/pauses/{action}", pause_page_action, methods=["POST"], name="pause_action"),
        Route("/api/pauses", api_pauses),
        Route("/api/pauses/{action}", api_pause_action, methods=["POST"]),
        Route("/schedules/{action}", schedule_page_action, methods=["POST"],
              name="schedule_action"),
        Route("/api/schedules", api_schedules),
        Route("/api/schedules/{action}", api_schedule_action, methods=["POST"]),
        Route("/api/overview", api_overview),
        Route("/api/jobs", api_jobs),
        Route("/api/jobs/{job_id:readyq_job_id}", api_job),
        Route("/api/jobs/{job_id:readyq_job_id}/graph", api_graph),
        Route("/api/jobs/{job_id:readyq_job_id}/{action}", api_job_action, methods=["POST"]),
        Route("/api/jobs/{action}", api_bulk, methods=["POST"]),
        Route("/api/workers", api_workers),
        Route("/api/csrf", api_csrf),
        Route("/api/events", api_events),
        Mount("/static", app=StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={
            Forbidden: on_forbidden,
            InvalidFilter: on_bad_filter,
            InvalidPause: on_bad_filter,
            InvalidSchedule: on_bad_filter,
            JobNotFound: on_not_found,
            ScheduleNotFound: on_not_found,
            AdminError: on_admin_error,
            HTTPException: on_http,
            Exception: on_error,
        },
    )
    app.state.dashboard = d
    app.add_middleware(TrustedHosts, allowed=hosts)
    app.add_middleware(SecurityHeaders)
    app.add_middleware(RootPathPaths)
    return app


DID = {
    "retried": "Retried: the job is back in the queue, with what failed because of it.",
    "cancelled": "Cancel done: a pending job ends at once; a running one is asked to stop.",
}


class _Params:
    """A read-only multi-dict of strings (parsed form or query), as filter_from reads."""

    def __init__(self, data: dict[str, list[str]]) -> None:
        self.data = {k: list(v) for k, v in data.items()}

    def add(self, key: str, value: str) -> None:
        self.data.setdefault(key, []).append(value)

    def get(self, key: str, default: Any = None) -> Any:
        values = self.data.get(key)
        return values[-1] if values else default

    def getlist(self, key: str) -> list[str]:
        return list(self.data.get(key, []))


def env_credentials() -> tuple[str, str] | None:
    """(user, password) from READYQ_DASHBOARD_USER and READYQ_DASHBOARD_PASSWORD, or
    None when neither is set."""
    user = os.environ.get("READYQ_DASHBOARD_USER")
    password = os.environ.get("READYQ_DASHBOARD_PASSWORD")
    if not user and not password:
        return None
    if not user or not password:
        raise ValueError(
            "set both READYQ_DASHBOARD_USER and READYQ_DASHBOARD_PASSWORD, or neither"
        )
    return user, password


__all__ = ["create_app", "env_credentials", "filter_from"]
