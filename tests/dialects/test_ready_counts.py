"""The one-statement ready counts a claim reads before the gate (the dialects' overrides of
``Dialect.runnable_counts``) agree with the portable, step-by-step reading whenever they
give an answer.

PostgreSQL answers with a recursive skip scan; MariaDB from the groups its last skip scan
found, and not at all when a group it does not know has appeared; SQLite never answers
(its claim holds the database's write lock anyway).
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from readyq.dialects import Dialect, SQLiteDialect
from readyq.dialects import mysql as mysql_dialect
from readyq.store import Store


def portable(store: Store, conn: sa.Connection, types: list[str] | None, cap: int) -> Any:
    # The base class's reading: the skip scan of ready groups, then their counted heads.
    counts, _ = Dialect.runnable_counts(store.dialect, conn, store.tables, store.now(), types,
                                        cap)
    return counts


def one_statement(store: Store, conn: sa.Connection, types: list[str] | None, cap: int) -> Any:
    """The dialect's own one-statement reading, or None where it gives no answer."""
    dialect = store.dialect
    if isinstance(dialect, mysql_dialect.MySQLDialect):
        return dialect._known_group_counts(conn, store.tables, store.now(), types, cap)
    if type(dialect).runnable_counts is Dialect.runnable_counts:
        return None  # no reading of its own
    return dialect.runnable_counts(conn, store.tables, store.now(), types, cap)[0]


def check(queue: readyq.Queue, dialect_name: str, types: list[str] | None = None,
          cap: int = 10, *, unknown: bool = False) -> dict[str, tuple[int, int]]:
    """Both readings agree (MariaDB: once it knows the groups; with ``unknown`` it must
    first decline, since a group has appeared that its last scan did not find)."""
    store = queue.store
    with queue.engine.connect() as conn:
        if dialect_name == "sqlite":
            assert isinstance(store.dialect, SQLiteDialect)
            assert one_statement(store, conn, types, cap) is None
            return portable(store, conn, types, cap)
        if dialect_name == "mariadb" and unknown:
            assert one_statement(store, conn, types, cap) is None
        expected = portable(store, conn, types, cap)
        assert one_statement(store, conn, types, cap) == expected
        # Asked again, the answer is the same (MariaDB now walks only known groups).
        assert one_statement(store, conn, types, cap) == expected
        conn.rollback()
    return expected


def test_groups_that_appear_and_vanish(queue: readyq.Queue, dialect_name: str) -> None:
    assert check(queue, dialect_name, unknown=True) == {}
    a = [queue.enqueue("t", group="a", weight=2) for _ in range(3)]
    queue.enqueue("t", group="c")
    assert check(queue, dialect_name, unknown=True) == {"a": (3, 2), "c": (1, 1)}
    queue.enqueue("t", group="b", weight=5)  # between two known groups
    assert check(queue, dialect_name, unknown=True) == {
        "a": (3, 2), "b": (1, 5), "c": (1, 1)
    }
    queue.enqueue("t", group="0")  # before the first known group
    assert check(queue, dialect_name, unknown=True) == {
        "0": (1, 1), "a": (3, 2), "b": (1, 5), "c": (1, 1)
    }
    for job_id in a:
        queue.cancel(job_id)
    assert check(queue, dialect_name) == {"0": (1, 1), "b": (1, 5), "c": (1, 1)}
    queue.enqueue("t", group="z")  # after the last known group
    assert check(queue, dialect_name, unknown=True) == {
        "0": (1, 1), "b": (1, 5), "c": (1, 1), "z": (1, 1)
    }


def test_counts_respect_types_cap_schedule_and_dependencies(
    queue: readyq.Queue, dialect_name: str
) -> None:
    for _ in range(5):
        queue.enqueue("x", group="g")
    queue.enqueue("y", group="h", weight=3)
    queue.enqueue("x", group="later", run_after=3600)
    upstream = queue.enqueue("y", group="deps")
    queue.enqueue("x", group="deps", depends_on=[upstream])
    assert check(queue, dialect_name, cap=3, unknown=True) == {
        "g": (3, 1), "h": (1, 3), "deps": (1, 1)
    }
    assert check(queue, dialect_name, ["x"], cap=10) == {"g": (5, 1)}
    assert check(queue, dialect_name, ["y"], cap=10) == {"h": (1, 3), "deps": (1, 1)}


def test_mariadb_reads_step_by_step_beyond_the_known_group_limit(
    queue: readyq.Queue, dialect_name: str
) -> None:
    if dialect_name != "mariadb":
        pytest.skip("the known-group limit is MariaDB's")
    n = mysql_dialect.KNOWN_GROUPS_MAX + 1
    queue.enqueue_many([readyq.JobSpec("t", group=f"g{i:03}") for i in range(n)])
    store = queue.store
    with queue.engine.connect() as conn:
        assert len(portable(store, conn, None, 10)) == n
        assert one_statement(store, conn, None, 10) is None
