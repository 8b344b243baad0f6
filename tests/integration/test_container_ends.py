"""A container's own dependencies decide its end like a job's (issue 44, F): one that ends
badly ends the container ``upstream_failed`` and its dependents after it; a container
without children ends ``done`` when its last dependency does; a retry of the job that
failed brings them all back. Nothing in these graphs waits for ever."""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from readyq import JobState, admin
from readyq.errors import NotRetryable

OPTIONS: dict[str, Any] = {
    "concurrency": 4, "poll_interval": 0.02, "lease_ttl": 10.0, "heartbeat_interval": 2.0,
}


def run_bounded(queue: readyq.Queue, timeout: float = 60.0) -> readyq.WorkerStats:
    """``run_worker(until_idle=True)``, failing the test if it does not return."""
    worker = queue.worker(**OPTIONS)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["stats"] = worker.run(until_idle=True)
        except BaseException as exc:  # handed to the test thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        worker.stop()
        thread.join(30)
        pytest.fail(f"run_worker(until_idle=True) did not return in {timeout}s: "
                    f"{queue.counts()}")
    if "error" in box:
        raise box["error"]
    return box["stats"]


class Handlers:
    """``a`` fails while ``broken`` is set and otherwise adds ``parts`` children to the
    container named in its args (the fan-out pattern); ``part`` and ``b`` succeed."""

    def __init__(self, queue: readyq.Queue) -> None:
        self.broken = True
        self.parts = 0
        self.ran: list[tuple[str, int]] = []
        lock = threading.Lock()

        @queue.handler("a", max_attempts=1)
        def a(job: readyq.Job) -> Any:
            with lock:
                self.ran.append(("a", job.id))
            if self.broken:
                raise RuntimeError("a failed on purpose")
            box = job.args.get("box")
            for i in range(self.parts):
                queue.enqueue("part", {"i": i}, parent=box)
            return "a ok"

        @queue.handler("part")
        def part(job: readyq.Job) -> Any:
            with lock:
                self.ran.append(("part", job.id))
            return "part ok"

        @queue.handler("b")
        def b(job: readyq.Job) -> Any:
            with lock:
                self.ran.append(("b", job.id))
            return "b ok"


def states(queue: readyq.Queue, *ids: int) -> list[JobState]:
    return [queue.get(i).state for i in ids]


def counters(queue: readyq.Queue, job_id: int) -> tuple[int, int, int]:
    """(pending_deps, open_children, failed_children) as stored."""
    j = queue.store.tables.jobs
    with queue.engine.connect() as conn:
        r = conn.execute(sa.select(j.c.pending_deps, j.c.open_children, j.c.failed_children)
                         .where(j.c.id == job_id)).one()
    return int(r[0]), int(r[1]), int(r[2])


def ended(queue: readyq.Queue, job_id: int) -> datetime:
    at = queue.get(job_id).finished_at
    assert at is not None, f"job {job_id} has no finish time"
    return at


def test_a_container_whose_dependency_failed_ends_and_a_retry_brings_it_back(
    queue: readyq.Queue,
) -> None:
    """The issue's exact scenario: a fails, c (depends on a) and b (depends on c) end
    upstream_failed, the worker's until_idle returns; a retry of a revives c and b, and
    once a succeeds, adding children to c as it runs, everything ends done in order."""
    h = Handlers(queue)
    c_args: dict[str, Any] = {}
    a = queue.enqueue("a", c_args)
    c = queue.enqueue_container("fanout", depends_on=[a])
    b = queue.enqueue("b", depends_on=[c])

    run_bounded(queue)

    assert states(queue, a, c, b) == [
        JobState.FAILED, JobState.UPSTREAM_FAILED, JobState.UPSTREAM_FAILED]
    assert queue.get(c).error == f"dependency {a} ended failed"
    assert queue.get(b).error == f"dependency {c} ended upstream_failed"
    ended(queue, c)
    # An ended container takes no more children.
    with pytest.raises(readyq.InvalidParent, match="already finished"):
        queue.enqueue("part", parent=c)
    # The container is not retried for itself: the job that failed is named.
    with pytest.raises(NotRetryable, match=f"retry job {a} instead"):
        admin.retry(queue, c)

    result = admin.retry(queue, a)
    assert result.revived == [(a, "ready"), (b, "waiting")]
    assert result.reopened == [c]
    assert states(queue, a, c, b) == [JobState.READY, JobState.ACTIVE, JobState.WAITING]
    info = queue.get(c)
    assert info.error is None and info.finished_at is None

    # The retried a fans out into c while it runs (c's id reaches it through its args).
    with queue.engine.begin() as conn:
        j = queue.store.tables.jobs
        conn.execute(sa.update(j).where(j.c.id == a).values(args=f'{{"box": {c}}}'))
    h.broken, h.parts = False, 3
    run_bounded(queue)

    assert states(queue, a, c, b) == [JobState.DONE] * 3
    children = queue.jobs(parent=c).jobs
    assert len(children) == 3 and {x.state for x in children} == {JobState.DONE}
    order = [t for t, _ in h.ran]
    assert order[:2] == ["a", "a"] and order[-1] == "b"
    assert all(ended(queue, x.id) <= ended(queue, c) for x in children)
    started = queue.get(b).started_at
    assert started is not None and started >= ended(queue, c)


def test_a_container_that_gets_no_child_ends_done_with_its_last_dependency(
    queue: readyq.Queue,
) -> None:
    """The rule of item 17: a container with dependencies and no children when the last
    of them ends done ends done then (vacuously: none of its children failed)."""
    h = Handlers(queue)
    h.broken = False
    a = queue.enqueue("a", {})
    a2 = queue.enqueue("b")
    c = queue.enqueue_container("fanout", depends_on=[a, a2])
    b = queue.enqueue("b", depends_on=[c])

    run_bounded(queue)

    assert states(queue, a, a2, c, b) == [JobState.DONE] * 4
    c_info, b_info = queue.get(c), queue.get(b)
    assert c_info.error is None and c_info.attempts == 0 and c_info.started_at is None
    assert ended(queue, c) >= max(ended(queue, a), ended(queue, a2))
    assert b_info.started_at is not None and b_info.started_at >= ended(queue, c)
    assert ("fanout", c) not in h.ran


def test_a_container_whose_dependencies_are_done_at_enqueue_stays_open(
    queue: readyq.Queue,
) -> None:
    """No event ends it: like a container without dependencies, it waits for children
    (the README's enqueue_container, then enqueue(parent=...) pattern)."""
    h = Handlers(queue)
    h.broken = False
    a = queue.enqueue("b")
    run_bounded(queue)
    c = queue.enqueue_container("later", depends_on=[a])
    after = queue.enqueue("b", depends_on=[c])
    worker = queue.worker(**OPTIONS)
    for _ in range(3):
        assert worker.run_once().claimed == 0
    assert states(queue, c, after) == [JobState.ACTIVE, JobState.WAITING]

    child = queue.enqueue("part", parent=c)
    assert queue.get(child).state is JobState.READY
    run_bounded(queue)
    assert states(queue, child, c, after) == [JobState.DONE] * 3


def test_a_container_enqueued_after_its_dependency_failed_is_born_upstream_failed(
    queue: readyq.Queue,
) -> None:
    h = Handlers(queue)
    a = queue.enqueue("a", {})
    run_bounded(queue)
    assert queue.get(a).state is JobState.FAILED

    c = queue.enqueue_container("fanout", depends_on=[a])
    b = queue.enqueue("b", depends_on=[c])
    assert states(queue, c, b) == [JobState.UPSTREAM_FAILED] * 2
    assert queue.get(c).error == f"dependency {a} ended failed"
    ended(queue, c)

    # The same inside a batch: the container, a child of it and a job depending on it.
    ids = queue.enqueue_many([
        readyq.JobSpec("fanout", key="box", container=True, depends_on=[a]),
        readyq.JobSpec("part", parent="box"),
        readyq.JobSpec("b", depends_on=["box"]),
    ])
    assert states(queue, *ids) == [JobState.UPSTREAM_FAILED] * 3
    assert queue.get(ids[0]).error == f"dependency {a} ended failed"
    assert counters(queue, ids[0])[1:] == (0, 1)

    # A retry of a revives all of them, and they run once it succeeds.
    result = admin.retry(queue, a)
    assert sorted(result.reopened) == sorted([c, ids[0]])
    h.broken = False
    run_bounded(queue)
    assert states(queue, a, c, b, *ids) == [JobState.DONE] * 6


def test_a_cancelled_dependency_ends_the_container_and_its_children(
    queue: readyq.Queue,
) -> None:
    Handlers(queue)
    a = queue.enqueue("b", run_after=3600)
    c = queue.enqueue_container("fanout", depends_on=[a])
    kids = [queue.enqueue("part", parent=c) for _ in range(2)]
    b = queue.enqueue("b", depends_on=[c])

    assert queue.cancel(a)

    assert states(queue, c, *kids, b) == [JobState.UPSTREAM_FAILED] * 4
    assert queue.get(c).error == f"dependency {a} ended cancelled"
    assert queue.get(b).error == f"dependency {c} ended upstream_failed"
    assert counters(queue, c)[1:] == (0, 2)


def test_nested_containers_follow_their_dependencies(queue: readyq.Queue) -> None:
    """outer depends on a; inner (inside outer) inherits it and holds a job; empty
    (inside outer) has no child. a fails: all end upstream_failed. A retry of a revives
    them; a succeeds: empty ends done with its dependency, inner after its job, outer
    after both."""
    h = Handlers(queue)
    a = queue.enqueue("a", {})
    outer = queue.enqueue_container("outer", depends_on=[a])
    inner = queue.enqueue_container("inner", parent=outer)
    empty = queue.enqueue_container("empty", parent=outer)
    job = queue.enqueue("part", parent=inner)
    after_inner = queue.enqueue("b", depends_on=[inner])
    after_outer = queue.enqueue("b", depends_on=[outer])
    everything = (outer, inner, empty, job, after_inner, after_outer)

    run_bounded(queue)

    assert states(queue, *everything) == [JobState.UPSTREAM_FAILED] * 6
    for box in (outer, inner, empty):
        assert queue.get(box).error == f"dependency {a} ended failed"
    assert counters(queue, outer)[1:] == (0, 2)

    result = admin.retry(queue, a)
    assert sorted(result.reopened) == sorted([outer, inner, empty])
    assert sorted(i for i, _ in result.revived) == sorted([a, job, after_inner, after_outer])
    assert queue.get(outer).state is JobState.ACTIVE
    assert counters(queue, outer) == (1, 2, 0)
    assert counters(queue, empty) == (1, 0, 0)

    h.broken = False
    run_bounded(queue)

    assert states(queue, a, *everything) == [JobState.DONE] * 7
    assert ended(queue, outer) >= max(ended(queue, i) for i in (inner, empty, job))


def test_a_container_depending_on_a_container(queue: readyq.Queue) -> None:
    """c1 depends on a, c2 on c1, b on c2, none with children: a's failure reaches b
    through both; after a retry, a's success ends c1, then c2, then b runs."""
    h = Handlers(queue)
    a = queue.enqueue("a", {})
    c1 = queue.enqueue_container("first", depends_on=[a])
    c2 = queue.enqueue_container("second", depends_on=[c1])
    b = queue.enqueue("b", depends_on=[c2])

    run_bounded(queue)

    assert states(queue, c1, c2, b) == [JobState.UPSTREAM_FAILED] * 3
    assert queue.get(c2).error == f"dependency {c1} ended upstream_failed"

    result = admin.retry(queue, a)
    assert result.reopened == [c1, c2] and result.revived == [(a, "ready"), (b, "waiting")]
    assert [counters(queue, i)[0] for i in (c1, c2, b)] == [1, 1, 1]

    h.broken = False
    run_bounded(queue)

    assert states(queue, a, c1, c2, b) == [JobState.DONE] * 4
    assert ended(queue, a) <= ended(queue, c1) <= ended(queue, c2)
    started = queue.get(b).started_at
    assert started is not None and started >= ended(queue, c2)


def test_a_retry_repairs_a_container_left_active_before_the_fix(queue: readyq.Queue) -> None:
    """A database written by an earlier version holds a container left ``active`` after
    its dependency failed, and a job waiting on it. A retry of the failed job runs it
    again; its success ends the container and releases the job."""
    h = Handlers(queue)
    a = queue.enqueue("a", {})
    c = queue.enqueue_container("fanout", depends_on=[a])
    b = queue.enqueue("b", depends_on=[c])
    run_bounded(queue)
    j = queue.store.tables.jobs
    with queue.engine.begin() as conn:  # the state the earlier version left behind
        for i, state in ((c, "active"), (b, "waiting")):
            conn.execute(sa.update(j).where(j.c.id == i).values(
                state=state, error=None, finished_at=None))
    assert states(queue, a, c, b) == [JobState.FAILED, JobState.ACTIVE, JobState.WAITING]

    admin.retry(queue, a)
    h.broken = False
    run_bounded(queue)

    assert states(queue, a, c, b) == [JobState.DONE] * 3


def rows(queue: readyq.Queue) -> list[tuple[Any, ...]]:
    j = queue.store.tables.jobs
    with queue.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.select(j).order_by(j.c.id))]


def test_close_container_ends_an_empty_container_and_its_dependents_follow(
    queue: readyq.Queue,
) -> None:
    Handlers(queue)
    outer = queue.enqueue_container("outer")
    empty = queue.enqueue_container("empty", parent=outer)
    after = queue.enqueue("b", depends_on=[empty])
    after_outer = queue.enqueue("b", depends_on=[outer])

    queue.close_container(empty)

    info = queue.get(empty)
    assert info.state is JobState.DONE and info.error is None and info.finished_at
    assert queue.get(after).state is JobState.READY
    # Its container's last child ended: it rolls up, and its dependent is released.
    assert states(queue, outer, after_outer) == [JobState.DONE, JobState.READY]
    run_bounded(queue)
    assert states(queue, after, after_outer) == [JobState.DONE] * 2


def test_close_container_refuses_what_it_cannot_close_and_changes_nothing(
    queue: readyq.Queue,
) -> None:
    Handlers(queue)
    job = queue.enqueue("b", run_after=3600)
    busy = queue.enqueue_container("busy")
    queue.enqueue("part", parent=busy, run_after=3600)
    waits = queue.enqueue_container("waits", depends_on=[job])
    ended = queue.enqueue_container("ended")
    queue.cancel(ended)
    miscounted = queue.enqueue_container("miscounted")
    j = queue.store.tables.jobs
    with queue.engine.begin() as conn:  # a counter edited by hand: no child behind it
        conn.execute(sa.update(j).where(j.c.id == miscounted).values(open_children=1))
    before = rows(queue)

    with pytest.raises(readyq.JobNotFound):
        queue.close_container(10_000)
    with pytest.raises(readyq.NotClosable, match=f"job {job} is not a container"):
        queue.close_container(job)
    with pytest.raises(readyq.NotClosable, match=r"has already ended \(cancelled\)"):
        queue.close_container(ended)
    with pytest.raises(readyq.NotClosable, match=r"1 child job\(s\) that have not ended"):
        queue.close_container(busy)
    with pytest.raises(readyq.NotClosable, match=f"still waits for job {job}"):
        queue.close_container(waits)
    with pytest.raises(readyq.NotClosable, match="counts 1 open children though none"):
        queue.close_container(miscounted)

    assert rows(queue) == before


def test_close_container_names_the_job_to_retry_for_a_container_left_before_the_fix(
    queue: readyq.Queue,
) -> None:
    Handlers(queue)
    a = queue.enqueue("a", {})
    c = queue.enqueue_container("fanout", depends_on=[a])
    run_bounded(queue)
    j = queue.store.tables.jobs
    with queue.engine.begin() as conn:  # what an earlier version left behind
        conn.execute(sa.update(j).where(j.c.id == c).values(
            state="active", error=None, finished_at=None))
    before = rows(queue)

    with pytest.raises(readyq.NotClosable, match=f"depends on job {a}, which ended failed"):
        queue.close_container(c)
    assert rows(queue) == before
