"""Creating the schema draws no warning from the database, and none reaches the user.

MariaDB and MySQL call every primary key PRIMARY and answer a CREATE TABLE that names
one with the warning "Name '...' ignored for PRIMARY key", which asyncmy logs to the
user's stderr at every ``create_schema()`` (issue 27, item 12). PyMySQL does not log
it, so for both drivers the test also asks the server itself (``SHOW WARNINGS``) after
each CREATE statement.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from async_support import Runner, async_engine
from readyq import admin


def _record_server_warnings(engine: sa.Engine, found: list[tuple[str, str]]) -> None:
    """After each CREATE on MariaDB, the server's warnings for it go to ``found`` as
    (first line of the statement, message)."""
    if engine.dialect.name not in ("mysql", "mariadb"):
        return

    @sa.event.listens_for(engine, "after_cursor_execute")
    def check(conn: sa.Connection, cursor: Any, statement: str, *_: Any) -> None:
        if not statement.lstrip().upper().startswith("CREATE"):
            return
        # A cursor of its own: the statement's cursor may still hold rows to read.
        other = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            other.execute("SHOW WARNINGS")
            found.extend((statement.strip().splitlines()[0], str(row[2]))
                         for row in other.fetchall())
        finally:
            other.close()


def test_create_schema_with_the_sync_driver_draws_no_warning(db: str) -> None:
    engine = sa.create_engine(db, poolclass=sa.NullPool)
    server: list[tuple[str, str]] = []
    _record_server_warnings(engine, server)
    try:
        with warnings.catch_warnings(record=True) as caught, readyq.Queue(engine) as queue:
            warnings.simplefilter("always")
            queue.create_schema()
            assert queue.counts() == {}
        assert [str(w.message) for w in caught] == []
    finally:
        engine.dispose()
    assert server == []


def test_create_schema_with_the_async_driver_logs_no_warning(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    runner = Runner()
    engine = async_engine(db)
    server: list[tuple[str, str]] = []
    _record_server_warnings(engine.sync_engine, server)
    try:
        with caplog.at_level(logging.WARNING), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            queue = readyq.AsyncQueue(engine)
            runner.run(queue.create_schema())
            assert runner.run(queue.counts()) == {}
            runner.run(queue.close())
        logged = [f"{r.name}: {r.getMessage()}" for r in caplog.records
                  if r.levelno >= logging.WARNING]
        assert logged == []
        assert [str(w.message) for w in caught] == []
    finally:
        runner.run(engine.dispose())
        runner.close()
    assert server == []


def test_migrations_create_readyq_tables_without_a_server_warning(db: str) -> None:
    engine = sa.create_engine(db, poolclass=sa.NullPool)
    server: list[tuple[str, str]] = []
    _record_server_warnings(engine, server)
    try:
        admin.migrate(engine)
    finally:
        engine.dispose()
    # Alembic's own version table names its key <table>_pkc, which MariaDB ignores too;
    # that table is Alembic's, not readyq's.
    assert [w for w in server if "alembic_version" not in w[0]] == []
