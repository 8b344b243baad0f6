"""The Django project of the backend's tests (Django 6.0+, so Python 3.12+).

The session makes one Django database per dialect: a SQLite file (alias ``default``), a
PostgreSQL schema (``postgresql``) and a MariaDB database (``mariadb``), and migrates
the test application's models on each. Each test then gets readyq's tables under a
prefix of its own in one of them, readyq's URL derived from Django's settings for that
alias. Where Django has no ``django.tasks`` (older Django, Python 3.11), the test
modules skip.
"""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

HERE = Path(__file__).parent
PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
MARIADB_ADMIN = "mysql+pymysql://root@127.0.0.1:3306/test"
# Django's database alias of each dialect.
ALIASES = {"sqlite": "default", "postgresql": "postgresql", "mariadb": "mariadb"}

try:
    import django.tasks  # noqa: F401

    HAVE_TASKS = True
except ImportError:
    HAVE_TASKS = False

_session: dict[str, Any] = {}


def _admin(url: str, statement: str) -> None:
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


def pytest_configure(config: pytest.Config) -> None:
    if not HAVE_TASKS:
        return
    label = "dj_" + uuid.uuid4().hex[:12]
    workdir = tempfile.mkdtemp(prefix="readyq-django-")
    _admin(PG_ADMIN, f"CREATE SCHEMA {label}")
    _admin(MARIADB_ADMIN, f"CREATE DATABASE {label}")
    _session.update(label=label, workdir=workdir)
    os.environ["READYQ_DJANGO_SQLITE"] = os.path.join(workdir, "django.db")
    os.environ["READYQ_DJANGO_SCHEMA"] = label
    os.environ["DJANGO_SETTINGS_MODULE"] = "djproject.settings"
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    import django
    from django.core.management import call_command

    django.setup()
    for alias in ALIASES.values():
        call_command("migrate", database=alias, verbosity=0)


def pytest_unconfigure(config: pytest.Config) -> None:
    label = _session.pop("label", None)
    if label is None:
        return
    from django.db import connections

    from readyq.django.backend import close_queues

    close_queues()
    connections.close_all()
    _admin(PG_ADMIN, f"DROP SCHEMA IF EXISTS {label} CASCADE")
    _admin(MARIADB_ADMIN, f"DROP DATABASE IF EXISTS {label}")


@pytest.fixture(params=list(ALIASES))
def dialect(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def alias(dialect: str) -> str:
    """Django's database alias of the test's dialect."""
    return ALIASES[dialect]


def tasks_setting(alias: str, prefix: str, **options: Any) -> dict[str, Any]:
    """A TASKS setting: readyq's backend on Django's database ``alias``."""
    return {
        "default": {
            "BACKEND": "readyq.django.ReadyqBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"database": alias, "prefix": prefix, "resources": {"gpu": 1},
                        "retry_backoff": 0, **options},
        }
    }


@pytest.fixture
def prefix() -> str:
    return "rq" + uuid.uuid4().hex[:8] + "_"


@pytest.fixture
def backend(alias: str, prefix: str) -> Iterator[Any]:
    """readyq's backend as TASKS' default, its tables made under a prefix of the test's
    own on Django's database of the dialect."""
    from django.tasks import task_backends
    from django.test import override_settings

    from readyq.django.backend import close_queues

    with override_settings(TASKS=tasks_setting(alias, prefix)):
        backend = task_backends["default"]
        backend.queue.create_schema()
        try:
            yield backend
        finally:
            backend.queue.drop_schema()
            close_queues()


@pytest.fixture
def drain(backend: Any) -> Any:
    """Runs the backend's jobs in this process until none is left."""

    def run(**options: Any) -> Any:
        options.setdefault("poll_interval", 0.05)
        return backend.queue.run_worker(until_idle=True, **options)

    return run
