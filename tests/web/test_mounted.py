"""The dashboard mounted in another application: under a prefix the application sets
itself (FastAPI's root_path) or that the server passes (uvicorn --root-path), and behind
an authorize hook that raises the application's own 401."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.routing import Mount
from starlette.testclient import TestClient

import readyq
from readyq.web import create_app


def client_of(app: Any, **options: Any) -> TestClient:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # TestClient asks for httpx2
        return TestClient(app, **options)


@pytest.fixture
def job_id(queue: readyq.Queue) -> Iterator[int]:
    yield queue.enqueue("resize", {"path": "a.png"})


def test_a_prefix_set_by_the_application_reaches_every_route(
    queue: readyq.Queue, job_id: int
) -> None:
    fastapi = pytest.importorskip("fastapi")
    with warnings.catch_warnings():
        # Newer FastAPI deprecates root_path in favour of the server's; it still works.
        warnings.simplefilter("ignore", UserWarning)
        app = fastapi.FastAPI(root_path="/proxy")
    app.mount("/readyq", create_app(queue, allowed_hosts=["testserver"]))
    client = client_of(app)
    for path in ("/readyq/", "/readyq/jobs", f"/readyq/jobs/{job_id}", "/readyq/workers"):
        r = client.get(path)
        assert r.status_code == 200, path
        # Links are the browser's: through the proxy's prefix.
        assert 'href="/proxy/readyq/jobs"' in r.text
    assert client.get(f"/readyq/api/jobs/{job_id}").json()["id"] == job_id
    assert client.get("/readyq/static/app.css").status_code == 200
    assert client.get("/readyq/nothing-here").status_code == 404


def test_a_prefix_passed_by_the_server_still_works(queue: readyq.Queue, job_id: int) -> None:
    app = Starlette(routes=[Mount("/readyq", app=create_app(queue,
                                                            allowed_hosts=["testserver"]))])
    client = client_of(app, root_path="/proxy")
    r = client.get(f"/readyq/jobs/{job_id}")
    assert r.status_code == 200
    assert 'href="/proxy/readyq/jobs"' in r.text


def test_an_authorize_hooks_http_error_keeps_its_headers(queue: readyq.Queue) -> None:
    def authorize(request: Request, action: str) -> bool:
        if "authorization" not in request.headers:
            raise HTTPException(401, "log in", headers={"WWW-Authenticate": "Basic"})
        return True

    app = Starlette(routes=[Mount("/readyq", app=create_app(
        queue, authorize=authorize, allowed_hosts=["testserver"]))])
    client = client_of(app)
    for path in ("/readyq/jobs", "/readyq/api/jobs"):
        r = client.get(path)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Basic"
    assert client.get("/readyq/api/jobs").json()["error"] == "log in"
    assert client.get("/readyq/jobs", headers={"Authorization": "Basic eDp5"}).status_code == 200
