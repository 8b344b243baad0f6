"""Async engines on the per-test databases of tests/conftest.py."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from readyq.dialects import dialect_class

ASYNC_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg",
                 "mysql": "mysql+asyncmy"}


def async_engine(db: str, *, pg_driver: str = "asyncpg") -> AsyncEngine:
    """An AsyncEngine on the same database as the sync URL ``db``."""
    url = sa.make_url(db)
    backend = url.get_backend_name()
    options = dict(dialect_class(backend).engine_options())
    if backend == "postgresql" and pg_driver == "asyncpg":
        # asyncpg takes no libpq ``options``: pass the search path as a server setting.
        search_path = url.query["options"].split("search_path=", 1)[1]
        url = url.difference_update_query(["options"]).set(drivername="postgresql+asyncpg")
        options["connect_args"] = {"server_settings": {"search_path": search_path}}
    elif backend == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    else:
        # asyncmy takes no ``ssl_disabled`` (PyMySQL's; see tests/conftest.py).
        url = url.difference_update_query(["ssl_disabled"])
        url = url.set(drivername=ASYNC_DRIVERS[backend])
    return create_async_engine(url, **options)


T = TypeVar("T")


class Runner:
    """The part of ``asyncio.Runner`` (Python 3.11+) the tests use, on Python 3.10 too:
    coroutines run one after another on one event loop, closed by ``close()``."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run_until_complete(coro)

    def close(self) -> None:
        try:
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.run_until_complete(self._loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            self._loop.close()
