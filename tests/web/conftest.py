"""Fixtures of the dashboard's tests (tests/web is a package: this conftest never shadows
the root one). The HTTP tests drive the app in-process through Starlette's TestClient,
on every database; the browser tests (test_browser.py) share one headless Chromium per
session and one served dashboard per database."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

import readyq
from readyq.web import create_app


@pytest.fixture
def make_client(queue: readyq.Queue) -> Iterator[Any]:
    """``make_client(**options)``: a TestClient of ``create_app(queue, **options)``."""
    clients: list[TestClient] = []

    def make(**options: Any) -> TestClient:
        # A host the dashboard answers under (TestClient's own "testserver" is not one).
        client = TestClient(create_app(queue, **options), base_url="http://127.0.0.1",
                            raise_server_exceptions=False)
        clients.append(client)
        return client

    yield make
    for c in clients:
        c.close()


@pytest.fixture
def client(make_client: Any) -> TestClient:
    """The dashboard of the test's queue, with a cap of 4."""
    return make_client(cap=4)


# -- the browser tests ---------------------------------------------------------------------

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]


def _root_conftest() -> Any:
    """tests/conftest.py by path (``import conftest`` may find another one)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "readyq_tests_root_conftest_web", Path(__file__).parents[1] / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the browser tests (they are one module): Debian's,
    which .ci/run installs, never Playwright's own download. Module-scoped, so that
    Playwright's event loop is gone before the tests that run their own."""
    import os

    from playwright.sync_api import sync_playwright

    if not os.path.exists(CHROMIUM):
        pytest.fail(f"no Chromium at {CHROMIUM}: apt-get install chromium", pytrace=False)
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


class Served:
    """A dashboard served over HTTP by uvicorn in a thread, on a database of its own."""

    def __init__(self, name: str, url: str, label: object) -> None:
        import socket
        import threading

        import uvicorn

        self.name, self.db_url, self.label = name, url, label
        self.queue = readyq.Queue(url)
        self.queue.create_schema()
        app = create_app(self.queue, cap=4, poll_seconds=0.5)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        import time

        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "the dashboard did not start"
            time.sleep(0.02)
        self.app = app

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.app.state.dashboard.changes.stop()
        self.queue.close()


@pytest.fixture(scope="module", params=("sqlite", "postgresql", "mariadb"))
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Served]:
    """One dashboard per database for the browser tests."""
    root = _root_conftest()
    name = request.param
    url, label = root.make_db(name, tmp_path_factory.mktemp(f"served-{name}"))
    s = Served(name, url, label)
    try:
        yield s
    finally:
        s.close()
        root.drop_db(name, label)
