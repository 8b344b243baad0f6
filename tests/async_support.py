"""Async engines on the per-test databases of tests/conftest.py."""

from __future__ import annotations

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
