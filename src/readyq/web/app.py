"""The dashboard's Starlette application: the routes of every page, the JSON API and the
actions, gathered from :mod:`readyq.web.routes`, behind the security middleware.

Pages are rendered on the server from Jinja2 templates with autoescaping on; every value
from the database (args, results, errors, types, groups, keys, worker ids) is user data
and reaches the page escaped. Each page's live region is refreshed in place by htmx
when the page's script says so (see :mod:`readyq.web.live`). Every read and write goes
through the queue's store and :mod:`readyq.admin`, off the event loop.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from readyq.errors import ConfigurationError
from readyq.web.dashboard import Authorize, Dashboard, DashboardContext
from readyq.web.error_pages import exception_handlers
from readyq.web.job_filters import filter_from
from readyq.web.mounting import RootPathPaths
from readyq.web.routes import (
    csrf,
    events,
    graph,
    job,
    jobs,
    overview,
    pauses,
    schedules,
    workers,
)
from readyq.web.security import LOOPBACK_HOSTS, SecurityHeaders, TrustedHosts, host_pattern

STATIC = Path(__file__).resolve().parent / "static"
POLL_SECONDS = 5.0

# In this order: where two routes' paths overlap, the first one that matches answers
# (and a method neither takes is refused with the first one's methods), so the graph's
# paths come before a job's /{action}, and a job's /api/jobs/{id} before /api/jobs/{action}.
ROUTE_GROUPS = (overview, graph, job, jobs, workers, pauses, schedules, csrf, events)


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
    context = DashboardContext.of(d)
    routes: list[BaseRoute] = [r for group in ROUTE_GROUPS for r in group.routes(context)]
    routes.append(Mount("/static", app=StaticFiles(directory=str(STATIC)), name="static"))
    app = Starlette(routes=routes, exception_handlers=exception_handlers(d))
    app.state.dashboard = d
    app.add_middleware(TrustedHosts, allowed=hosts)
    app.add_middleware(SecurityHeaders)
    app.add_middleware(RootPathPaths)
    return app


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
