"""The SQLAlchemy URL of a database Django already uses, for readyq's own engine.

readyq connects with its own drivers (psycopg for PostgreSQL, PyMySQL for MySQL and
MariaDB: the ``readyq[postgresql]`` and ``readyq[mysql]`` extras) and its own pool; it
takes from Django's settings only where the database is and who logs in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from readyq.errors import ConfigurationError

# Django's ENGINE setting (its last part) -> SQLAlchemy's dialect and driver.
_DRIVERS = {
    "sqlite3": "sqlite",
    "postgresql": "postgresql+psycopg",
    "mysql": "mysql+pymysql",
}
# Connection options of Django's OPTIONS that mean the same to readyq's driver.
_PASSED_OPTIONS = {
    "postgresql": ("options", "sslmode", "application_name"),
    "mysql": ("charset",),
}


def url_of(settings: Mapping[str, Any], alias: str) -> sa.URL:
    """The URL of ``DATABASES[alias]`` (``settings`` is that entry).

    Raises ConfigurationError for an engine readyq cannot run on (Oracle, a third-party
    backend): give the backend's ``url`` option instead.
    """
    engine = str(settings.get("ENGINE", ""))
    kind = engine.rsplit(".", 1)[-1]
    driver = _DRIVERS.get(kind)
    if driver is None:
        raise ConfigurationError(
            f"DATABASES[{alias!r}] uses {engine!r}, which readyq cannot derive a URL from: "
            "give the task backend's OPTIONS a 'url' (SQLite, PostgreSQL, MySQL or MariaDB)"
        )
    name = settings.get("NAME") or None
    if kind == "sqlite3":
        if name is None or str(name) == ":memory:" or str(name).startswith("file:"):
            raise ConfigurationError(
                f"DATABASES[{alias!r}] is an in-memory SQLite database, which a worker in "
                "another process cannot see: give the task backend's OPTIONS a 'url'"
            )
        return sa.URL.create(driver, database=str(name))
    options = settings.get("OPTIONS") or {}
    query = {k: str(options[k]) for k in _PASSED_OPTIONS[kind] if k in options}
    port = settings.get("PORT") or None
    return sa.URL.create(
        driver,
        username=settings.get("USER") or None,
        password=settings.get("PASSWORD") or None,
        host=settings.get("HOST") or None,
        port=int(port) if port is not None else None,
        database=None if name is None else str(name),
        query=query,
    )
