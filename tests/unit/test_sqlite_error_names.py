"""SQLite's permanent errors are told apart by the error's name where Python's sqlite3
gives one (3.11+), and by SQLite's message where it does not (3.10): either way a worker
stops on tables that do not match it and waits out a locked database."""

from __future__ import annotations

import sqlite3

import pytest
import sqlalchemy as sa

from readyq.dialects.sqlite import SQLiteDialect


def _wrapped(err: sqlite3.Error) -> sa.exc.DBAPIError:
    return sa.exc.OperationalError("UPDATE readyq_jobs ...", {}, err)


@pytest.mark.parametrize(
    "message",
    [
        "no such column: readyq_jobs.timeout",
        "no such table: readyq_jobs",
        "no such function: unixepoch",
        "table readyq_jobs has no column named unique_key",
        'near "RETURNING": syntax error',
    ],
)
def test_a_statement_the_tables_refuse_is_permanent_without_an_error_name(message: str) -> None:
    err = sqlite3.OperationalError(message)
    assert getattr(err, "sqlite_errorname", None) is None  # as Python 3.10 raises it
    dialect = SQLiteDialect()
    assert dialect.is_permanent(_wrapped(err))
    assert not dialect.is_retryable(_wrapped(err))


@pytest.mark.parametrize(
    "message", ["database is locked", "disk I/O error", "unable to open database file"]
)
def test_other_errors_are_not_permanent_without_an_error_name(message: str) -> None:
    assert not SQLiteDialect().is_permanent(_wrapped(sqlite3.OperationalError(message)))


def test_the_error_name_decides_where_there_is_one() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (a)")
    with pytest.raises(sqlite3.OperationalError) as raised:
        conn.execute("SELECT b FROM t")
    dialect = SQLiteDialect()
    if hasattr(raised.value, "sqlite_errorname"):
        assert raised.value.sqlite_errorname == "SQLITE_ERROR"
    assert dialect.is_permanent(_wrapped(raised.value))
