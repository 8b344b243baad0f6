"""Shared fixtures: every behaviour test runs on SQLite, PostgreSQL and MariaDB.

Each test gets its own SQLite file, PostgreSQL schema or MariaDB database, so tests never
see each other's rows. Server URLs can be changed with READYQ_TEST_POSTGRESQL_URL and
READYQ_TEST_MARIADB_URL. A server that cannot be reached fails the test (so a CI run
cannot pass by skipping), unless READYQ_TEST_SKIP_UNAVAILABLE=1.
"""

from __future__ import annotations

import inspect
import os
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

import readyq

PG_URL = os.environ.get(
    "READYQ_TEST_POSTGRESQL_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def _default_mariadb_url() -> str:
    """The local MariaDB, which has no TLS. PyMySQL 1.2 tries TLS on every new connection
    unless ``ssl_disabled`` is set, and builds an SSL context from the system's CA store
    each time (about 50 ms of CPU per connection on a 2-core machine), while the suite
    opens several hundred connections to MariaDB."""
    url = "mysql+pymysql://root@127.0.0.1:3306/test"
    try:
        import pymysql
    except ImportError:
        return url
    if "ssl_disabled" in inspect.signature(pymysql.connections.Connection).parameters:
        url += "?ssl_disabled=true"
    return url


MARIADB_URL = os.environ.get("READYQ_TEST_MARIADB_URL") or _default_mariadb_url()
DIALECTS = ("sqlite", "postgresql", "mariadb")

_admin: dict[str, sa.Engine] = {}


def _admin_engine(name: str) -> sa.Engine:
    if name not in _admin:
        url = PG_URL if name == "postgresql" else MARIADB_URL
        engine = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
        except sa.exc.OperationalError as exc:
            if os.environ.get("READYQ_TEST_SKIP_UNAVAILABLE") == "1":
                pytest.skip(f"{name} is not reachable: {exc.__class__.__name__}")
            pytest.fail(f"{name} server is not reachable at {url}: {exc}", pytrace=False)
        _admin[name] = engine
    return _admin[name]


def make_db(name: str, tmp_path: os.PathLike[str]) -> tuple[str, object]:
    """Create a fresh database for one test; return its URL and a cleanup token."""
    if name == "sqlite":
        return f"sqlite:///{os.path.join(str(tmp_path), 'readyq.db')}", None
    label = "t_" + uuid.uuid4().hex[:12]
    engine = _admin_engine(name)
    with engine.connect() as conn:
        if name == "postgresql":
            conn.exec_driver_sql(f"CREATE SCHEMA {label}")
        else:
            conn.exec_driver_sql(f"CREATE DATABASE {label}")
    if name == "postgresql":
        url = sa.make_url(PG_URL).update_query_dict({"options": f"-csearch_path={label}"})
    else:
        url = sa.make_url(MARIADB_URL).set(database=label)
    return url.render_as_string(hide_password=False), label


def drop_db(name: str, label: object) -> None:
    if name == "sqlite" or label is None:
        return
    with _admin_engine(name).connect() as conn:
        if name == "postgresql":
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {label} CASCADE")
        else:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {label}")


@pytest.fixture(params=DIALECTS)
def db(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> Iterator[str]:
    """A URL to a fresh, empty database of each dialect."""
    name = request.param
    url, label = make_db(name, tmp_path)
    try:
        yield url
    finally:
        drop_db(name, label)


@pytest.fixture
def dialect_name(db: str) -> str:
    backend = sa.make_url(db).get_backend_name()
    return "mariadb" if backend == "mysql" else backend


@pytest.fixture
def queue(db: str) -> Iterator[readyq.Queue]:
    """A queue with its schema created on a fresh database of each dialect."""
    q = readyq.Queue(db)
    q.create_schema()
    try:
        yield q
    finally:
        q.close()


# The tests that run worker processes against deadlines (leases, freezes, kills) keep to
# one pytest-xdist worker, one after another, so that two of them never share the
# machine's cores; the other tests spread over the rest (``-n 2 --dist loadgroup``).
PROCESS_DIRS = ("processes", "chaos")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.parts
        if "tests" in parts and parts[parts.index("tests") + 1] in PROCESS_DIRS:
            item.add_marker(pytest.mark.xdist_group("processes"))
