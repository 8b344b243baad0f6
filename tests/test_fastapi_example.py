"""examples/fastapi_app: FastAPI's TestClient drives the app of docs/fastapi.md (the
lifespan's AsyncQueue, an enqueue from an endpoint, the state and progress endpoint, the
dashboard under /readyq behind the app's login) while a worker of examples' jobs module
runs the reports, on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from async_support import async_engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from examples.fastapi_app.app import create_app
from examples.fastapi_app.jobs import make_queue

import readyq

ADMIN = ("ada", "admin-secret")
VIEWER = ("bob", "viewer-secret")


@pytest.fixture
def client(db: str) -> Iterator[TestClient]:
    # psycopg's async mode on PostgreSQL: enqueue_many through asyncpg fails on this
    # SQLAlchemy ("the server expects 108 arguments ..., 96 were passed").
    app = create_app(async_engine(db, pg_driver="psycopg"), users=dict([ADMIN, VIEWER]),
                     admins=[ADMIN[0]], allowed_hosts=["testserver"])
    with warnings.catch_warnings():
        # Starlette's TestClient asks for httpx2 (see pyproject's filterwarnings).
        warnings.simplefilter("ignore", UserWarning)
        with TestClient(app) as c:
            yield c


@pytest.fixture
def workers(db: str) -> Iterator[readyq.Queue]:
    queue = make_queue(db)
    try:
        yield queue
    finally:
        queue.close()


def test_endpoints_ask_for_the_apps_login(client: TestClient) -> None:
    r = client.post("/reports", json={"day": "2026-01-31"})
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Basic"
    r = client.post("/reports", json={"day": "2026-01-31"}, auth=("ada", "wrong"))
    assert r.status_code == 401


def test_a_report_enqueued_by_an_endpoint_runs_and_shows_its_progress(
    client: TestClient, workers: readyq.Queue
) -> None:
    r = client.post("/reports", json={"day": "2026-01-31", "parts": 4}, auth=VIEWER)
    assert r.status_code == 202
    report_id = r.json()["id"]
    r = client.get(f"/reports/{report_id}", auth=VIEWER)
    assert r.json() == {"id": report_id, "state": "active",
                        "progress": {"done": 0, "total": 4}, "rows": 0}
    stats = workers.run_worker(until_idle=True, concurrency=2, poll_interval=0.05)
    assert stats.done == 4
    r = client.get(f"/reports/{report_id}", auth=VIEWER)
    assert r.json() == {"id": report_id, "state": "done",
                        "progress": {"done": 4, "total": 4}, "rows": 100 + 200 + 300 + 400}
    # The parts ran in the user's fair-share group.
    assert {j.group for j in workers.jobs(parent=report_id)} == {"bob"}


def test_an_unknown_report_is_a_404(client: TestClient) -> None:
    assert client.get("/reports/999999", auth=VIEWER).status_code == 404
    assert client.get("/reports/0", auth=VIEWER).status_code == 404


def test_the_dashboard_is_mounted_behind_the_apps_login(client: TestClient) -> None:
    r = client.get("/readyq/")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Basic"
    r = client.get("/readyq/jobs", auth=VIEWER)
    assert r.status_code == 200
    assert 'href="/readyq/jobs"' in r.text and 'src="/readyq/static/app.js"' in r.text
    assert client.get("/readyq/static/app.css", auth=VIEWER).status_code == 200
    assert client.get("/readyq/api/overview", auth=VIEWER).status_code == 200


def _act(client: TestClient, auth: Any, job_id: int, action: str) -> Any:
    token = client.get("/readyq/api/csrf", auth=auth).json()["token"]
    return client.post(f"/readyq/api/jobs/{job_id}/{action}", auth=auth,
                       headers={"x-csrf-token": token})


def test_only_the_apps_admins_act_in_the_dashboard(
    client: TestClient, workers: readyq.Queue
) -> None:
    report_id = client.post("/reports", json={"day": "2026-02-01", "parts": 1},
                            auth=VIEWER).json()["id"]
    r = _act(client, VIEWER, report_id, "cancel")
    assert r.status_code == 403
    assert workers.get(report_id).state == "active"
    r = _act(client, ADMIN, report_id, "cancel")
    assert r.status_code == 200, r.text
    assert workers.get(report_id).state == "cancelled"
