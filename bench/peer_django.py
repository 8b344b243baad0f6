"""Django's settings for the django-tasks peer, in the processes that run Django.

One database per process: ``setup(database)`` configures Django with django-tasks and its
database backend (``django_tasks_db``) on ``database``, a ``DATABASES`` entry made by
``database_settings``.
"""

from __future__ import annotations

import inspect
from typing import Any
from urllib.parse import unquote, urlsplit

import peer_tasks


def database_settings(kind: str, where: str) -> dict[str, Any]:
    """A ``DATABASES["default"]`` entry: ``where`` is a SQLite file's path or a server URL.

    ``CONN_MAX_AGE: None`` keeps each worker's connection open: db_worker closes
    connections older than that after every task (Django's request behaviour), and with
    Django's default of 0 it would reconnect for every job. Django's documentation
    recommends persistent connections where connecting is a cost; a worker that runs
    jobs back to back is such a case.
    """
    if kind == "sqlite":
        # WAL, as readyq and huey run SQLite; synchronous left at SQLite's default, as
        # theirs. The busy timeout lets the second process wait for the write lock;
        # db_worker also retries a claim that finds the database locked.
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": where,
            "CONN_MAX_AGE": None,
            "OPTIONS": {"timeout": 60, "init_command": "PRAGMA journal_mode=WAL"},
        }
    parts = urlsplit(where)
    common = {
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "127.0.0.1",
        "PORT": str(parts.port or ""),
        "CONN_MAX_AGE": None,
    }
    if kind == "postgresql":
        return {"ENGINE": "django.db.backends.postgresql", **common}
    # MariaDB through PyMySQL, the driver readyq and the reference loops use there (see
    # configure_mysql_driver). Django's default isolation level, READ COMMITTED.
    options: dict[str, Any] = {}
    import pymysql

    # PyMySQL 1.2 tries TLS on every connection unless told not to; the local server
    # has none.
    if "ssl_disabled" in inspect.signature(pymysql.connections.Connection).parameters:
        options["ssl_disabled"] = True
    return {"ENGINE": "django.db.backends.mysql", **common, "OPTIONS": options}


def configure_mysql_driver() -> None:
    """Django's MySQL backend imports ``MySQLdb`` (mysqlclient, a C extension that needs
    the MySQL or MariaDB client headers to build); PyMySQL stands in for it."""
    import pymysql

    pymysql.install_as_MySQLdb()


def setup(database: dict[str, Any]) -> None:
    """Configure Django for this process with django-tasks' database backend."""
    import django
    from django.conf import settings

    if database["ENGINE"].endswith(".mysql"):
        configure_mysql_driver()
    settings.configure(
        INSTALLED_APPS=["django_tasks", "django_tasks_db"],
        DATABASES={"default": database},
        TASKS={
            "default": {
                "BACKEND": "django_tasks_db.DatabaseBackend",
                "QUEUES": [peer_tasks.QUEUE],
            }
        },
        USE_TZ=True,
        DEBUG=False,
        LOGGING_CONFIG=None,
    )
    django.setup()
