"""A page of failed jobs and a page of one type's ready jobs are index range scans.

20,000 done jobs are bulk-inserted after a few failed ones (so that a walk of the
primary key, newest first, would step over every done job before the first failed one),
with ready jobs of two types; the statistics are refreshed, and the database's own
EXPLAIN of each page's query is checked for the index that holds its jobs.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from readyq import JobFilter
from readyq.schema import bad_end_index_name, ready_type_index_name
from readyq.sql.listing import page_query, progress_query

BULK = 20_000


def rows(state: str, count: int, now: float, type_: str = "t") -> list[dict[str, Any]]:
    return [
        {
            "type": type_, "args": "{}", "state": state, "is_container": False,
            "group_key": f"g{i % 5}", "weight": 1, "priority": 0,
            "attempts": 1, "max_attempts": 1, "retry_on_timeout": True, "pending_deps": 0,
            "open_children": 0, "failed_children": 0, "cancel_requested": False,
            "lease_token": 1, "created_at": now - 3600, "updated_at": now - 60,
            "finished_at": None if state == "ready" else now - 60,
            "error": "RuntimeError: boom" if state == "failed" else None,
        }
        for i in range(count)
    ]


def explain(queue: readyq.Queue, dialect: str, sql: str) -> tuple[str, list[dict[str, Any]]]:
    with queue.engine.connect() as conn:
        if dialect == "postgresql":
            return "\n".join(r[0] for r in conn.exec_driver_sql("EXPLAIN " + sql)), []
        if dialect == "sqlite":
            found = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql).all()
            return "\n".join(str(r[-1]) for r in found), []
        found = [dict(r._mapping) for r in conn.exec_driver_sql("EXPLAIN " + sql)]
        return "\n".join(map(str, found)), found


def assert_range_scan(dialect: str, index: str, text: str, found: list[dict[str, Any]]) -> None:
    if dialect == "postgresql":
        assert "Seq Scan" not in text and index in text, text
    elif dialect == "sqlite":
        assert not re.search(r"\bSCAN readyq_jobs\b(?! USING)", text), text
        assert f"INDEX {index}" in text, text
    else:
        jobs = [r for r in found if r.get("table") == "readyq_jobs"]
        assert jobs and all(r.get("key") == index for r in jobs), text
        assert all(r.get("type") in ("ref", "range") for r in jobs), text


def test_pages_of_failed_and_of_one_type_s_ready_jobs_read_their_index(
    queue: readyq.Queue, dialect_name: str
) -> None:
    t = queue.store.tables
    now = time.time()
    with queue.engine.begin() as conn:
        conn.execute(sa.insert(t.jobs), rows("failed", 60, now))
        conn.execute(sa.insert(t.jobs), rows("ready", 30, now))
        conn.execute(sa.insert(t.jobs), rows("done", BULK, now))
        conn.execute(sa.insert(t.jobs), rows("ready", 2000, now, type_="u"))
    with queue.engine.connect() as conn:
        if dialect_name == "postgresql":
            conn.exec_driver_sql("SET default_statistics_target = 1000")
            conn.exec_driver_sql(f"ANALYZE {t.jobs.name}")
        elif dialect_name == "sqlite":
            conn.exec_driver_sql("ANALYZE")
        else:
            conn.exec_driver_sql(f"ANALYZE TABLE {t.jobs.name}").all()
        conn.commit()
    pages = {
        "failed": (JobFilter(state="failed"), bad_end_index_name(t.jobs.name)),
        "ready of one type": (JobFilter(state="ready", type="t"),
                              ready_type_index_name(t.jobs.name)),
    }
    for label, (flt, index) in pages.items():
        for after in (None, 10**9):
            stmt = page_query(t, flt, now, order="newest", after_id=after, limit=51)
            sql = str(stmt.compile(dialect=queue.engine.dialect,
                                   compile_kwargs={"literal_binds": True}))
            text, found = explain(queue, dialect_name, sql)
            try:
                assert_range_scan(dialect_name, index, text, found)
            except AssertionError:
                pytest.fail(f"{label}: not a range scan of {index}:\n{sql}\n{text}")
    # And the pages hold what they should.
    failed = queue.jobs(state="failed", limit=50)
    assert len(failed) == 50 and {j.state.value for j in failed} == {"failed"}
    assert len(queue.jobs(state="failed", limit=50, cursor=failed.next_cursor)) == 10
    ready = queue.jobs(state="ready", type="t", limit=50)
    assert len(ready) == 30 and {j.type for j in ready} == {"t"}


def test_a_page_s_progress_is_read_by_the_checkpoints_primary_key(
    queue: readyq.Queue, dialect_name: str
) -> None:
    """The listing reads its page's progress apart from the page (whose plan the test
    above checks), by primary key: never a scan of every checkpoint."""
    t = queue.store.tables
    now = time.time()
    with queue.engine.begin() as conn:
        conn.execute(sa.insert(t.jobs), rows("done", BULK, now))
        ids = [int(i) for i in conn.execute(sa.select(t.jobs.c.id)).scalars()]
        conn.execute(sa.insert(t.checkpoints), [
            {"job_id": i, "progress_current": 1.0, "progress_total": 2.0, "progress_at": now}
            for i in ids
        ])
    with queue.engine.connect() as conn:
        if dialect_name == "postgresql":
            conn.exec_driver_sql(f"ANALYZE {t.checkpoints.name}")
        elif dialect_name == "sqlite":
            conn.exec_driver_sql("ANALYZE")
        else:
            conn.exec_driver_sql(f"ANALYZE TABLE {t.checkpoints.name}").all()
        conn.commit()
    page = sorted(ids)[-51:]
    sql = str(progress_query(t, page).compile(
        dialect=queue.engine.dialect, compile_kwargs={"literal_binds": True}))
    text, found = explain(queue, dialect_name, sql)
    name = t.checkpoints.name
    if dialect_name == "postgresql":
        assert "Seq Scan" not in text and f"Index Scan using {name}_pk" in text, text
    elif dialect_name == "sqlite":
        assert not re.search(rf"\bSCAN {name}\b", text) and f"SEARCH {name}" in text, text
    else:
        [row] = [r for r in found if r.get("table") == name]
        assert row.get("key") == "PRIMARY" and row.get("type") in ("range", "eq_ref"), text
    listed = queue.jobs(limit=51)
    assert all(j.progress is not None and j.progress.fraction == 0.5 for j in listed)
