"""Pauses: what a claim leaves alone while a group, a type or a type in a group is
paused, the share of the rest, the end of a pause by ``until`` on the database clock,
reservations released, and bad input. Every test runs on SQLite, PostgreSQL and MariaDB.

Claims are made through the store (as a worker makes them), so each test sees exactly
which rows one claim took.
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

import readyq
from readyq import JobState
from readyq.claim_order import ClaimOrder
from readyq_test_support import wait_for


def claim(queue: readyq.Queue, *, cap: int = 100, types: list[str] | None = None) -> list:
    return queue.store.claim_jobs(ClaimOrder(
        owner="test", cap=cap, limit=cap, lease_ttl=60.0, types=types or ["x", "y"],
    ))


def gate_pauses(queue: readyq.Queue) -> int:
    g = queue.store.tables.gate
    with queue.engine.connect() as conn:
        return int(conn.execute(sa.select(g.c.pauses)).scalar_one())


def reserved_ids(queue: readyq.Queue) -> list[int]:
    r = queue.store.tables.reservations
    with queue.engine.connect() as conn:
        return [int(i) for i in conn.execute(sa.select(r.c.job_id)).scalars()]


def test_a_paused_group_is_not_claimed_until_resumed(queue: readyq.Queue) -> None:
    a = queue.enqueue_many([readyq.JobSpec("x", group="a") for _ in range(3)])
    b = queue.enqueue_many([readyq.JobSpec("x", group="b") for _ in range(3)])
    queue.pause(group="a")
    assert sorted(c.id for c in claim(queue)) == b
    assert claim(queue) == []
    assert queue.resume(group="a") is True
    assert queue.resume(group="a") is False
    assert sorted(c.id for c in claim(queue)) == a
    assert queue.pauses() == [] and gate_pauses(queue) == 0


def test_a_paused_type_and_a_paused_type_in_one_group(queue: readyq.Queue) -> None:
    ax, ay, bx, by = (
        queue.enqueue(ty, group=g) for g, ty in (("a", "x"), ("a", "y"), ("b", "x"), ("b", "y"))
    )
    queue.pause(type="y")
    queue.pause(group="a", type="x")
    assert [c.id for c in claim(queue)] == [bx]
    # A claim of every type leaves them alone too.
    assert queue.store.claim_jobs(ClaimOrder(
        owner="t", cap=10, limit=10, lease_ttl=60.0, types=None,
    )) == []
    listed = {(p.group, p.type) for p in queue.pauses()}
    assert listed == {(None, "y"), ("a", "x")}
    queue.resume(type="y")
    assert sorted(c.id for c in claim(queue)) == sorted([ay, by])
    queue.resume(group="a", type="x")
    assert [c.id for c in claim(queue)] == [ax]


def test_pair_pauses_in_a_claim_of_many_groups(queue: readyq.Queue) -> None:
    """Groups whose types differ are claimed by separate statements: each one's own."""
    jobs = {
        (g, ty): queue.enqueue_many([readyq.JobSpec(ty, group=g) for _ in range(2)])
        for g in ("a", "b", "c") for ty in ("x", "y")
    }
    queue.pause(group="a", type="x")
    queue.pause(group="b", type="y")
    got = claim(queue)
    assert Counter((c.group, c.type) for c in got) == {
        ("a", "y"): 2, ("b", "x"): 2, ("c", "x"): 2, ("c", "y"): 2,
    }
    assert {c.id for c in got}.isdisjoint(jobs[("a", "x")] + jobs[("b", "y")])


def test_the_cap_is_shared_among_the_groups_not_paused(queue: readyq.Queue) -> None:
    for g in ("a", "b", "c"):
        queue.enqueue_many([readyq.JobSpec("x", group=g) for _ in range(10)])
    queue.pause(group="a")
    got = claim(queue, cap=4)
    assert Counter(c.group for c in got) == {"b": 2, "c": 2}


def test_running_jobs_of_a_paused_group_go_on_and_count_against_the_cap(
    queue: readyq.Queue,
) -> None:
    release = threading.Event()

    @queue.handler("x")
    def work(job: readyq.Job) -> str:
        release.wait(10)
        return "ok"

    running = queue.enqueue("x", group="a")
    worker = queue.worker(concurrency=2, poll_interval=0.02)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: queue.get(running).state is JobState.RUNNING, "the first start")
        queue.pause(group="a")
        waiting = queue.enqueue("x", group="a")
        other = queue.enqueue("x", group="b")
        wait_for(lambda: queue.get(other).state is JobState.RUNNING, "group b's start")
        release.set()
        wait_for(lambda: queue.get(running).state is JobState.DONE, "the running job's end")
        wait_for(lambda: queue.get(other).state is JobState.DONE, "group b's end")
        assert queue.get(waiting).state is JobState.READY
        queue.resume(group="a")
        wait_for(lambda: queue.get(waiting).state is JobState.DONE, "the resumed job")
    finally:
        release.set()
        worker.stop()
        thread.join(10)


def test_until_ends_a_pause_on_the_database_clock(queue: readyq.Queue) -> None:
    job = queue.enqueue("x", group="a")
    queue.pause(group="a", until=60)
    (p,) = queue.pauses()
    assert p.group == "a" and p.type is None and p.until is not None
    assert timedelta(seconds=55) < p.until - p.since <= timedelta(seconds=61)
    assert claim(queue) == []
    queue.store.clock_offset = 61.0
    assert [c.id for c in claim(queue)] == [job]
    # The claim that saw it end removed it.
    assert gate_pauses(queue) == 0 and queue.pauses() == []


def test_pausing_again_replaces_until(queue: readyq.Queue) -> None:
    queue.enqueue("x", group="a")
    queue.pause(group="a", until=timedelta(seconds=10))
    queue.pause(group="a")  # until a resume
    (p,) = queue.pauses()
    assert p.until is None and gate_pauses(queue) == 1
    queue.store.clock_offset = 3600.0
    assert claim(queue) == []
    at = datetime.now(timezone.utc) + timedelta(hours=3)
    queue.pause(group="a", until=at)
    (p,) = queue.pauses()
    assert p.until is not None and abs((p.until - at).total_seconds()) < 0.01


def test_bad_pauses_are_refused_and_write_nothing(queue: readyq.Queue) -> None:
    bad: list[dict[str, object]] = [
        {},
        {"group": ""},
        {"type": 3},
        {"group": "a\x00b"},
        {"group": "a", "until": 0},
        {"group": "a", "until": -5},
        {"group": "a", "until": float("inf")},
        {"group": "a", "until": datetime(2030, 1, 1)},
        {"group": "a", "until": "30m"},
    ]
    for kwargs in bad:
        with pytest.raises(readyq.InvalidPause):
            queue.pause(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(readyq.InvalidPause):
        queue.resume()
    assert queue.pauses() == [] and gate_pauses(queue) == 0


def test_a_reservation_held_by_a_paused_group_is_released(queue: readyq.Queue) -> None:
    queue.resource("gpu", capacity=2)
    release = threading.Event()
    started: list[int] = []

    @queue.handler("x", uses={"gpu": 1})
    def work(job: readyq.Job) -> None:
        started.append(job.id)
        release.wait(10)

    first = queue.enqueue("x", group="a")
    worker = queue.worker(concurrency=4, poll_interval=0.02)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: started == [first], "the first start")
        big = queue.enqueue("x", group="big", uses={"gpu": 2})
        wait_for(lambda: reserved_ids(queue) == [big], "the big job's reservation")
        small = queue.enqueue("x", group="b")
        queue.pause(group="big")
        # The big job's reservation is released at once. (A claim between the small
        # job's enqueue and the pause may have reserved the small job behind it: the
        # next claim serves that one.)
        assert big not in reserved_ids(queue)
        wait_for(lambda: small in started, "the small job's start, no longer held back")
        assert big not in started
        release.set()
        wait_for(lambda: queue.get(small).state is JobState.DONE, "the small job's end")
        assert queue.get(big).state is JobState.READY
    finally:
        release.set()
        worker.stop()
        thread.join(10)


def test_a_worker_that_weighs_resources_leaves_paused_jobs(queue: readyq.Queue) -> None:
    queue.resource("gpu", capacity=4)
    ran: list[int] = []

    @queue.handler("x", uses={"gpu": 1})
    def x(job: readyq.Job) -> None:
        ran.append(job.id)

    @queue.handler("y", uses={"gpu": 1})
    def y(job: readyq.Job) -> None:
        ran.append(job.id)

    held = [queue.enqueue("x", group="a"), queue.enqueue("y", group="b")]
    free = [queue.enqueue("y", group="a"), queue.enqueue("x", group="b")]
    queue.pause(group="a", type="x")
    queue.pause(group="b", type="y")
    worker = queue.worker(concurrency=4, poll_interval=0.02)

    def ticked() -> bool:
        worker.run_once()
        return all(queue.get(j).state is JobState.DONE for j in free)

    try:
        wait_for(ticked, "the jobs no pause holds")
        for _ in range(5):
            worker.run_once()
    finally:
        worker.stop()
    assert sorted(ran) == sorted(free)
    assert all(queue.get(j).state is JobState.READY for j in held)
