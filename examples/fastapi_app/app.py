"""The web side: a FastAPI app that enqueues reports, shows their progress and mounts
readyq's dashboard under /readyq behind the app's own login.

A report is a readyq container with one job per part: the container ends ``done`` when
every part is done, and its children say how far it got.
"""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations, and
# the User alias below is local to create_app.
import secrets
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.security import HTTPBasic, HTTPBasicCredentials
from pydantic import BaseModel, Field
from sqlalchemy.ext.asyncio import AsyncEngine

import readyq
from readyq.web import create_app as create_dashboard

basic = HTTPBasic()


class ReportRequest(BaseModel):
    day: str = Field(min_length=1, max_length=40)
    parts: int = Field(default=4, ge=1, le=100)


def create_app(
    database: str | AsyncEngine,
    *,
    users: dict[str, str],
    admins: Iterable[str] = (),
    allowed_hosts: Iterable[str] = (),
) -> FastAPI:
    """The app on readyq's tables at ``database`` (an async URL or AsyncEngine).

    ``users`` maps user names to passwords (HTTP Basic, for the example's sake);
    ``admins`` may retry and cancel jobs in the dashboard, other users only look.
    """
    # Made here, connected at first use: the dashboard is mounted before the app starts.
    queue = readyq.AsyncQueue(database)
    admin_names = frozenset(admins)

    def current_user(credentials: Annotated[HTTPBasicCredentials, Depends(basic)]) -> str:
        """The app's auth dependency."""
        password = users.get(credentials.username)
        if password is None or not secrets.compare_digest(
            password.encode(), credentials.password.encode()
        ):
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED, "wrong user or password",
                headers={"WWW-Authenticate": "Basic"},
            )
        return credentials.username

    async def may_use_dashboard(request: Request, action: str) -> bool:
        """The dashboard's authorize hook: the same dependency, called with what it
        depends on; its 401 reaches the browser as it is."""
        user = current_user(await basic(request))
        return action == "view" or user in admin_names

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Tables come from `readyq migrate` in a deployment; the example makes them.
        await queue.create_schema()
        try:
            yield
        finally:
            await queue.close()

    app = FastAPI(lifespan=lifespan)
    User = Annotated[str, Depends(current_user)]

    @app.post("/reports", status_code=status.HTTP_202_ACCEPTED)
    async def request_report(body: ReportRequest, user: User) -> dict[str, Any]:
        specs = [readyq.JobSpec("report", {"day": body.day, "by": user}, key="report",
                                container=True)]
        specs += [readyq.JobSpec("report.part", {"day": body.day, "part": i},
                                 parent="report", group=user)
                  for i in range(body.parts)]
        ids = await queue.enqueue_many(specs)
        return {"id": ids[0], "parts": body.parts}

    @app.get("/reports/{report_id}")
    async def report_state(report_id: int, user: User) -> dict[str, Any]:
        try:
            report = await queue.get(report_id)
        except (readyq.JobNotFound, readyq.InvalidJobId):
            raise HTTPException(status.HTTP_404_NOT_FOUND, "no such report") from None
        if report.type != "report":
            raise HTTPException(status.HTTP_404_NOT_FOUND, "no such report")
        parts = (await queue.jobs(parent=report_id, limit=1000, order="oldest")).jobs
        done = [p for p in parts if p.state == readyq.JobState.DONE]
        return {
            "id": report.id,
            "state": report.state.value,
            "progress": {"done": len(done), "total": len(parts)},
            "rows": sum(p.result["rows"] for p in done),
        }

    app.mount("/readyq", create_dashboard(
        queue, authorize=may_use_dashboard, allowed_hosts=allowed_hosts,
    ))
    return app
