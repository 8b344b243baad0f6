"""Cancel: pending jobs never run, finished jobs are left alone, running handlers learn
of it at their next heartbeat, and containers cancel their pending children."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from readyq import JobState

WORKER_OPTIONS: dict[str, Any] = {
    "concurrency": 4,
    "poll_interval": 0.02,
    "lease_ttl": 10.0,
    "heartbeat_interval": 0.1,
}


def wait_for(condition: Callable[[], bool], timeout: float = 15.0, interval: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(interval)


@contextmanager
def background(queue: readyq.Queue, **options: Any) -> Iterator[readyq.Worker]:
    worker = queue.worker(**{**WORKER_OPTIONS, **options})
    errors: list[BaseException] = []

    def target() -> None:
        try:
            worker.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(30)
        assert not thread.is_alive(), "the worker did not stop"
    if errors:
        raise errors[0]


def run_bounded(queue: readyq.Queue, timeout: float = 60.0) -> readyq.WorkerStats:
    worker = queue.worker(**WORKER_OPTIONS)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["stats"] = worker.run(until_idle=True)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        worker.stop()
        thread.join(30)
        pytest.fail(f"the worker did not become idle within {timeout}s: {queue.counts()}")
    if "error" in box:
        raise box["error"]
    return box["stats"]


class Calls:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ids: list[int] = []

    def add(self, job_id: int) -> None:
        with self.lock:
            self.ids.append(job_id)


@pytest.fixture
def calls(queue: readyq.Queue) -> Calls:
    c = Calls()

    @queue.handler("work")
    def work(job: readyq.Job) -> Any:
        c.add(job.id)
        return "ran"

    @queue.handler("boom", max_attempts=1)
    def boom(job: readyq.Job) -> Any:
        c.add(job.id)
        raise RuntimeError("failed on purpose")

    return c


def test_cancel_a_ready_job(queue: readyq.Queue, calls: Calls) -> None:
    job_id = queue.enqueue("work")
    waiting = queue.enqueue("work", depends_on=[job_id])
    other = queue.enqueue("work")

    assert queue.cancel(job_id) is True

    info = queue.get(job_id)
    assert info.state is JobState.CANCELLED
    assert info.finished_at is not None and info.attempts == 0
    assert queue.get(waiting).state is JobState.UPSTREAM_FAILED
    run_bounded(queue)
    assert calls.ids == [other]
    assert queue.get(job_id).state is JobState.CANCELLED
    assert queue.get(job_id).started_at is None


def test_cancel_a_waiting_and_a_delayed_job(queue: readyq.Queue, calls: Calls) -> None:
    first = queue.enqueue("work", run_after=600)
    second = queue.enqueue("work", depends_on=[first])
    assert queue.cancel(second) is True
    assert queue.cancel(first) is True
    queue.store.clock_offset = 601
    run_bounded(queue)
    assert calls.ids == []
    assert queue.get(first).state is JobState.CANCELLED
    assert queue.get(second).state is JobState.CANCELLED


def test_cancel_returns_false_for_finished_jobs(queue: readyq.Queue, calls: Calls) -> None:
    done = queue.enqueue("work")
    failed = queue.enqueue("boom")
    upstream = queue.enqueue("work", depends_on=[failed])
    cancelled = queue.enqueue("work", run_after=600)
    assert queue.cancel(cancelled) is True
    run_bounded(queue)
    snapshot = {i: queue.get(i) for i in (done, failed, upstream, cancelled)}
    assert [s.state for s in snapshot.values()] == [
        JobState.DONE, JobState.FAILED, JobState.UPSTREAM_FAILED, JobState.CANCELLED
    ]

    for job_id in snapshot:
        assert queue.cancel(job_id) is False

    for job_id, before in snapshot.items():
        assert queue.get(job_id) == before  # unchanged, result and error included
    with pytest.raises(readyq.JobNotFound):
        queue.cancel(done + 1000)


@pytest.mark.parametrize("explicit_heartbeat", [True, False])
def test_cancel_a_running_job(queue: readyq.Queue, explicit_heartbeat: bool) -> None:
    started = threading.Event()
    saw: dict[str, Any] = {}

    @queue.handler("long", max_attempts=3)
    def long(job: readyq.Job) -> Any:
        started.set()
        deadline = time.monotonic() + 10
        while not job.cancelled and time.monotonic() < deadline:
            if explicit_heartbeat:
                job.heartbeat()
            time.sleep(0.02)
        saw["cancelled"] = job.cancelled
        saw["attempt"] = job.attempt
        raise RuntimeError("stopping because I was cancelled")

    @queue.handler("after")
    def after_handler(job: readyq.Job) -> Any:
        return "should not run"

    job_id = queue.enqueue("long")
    dependent = queue.enqueue("after", depends_on=[job_id])
    # With explicit heartbeats the worker's own are rare, so the handler's call is what
    # brings the news; without, the worker's heartbeat (every 0.1 s) does.
    interval = 5.0 if explicit_heartbeat else 0.1
    with background(queue, heartbeat_interval=interval, lease_ttl=20) as worker:
        assert started.wait(10)
        wait_for(lambda: queue.get(job_id).state is JobState.RUNNING)
        asked = time.monotonic()
        assert queue.cancel(job_id) is True
        wait_for(lambda: queue.get(job_id).is_terminal)
        took = time.monotonic() - asked
        wait_for(lambda: worker.stats.cancelled == 1)

    assert saw == {"cancelled": True, "attempt": 1}
    assert took < 3.0
    info = queue.get(job_id)
    assert info.state is JobState.CANCELLED
    assert info.attempts == 1  # not retried, although attempts were left
    assert info.error is not None and "stopping because I was cancelled" in info.error
    dep = queue.get(dependent)
    assert dep.state is JobState.UPSTREAM_FAILED
    assert dep.error == f"dependency {job_id} ended cancelled"


def test_cancelled_running_job_that_returns_a_result_ends_done(queue: readyq.Queue) -> None:
    started = threading.Event()

    @queue.handler("long")
    def long(job: readyq.Job) -> Any:
        started.set()
        deadline = time.monotonic() + 10
        while not job.cancelled and time.monotonic() < deadline:
            job.heartbeat()
            time.sleep(0.02)
        return {"finished_anyway": job.cancelled}

    job_id = queue.enqueue("long")
    with background(queue) as worker:
        assert started.wait(10)
        wait_for(lambda: queue.get(job_id).state is JobState.RUNNING)
        assert queue.cancel(job_id) is True
        wait_for(lambda: queue.get(job_id).is_terminal)
        wait_for(lambda: worker.stats.done == 1)
    info = queue.get(job_id)
    assert info.state is JobState.DONE
    assert info.result == {"finished_anyway": True}


def test_cancel_requested_while_running_survives_a_worker_stop(queue: readyq.Queue) -> None:
    """A stopping worker hands back its running jobs; a cancelled one must not run again."""
    started = threading.Event()
    release = threading.Event()
    attempts: list[int] = []

    @queue.handler("stubborn", max_attempts=3)
    def stubborn(job: readyq.Job) -> Any:
        attempts.append(job.attempt)
        started.set()
        release.wait(10)  # ignores the cancel
        return "late"

    job_id = queue.enqueue("stubborn")
    try:
        with background(queue, heartbeat_interval=5.0, lease_ttl=20):
            assert started.wait(10)
            wait_for(lambda: queue.get(job_id).state is JobState.RUNNING)
            assert queue.cancel(job_id) is True
        # The worker stopped while the handler still ran.
        info = queue.get(job_id)
        assert info.state is JobState.CANCELLED, info.state
        assert info.finished_at is not None
    finally:
        release.set()
    run_bounded(queue)
    assert attempts == [1]
    assert queue.get(job_id).state is JobState.CANCELLED


def test_cancelling_a_container_cancels_its_pending_children(
    queue: readyq.Queue, calls: Calls
) -> None:
    box = queue.enqueue_container("batch")
    finished_child = queue.enqueue("work", parent=box)
    run_bounded(queue)
    assert queue.get(finished_child).state is JobState.DONE
    assert queue.get(box).state is JobState.DONE
    calls.ids.clear()

    box = queue.enqueue_container("batch")
    first = queue.enqueue("work", parent=box, run_after=600)
    ready = [queue.enqueue("work", parent=box) for _ in range(2)]
    waiting = queue.enqueue("work", parent=box, depends_on=[ready[0]])
    inner = queue.enqueue_container("batch", parent=box)
    deep = queue.enqueue("work", parent=inner, run_after=600)
    after_box = queue.enqueue("work", depends_on=[box])
    outside = queue.enqueue("work")

    assert queue.cancel(box) is True

    for child in (first, *ready, waiting, deep):
        info = queue.get(child)
        assert info.state in (JobState.CANCELLED, JobState.UPSTREAM_FAILED), (child, info.state)
    assert queue.get(ready[1]).state is JobState.CANCELLED
    assert queue.get(deep).state is JobState.CANCELLED
    # A cancelled container, and every container inside it, ends cancelled once its
    # children have ended: never failed, since nothing in it failed.
    assert queue.get(inner).state is JobState.CANCELLED
    info = queue.get(box)
    assert info.state is JobState.CANCELLED
    assert info.finished_at is not None
    dep = queue.get(after_box)
    assert dep.state is JobState.UPSTREAM_FAILED
    assert dep.error == f"dependency {box} ended cancelled"
    assert queue.cancel(box) is False

    queue.store.clock_offset = 601
    run_bounded(queue)
    assert calls.ids == [outside]


def test_a_container_cancels_its_children_in_id_order(queue: readyq.Queue) -> None:
    # A chain: each child waits on the one enqueued before it. Cancelled in id order,
    # the first is cancelled and the rest end upstream_failed, whatever order the
    # database keeps the rows in.
    box = queue.enqueue_container("batch")
    chain = [queue.enqueue("work", parent=box)]
    for _ in range(4):
        chain.append(queue.enqueue("work", parent=box, depends_on=[chain[-1]]))
    # Rewrite the first child's row through an indexed column, so that a scan of the
    # container's children no longer meets it first (on PostgreSQL, the row moves).
    jobs = queue.store.tables.jobs
    with queue.engine.begin() as conn:
        for parent in (None, box):
            conn.execute(sa.update(jobs).where(jobs.c.id == chain[0]).values(parent_id=parent))

    assert queue.cancel(box) is True

    head = queue.get(chain[0])
    assert (head.state, head.error) == (JobState.CANCELLED, "cancelled")
    for before, child in itertools.pairwise(chain):
        info = queue.get(child)
        assert info.state is JobState.UPSTREAM_FAILED, (child, info.state)
        assert info.error == f"dependency {before} ended " + (
            "cancelled" if before == chain[0] else "upstream_failed")
    assert queue.get(box).state is JobState.CANCELLED


def test_cancelling_an_empty_container(queue: readyq.Queue, calls: Calls) -> None:
    box = queue.enqueue_container("batch")
    after_box = queue.enqueue("work", depends_on=[box])
    assert queue.cancel(box) is True
    assert queue.get(box).state is JobState.CANCELLED
    assert queue.get(after_box).state is JobState.UPSTREAM_FAILED
    with pytest.raises(readyq.InvalidParent):
        queue.enqueue("work", parent=box)
    run_bounded(queue)
    assert calls.ids == []


def test_cancelling_a_container_with_a_running_child(queue: readyq.Queue) -> None:
    started = threading.Event()

    @queue.handler("long")
    def long(job: readyq.Job) -> Any:
        started.set()
        deadline = time.monotonic() + 10
        while not job.cancelled and time.monotonic() < deadline:
            job.heartbeat()
            time.sleep(0.02)
        raise RuntimeError("cancelled")

    @queue.handler("work")
    def work(job: readyq.Job) -> Any:
        return "ran"

    box = queue.enqueue_container("batch")
    running = queue.enqueue("long", parent=box)
    pending = queue.enqueue("work", parent=box, run_after=600)
    with background(queue) as worker:
        assert started.wait(10)
        wait_for(lambda: queue.get(running).state is JobState.RUNNING)
        assert queue.cancel(box) is True
        # The pending child ends at once; the container waits for the running one.
        assert queue.get(pending).state is JobState.CANCELLED
        wait_for(lambda: queue.get(box).is_terminal)
        wait_for(lambda: worker.stats.cancelled == 1)
    assert queue.get(running).state is JobState.CANCELLED
    assert queue.get(box).state is JobState.CANCELLED
