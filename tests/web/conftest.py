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
        client = TestClient(create_app(queue, **options), raise_server_exceptions=False)
        clients.append(client)
        return client

    yield make
    for c in clients:
        c.close()


@pytest.fixture
def client(make_client: Any) -> TestClient:
    """The dashboard of the test's queue, with a cap of 4."""
    return make_client(cap=4)
