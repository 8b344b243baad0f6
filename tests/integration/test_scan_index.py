"""The claim's runnable selection reads a ready index, not the whole jobs table.

20,000 done and 20,000 waiting rows are bulk-inserted next to a few ready jobs, the
statistics are refreshed, and the database's own EXPLAIN of the selection the claim uses
is checked for one of the two ready indexes.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from readyq.claim_order import ClaimOrder
from readyq.sql.ready import claim_sort_keys, runnable

BULK = 20_000
# The indexes that hold ready jobs only (by group, by run_after, by type).
READY_INDEXES = (
    "readyq_jobs_ready_group_ix", "readyq_jobs_state_run_after_ix", "readyq_jobs_ready_type_ix",
)


def bulk_rows(state: str, count: int, now: float) -> list[dict[str, Any]]:
    rows = []
    for i in range(count):
        row: dict[str, Any] = {
            "type": "t" if i % 3 else "u",
            "args": "{}",
            "state": state,
            "is_container": False,
            "group_key": "default" if i % 2 else f"g{i % 7}",
            "weight": 1,
            "priority": i % 5,
            "attempts": 1 if state == "done" else 0,
            "max_attempts": 3,
            "retry_on_timeout": True,
            "pending_deps": 0 if state == "done" else 1,
            "open_children": 0,
            "failed_children": 0,
            "cancel_requested": False,
            "lease_token": 1 if state == "done" else 0,
            "created_at": now - 3600 + i * 0.01,
            "updated_at": now - 60,
        }
        if state == "done":
            row.update(result="null", started_at=now - 120, finished_at=now - 60,
                       lease_owner="old-worker")
        rows.append(row)
    return rows


def explain(queue: readyq.Queue, dialect: str, sql: str) -> tuple[str, list[dict[str, Any]]]:
    with queue.engine.connect() as conn:
        if dialect == "postgresql":
            lines = [r[0] for r in conn.exec_driver_sql("EXPLAIN " + sql)]
            return "\n".join(lines), []
        if dialect == "sqlite":
            rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql).all()
            return "\n".join(str(r[-1]) for r in rows), []
        rows = [dict(r._mapping) for r in conn.exec_driver_sql("EXPLAIN " + sql)]
        return "\n".join(map(str, rows)), rows


def assert_uses_ready_index(dialect: str, text: str, rows: list[dict[str, Any]]) -> None:
    if dialect == "postgresql":
        assert "Seq Scan on readyq_jobs" not in text, text
        assert any(ix in text for ix in READY_INDEXES), text
    elif dialect == "sqlite":
        for line in text.splitlines():
            assert not re.search(r"\bSCAN readyq_jobs\b(?! USING)", line), text
        assert any(f"USING INDEX {ix}" in text or f"USING COVERING INDEX {ix}" in text
                   for ix in READY_INDEXES), text
    else:
        jobs_rows = [r for r in rows if r.get("table") == "readyq_jobs"]
        assert jobs_rows, text
        for r in jobs_rows:
            assert r.get("key") in READY_INDEXES, text
            assert r.get("type") != "ALL", text


def test_runnable_selection_uses_a_ready_index(queue: readyq.Queue, dialect_name: str) -> None:
    t = queue.store.tables
    jobs = t.jobs
    names = {ix["name"] for ix in sa.inspect(queue.engine).get_indexes(jobs.name)}
    assert set(READY_INDEXES) <= names, names

    now = time.time()
    started = time.monotonic()
    with queue.engine.begin() as conn:
        conn.execute(sa.insert(jobs), bulk_rows("done", BULK, now))
        conn.execute(sa.insert(jobs), bulk_rows("waiting", BULK, now))
    insert_seconds = time.monotonic() - started

    @queue.handler("t")
    def t_handler(job: readyq.Job) -> Any:
        return None

    @queue.handler("u")
    def u_handler(job: readyq.Job) -> Any:
        return None

    ready = [queue.enqueue("t", {"n": i}, priority=i % 2) for i in range(5)]
    other_type = queue.enqueue("u")
    delayed = queue.enqueue("t", run_after=3600)
    assert queue.counts() == {"done": BULK, "waiting": BULK, "ready": 7}

    with queue.engine.connect() as conn:
        if dialect_name == "postgresql":
            # Sample every row, so the plan does not depend on which rows ANALYZE drew:
            # with the default sample, the 7 ready rows are sometimes under-counted and
            # the (state, lease_expires) index, which also narrows to state = 'ready',
            # can win a near tie.
            conn.exec_driver_sql("SET default_statistics_target = 1000")
            for table in (t.jobs, t.deps, t.groups):
                conn.exec_driver_sql(f"ANALYZE {table.name}")
        elif dialect_name == "sqlite":
            conn.exec_driver_sql("ANALYZE")
        else:
            conn.exec_driver_sql(f"ANALYZE TABLE {t.jobs.name}, {t.deps.name}").all()
        conn.commit()

    now_expr = queue.store.now()
    variants = {
        "group and types": runnable(t, now_expr, group="default", types=["t"]),
        "group only": runnable(t, now_expr, group="default"),
    }
    for label, where in variants.items():
        stmt = sa.select(jobs.c.id).where(where).order_by(*claim_sort_keys(t)).limit(10)
        sql = str(stmt.compile(dialect=queue.engine.dialect,
                               compile_kwargs={"literal_binds": True}))
        text, rows = explain(queue, dialect_name, sql)
        try:
            assert_uses_ready_index(dialect_name, text, rows)
        except AssertionError:
            pytest.fail(f"{label}: the plan does not read a ready index:\n{sql}\n{text}")

    # The claim still finds exactly the runnable jobs of its types.
    claimed = queue.store.claim_jobs(ClaimOrder(
        owner="t", cap=100, limit=10, lease_ttl=30, types=["t"],
    ))
    assert sorted(c.id for c in claimed) == sorted(ready)
    assert queue.get(other_type).state is readyq.JobState.READY
    assert queue.get(delayed).state is readyq.JobState.READY
    claimed = queue.store.claim_jobs(ClaimOrder(
        owner="t", cap=100, limit=10, lease_ttl=30, types=None,
    ))
    assert [c.id for c in claimed] == [other_type]
    # Generous: only to notice a pathological bulk insert, not to benchmark.
    assert insert_seconds < 60
