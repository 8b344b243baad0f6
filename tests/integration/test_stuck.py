"""``Queue.stuck()`` (issue 44, F18): what cannot progress on its own is reported, with why
and what to do, and nothing that can progress is: not a ready job deferred by
``run_after``, not a job waiting for one that runs, not a container with children or
with a dependency to wait for."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from readyq import JobState, admin
from readyq.sql.jobs import empty_containers
from readyq_test_support import run_until_idle


def set_row(queue: readyq.Queue, job_id: int, **values: Any) -> None:
    """Write a row by hand, as an earlier readyq or an operator's edit left it."""
    j = queue.store.tables.jobs
    with queue.engine.begin() as conn:
        conn.execute(sa.update(j).where(j.c.id == job_id).values(**values))


def handlers(queue: readyq.Queue) -> dict[str, bool]:
    broken = {"a": True}

    @queue.handler("a", max_attempts=1)
    def a(job: readyq.Job) -> str:
        if broken["a"]:
            raise RuntimeError("a failed on purpose")
        return "ok"

    @queue.handler("b")
    def b(job: readyq.Job) -> str:
        return "ok"

    return broken


def test_what_can_progress_is_not_stuck(queue: readyq.Queue) -> None:
    handlers(queue)
    deferred = queue.enqueue("b", run_after=3600)             # ready, run_after ahead
    after = queue.enqueue("b", depends_on=[deferred])         # waits for it
    box = queue.enqueue_container("box")
    queue.enqueue("b", parent=box, run_after=3600)            # a container with a child
    gate = queue.enqueue_container("gate", depends_on=[deferred])  # waits for a dependency
    queue.enqueue("b", depends_on=[gate])
    failed = queue.enqueue("a", {})
    queue.enqueue_container("doomed", depends_on=[failed])
    run_until_idle(queue, types=["a"])                        # a fails; the rest follows
    assert queue.get(after).state is JobState.WAITING

    queue.store.clock_offset = 7200  # everything unchanged for two hours
    assert queue.stuck() == []
    assert admin.status(queue).stuck == []


def test_an_empty_container_is_stuck_once_it_has_been_so_for_a_while(
    queue: readyq.Queue,
) -> None:
    box = queue.enqueue_container("open")
    after = queue.enqueue("b", depends_on=[box])
    other = queue.enqueue("b", depends_on=[box])

    assert queue.stuck() == []  # empty for less than a minute: being filled, maybe
    [found] = queue.stuck(empty_after=0)
    assert (found.id, found.reason, found.state, found.is_container) == (
        box, "empty_container", "active", True)
    assert found.blocks == 2
    assert "no child and nothing to wait for" in found.detail
    assert "2 job(s) wait for it" in found.detail
    assert f"close_container({box})" in found.hint and f"readyq close {box}" in found.hint

    queue.store.clock_offset = 61
    [found] = queue.stuck()
    assert found.id == box and found.age >= 60
    assert queue.stuck(empty_after=timedelta(minutes=2)) == []

    queue.close_container(box)
    assert queue.stuck(empty_after=0) == []
    assert {queue.get(i).state for i in (after, other)} == {JobState.READY}


def test_a_container_left_active_by_an_earlier_version_is_stuck_until_its_retry(
    queue: readyq.Queue,
) -> None:
    """The database of issue 44's item 16 before the fix: a failed, c (depends on a)
    active, b (depends on c) waiting. c is reported with a as the cause; a retry of a
    that succeeds ends c and releases b, and nothing is stuck any more."""
    broken = handlers(queue)
    a = queue.enqueue("a", {})
    c = queue.enqueue_container("fanout", depends_on=[a])
    b = queue.enqueue("b", depends_on=[c])
    run_until_idle(queue)
    set_row(queue, c, state="active", error=None, finished_at=None)
    set_row(queue, b, state="waiting", error=None, finished_at=None)

    [found] = queue.stuck()
    assert (found.id, found.reason, found.cause, found.cause_state) == (
        c, "upstream_ended", a, "failed")
    assert found.blocks == 1 and found.pending_deps == 1 and found.unfinished == 1
    assert f"waits for job {a}, which ended failed" in found.detail
    assert f"retry job {a}" in found.hint

    admin.retry(queue, a)
    assert queue.stuck() == []  # a is ready: c waits for it again
    broken["a"] = False
    run_until_idle(queue)
    assert [queue.get(i).state for i in (a, c, b)] == [JobState.DONE] * 3


def test_a_waiting_job_whose_counter_is_wrong_is_stuck(queue: readyq.Queue) -> None:
    handlers(queue)
    first = queue.enqueue("b", run_after=3600)
    second = queue.enqueue("b", run_after=3600)
    gone = queue.enqueue("b", run_after=3600)
    over = queue.enqueue("b", depends_on=[first])
    orphan = queue.enqueue("b", depends_on=[gone])
    early = queue.enqueue("b", depends_on=[first, second])
    box = queue.enqueue_container("box", depends_on=[first])
    fine = queue.enqueue("b", depends_on=[first, second])
    set_row(queue, over, pending_deps=2)
    set_row(queue, gone, state="done", finished_at=0.0)  # done, its release never made
    set_row(queue, early, pending_deps=1)
    set_row(queue, box, pending_deps=3)

    found = {s.id: s for s in queue.stuck()}

    assert set(found) == {over, orphan, early, box}, found
    assert fine not in found
    assert {s.reason for s in found.values()} == {"pending_mismatch"}
    assert (found[over].pending_deps, found[over].unfinished) == (2, 1)
    assert "counts 2 unfinished dependencies where 1 are not done" in found[over].detail
    assert "never released" in found[over].detail
    assert "never released" in found[orphan].detail
    assert "released when 1 of them are done" in found[early].detail
    assert found[box].is_container and found[box].state == "active"
    assert "cancel the job" in found[over].hint and "cancel the container" in found[box].hint


def test_the_limit_and_bad_arguments(queue: readyq.Queue) -> None:
    boxes = [queue.enqueue_container("open") for _ in range(5)]
    assert [s.id for s in queue.stuck(empty_after=0, limit=3)] == boxes[:3]
    before = queue.counts()
    for bad in ({"limit": 0}, {"limit": 1001}, {"limit": True}, {"empty_after": -1},
                {"empty_after": float("nan")}, {"empty_after": "1m"}):
        with pytest.raises(readyq.InvalidFilter):
            queue.stuck(**bad)
    assert queue.counts() == before


def test_the_status_lists_what_is_stuck(queue: readyq.Queue) -> None:
    box = queue.enqueue_container("open")
    st = admin.status(queue, empty_after=0)
    assert [s.id for s in st.stuck] == [box]
    doc = st.to_json()
    assert doc["stuck"][0]["id"] == box and doc["stuck"][0]["reason"] == "empty_container"
    assert admin.status(queue).stuck == []  # within the default minute


def test_open_containers_are_read_through_their_index(
    queue: readyq.Queue, dialect_name: str
) -> None:
    """With 20,000 finished jobs around a few open containers, the read of the empty
    ones goes through the index of open containers (migration readyq_0012), never the
    whole table."""
    t = queue.store.tables
    j = t.jobs
    now = queue.store.read(lambda c: float(c.execute(sa.select(queue.store.now())).scalar_one()))
    done = [{
        "type": "t", "args": "{}", "state": "done", "is_container": i % 10 == 0,
        "group_key": "default", "weight": 1, "priority": 0, "attempts": 1, "max_attempts": 3,
        "retry_on_timeout": True, "pending_deps": 0, "open_children": 0,
        "failed_children": 0, "cancel_requested": False, "lease_token": 1,
        "created_at": now - 3600, "updated_at": now - 3600, "finished_at": now - 3600,
    } for i in range(20_000)]
    with queue.engine.begin() as conn:
        conn.execute(sa.insert(j), done)
    boxes = [queue.enqueue_container("open") for _ in range(3)]
    with queue.engine.connect() as conn:
        if dialect_name == "postgresql":
            conn.exec_driver_sql(f"ANALYZE {j.name}")
        elif dialect_name == "sqlite":
            conn.exec_driver_sql("ANALYZE")
        else:
            conn.exec_driver_sql(f"ANALYZE TABLE {j.name}").all()
        conn.commit()

    stmt = empty_containers(t, now + 10, 100)
    sql = str(stmt.compile(dialect=queue.engine.dialect, compile_kwargs={"literal_binds": True}))
    index = f"{j.name}_active_type_ix"
    with queue.engine.connect() as conn:
        if dialect_name == "postgresql":
            plan = "\n".join(r[0] for r in conn.exec_driver_sql("EXPLAIN " + sql))
            assert "Seq Scan" not in plan and index in plan, plan
        elif dialect_name == "sqlite":
            plan = "\n".join(str(r[-1]) for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql))
            assert f"INDEX {index}" in plan, plan
        else:
            rows = [dict(r._mapping) for r in conn.exec_driver_sql("EXPLAIN " + sql)]
            assert [r["key"] for r in rows] == [index] and rows[0]["type"] != "ALL", rows
    assert [s.id for s in queue.stuck(empty_after=0)] == boxes
