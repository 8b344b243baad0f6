"""Containers: never dispatched, roll up when their last child ends, nest, can be depended
on, pass their dependencies down to their children, and refuse bad children."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import readyq
from readyq import JobState
from readyq.claim_order import ClaimOrder

WORKER_OPTIONS: dict[str, Any] = {
    "concurrency": 4,
    "poll_interval": 0.02,
    "lease_ttl": 10.0,
    "heartbeat_interval": 2.0,
}


class Timeline:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started: dict[int, float] = {}
        self.finished: dict[int, float] = {}
        self.calls: list[tuple[str, int]] = []

    def start(self, job: readyq.Job) -> None:
        with self._lock:
            self.started[job.id] = time.monotonic()
            self.calls.append((job.type, job.id))

    def finish(self, job: readyq.Job) -> None:
        with self._lock:
            self.finished[job.id] = time.monotonic()


def setup_handlers(queue: readyq.Queue, timeline: Timeline) -> None:
    @queue.handler("work")
    def work(job: readyq.Job) -> Any:
        timeline.start(job)
        time.sleep(0.001)
        timeline.finish(job)
        return "ok"

    @queue.handler("boom", max_attempts=1)
    def boom(job: readyq.Job) -> Any:
        timeline.start(job)
        timeline.finish(job)
        raise RuntimeError("child failed on purpose")

    # A handler under the containers' type: if a container were ever claimed, it would
    # be recorded here.
    @queue.handler("batch")
    def batch(job: readyq.Job) -> Any:
        timeline.start(job)
        timeline.finish(job)
        return "a container must never run"


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


@pytest.fixture
def timeline(queue: readyq.Queue) -> Timeline:
    t = Timeline()
    setup_handlers(queue, t)
    return t


def test_empty_container_is_never_dispatched(queue: readyq.Queue, timeline: Timeline) -> None:
    box = queue.enqueue_container("batch", {"name": "empty"})
    info = queue.get(box)
    assert info.state is JobState.ACTIVE and info.is_container

    worker = queue.worker(**WORKER_OPTIONS)
    for _ in range(5):
        tick = worker.run_once()
        assert tick.claimed == 0
    assert worker.running == 0
    assert queue.store.claim_jobs(ClaimOrder(
        owner="probe", cap=10, limit=10, lease_ttl=30, types=None,
    )) == []
    assert queue.store.claim_jobs(ClaimOrder(
        owner="probe", cap=10, limit=10, lease_ttl=30, types=["batch"],
    )) == []
    stats = run_bounded(queue)

    assert stats.claimed == 0
    assert timeline.calls == []
    info = queue.get(box)
    assert info.state is JobState.ACTIVE
    assert info.attempts == 0 and info.started_at is None and info.lease_owner is None


def test_rollup_to_done(queue: readyq.Queue, timeline: Timeline) -> None:
    box = queue.enqueue_container("batch")
    children = [queue.enqueue("work", {"i": i}, parent=box) for i in range(3)]
    assert all(queue.get(c).parent_id == box for c in children)

    run_bounded(queue)

    info = queue.get(box)
    assert info.state is JobState.DONE
    assert info.error is None and info.attempts == 0
    assert ("batch", box) not in timeline.calls
    child_ends = [queue.get(c).finished_at for c in children]
    assert all(queue.get(c).state is JobState.DONE for c in children)
    assert info.finished_at is not None
    assert all(end is not None and info.finished_at >= end for end in child_ends)


def test_rollup_to_failed_when_one_child_fails(queue: readyq.Queue, timeline: Timeline) -> None:
    box = queue.enqueue_container("batch")
    good = [queue.enqueue("work", parent=box) for _ in range(2)]
    bad = queue.enqueue("boom", parent=box)
    later = queue.enqueue("work", parent=box, depends_on=[bad])

    run_bounded(queue)

    assert queue.get(bad).state is JobState.FAILED
    assert queue.get(later).state is JobState.UPSTREAM_FAILED
    assert all(queue.get(g).state is JobState.DONE for g in good)
    info = queue.get(box)
    assert info.state is JobState.FAILED
    assert info.error == "2 child job(s) did not end done"
    assert ("batch", box) not in timeline.calls


def test_container_stays_active_until_its_last_child_ends(
    queue: readyq.Queue, timeline: Timeline
) -> None:
    # One child ends while another one is delayed; a third is added to the open container.
    box2 = queue.enqueue_container("batch")
    first = queue.enqueue("work", parent=box2)
    second = queue.enqueue("work", parent=box2, run_after=600)
    worker = queue.worker(**WORKER_OPTIONS)
    deadline = time.monotonic() + 10
    while queue.get(first).state is not JobState.DONE:
        assert time.monotonic() < deadline
        worker.run_once()
        time.sleep(0.01)
    worker.run_once()
    assert queue.get(box2).state is JobState.ACTIVE
    third = queue.enqueue("work", parent=box2)
    queue.store.clock_offset = 601
    run_bounded(queue)
    assert {queue.get(i).state for i in (first, second, third, box2)} == {JobState.DONE}


def test_nested_containers_roll_up_in_turn(queue: readyq.Queue, timeline: Timeline) -> None:
    outer = queue.enqueue_container("batch")
    inner = queue.enqueue_container("batch", parent=outer)
    innermost = queue.enqueue_container("batch", parent=inner)
    direct = queue.enqueue("work", parent=outer)
    in_inner = [queue.enqueue("work", parent=inner) for _ in range(2)]
    deep = queue.enqueue("work", parent=innermost)
    assert queue.get(innermost).parent_id == inner

    run_bounded(queue)

    for job_id in (outer, inner, innermost, direct, deep, *in_inner):
        assert queue.get(job_id).state is JobState.DONE, job_id
    assert not [c for c in timeline.calls if c[0] == "batch"]
    ends = {i: queue.get(i).finished_at for i in (outer, inner, innermost, deep)}
    assert ends[deep] <= ends[innermost] <= ends[inner] <= ends[outer]  # type: ignore[operator]


def test_nested_failure_rolls_up_to_every_ancestor(
    queue: readyq.Queue, timeline: Timeline
) -> None:
    outer = queue.enqueue_container("batch")
    inner = queue.enqueue_container("batch", parent=outer)
    sibling = queue.enqueue("work", parent=outer)
    bad = queue.enqueue("boom", parent=inner)
    after_outer = queue.enqueue("work", depends_on=[outer])

    run_bounded(queue)

    assert queue.get(bad).state is JobState.FAILED
    assert queue.get(sibling).state is JobState.DONE
    assert queue.get(inner).state is JobState.FAILED
    assert queue.get(outer).state is JobState.FAILED
    info = queue.get(after_outer)
    assert info.state is JobState.UPSTREAM_FAILED
    assert info.error == f"dependency {outer} ended failed"


def test_job_depending_on_a_container_starts_after_the_rollup(
    queue: readyq.Queue, timeline: Timeline
) -> None:
    box = queue.enqueue_container("batch")
    children = [queue.enqueue("work", parent=box) for _ in range(5)]
    after = queue.enqueue("work", depends_on=[box])
    assert queue.get(after).state is JobState.WAITING

    run_bounded(queue)

    assert queue.get(box).state is JobState.DONE
    info = queue.get(after)
    assert info.state is JobState.DONE
    for child in children:
        assert timeline.started[after] > timeline.finished[child]
    box_end = queue.get(box).finished_at
    assert box_end is not None and info.started_at is not None
    assert info.started_at >= box_end


def test_container_depends_on_is_inherited_by_children(
    queue: readyq.Queue, timeline: Timeline
) -> None:
    gate = queue.enqueue("work", run_after=600)
    box = queue.enqueue_container("batch", depends_on=[gate])
    inner = queue.enqueue_container("batch", parent=box)
    children = [queue.enqueue("work", parent=box) for _ in range(3)]
    deep = queue.enqueue("work", parent=inner)
    own_dep = queue.enqueue("work")
    both = queue.enqueue("work", parent=box, depends_on=[own_dep])

    for child in (*children, deep):
        info = queue.get(child)
        assert gate in info.depends_on
        assert info.state is JobState.WAITING
    assert set(queue.get(both).depends_on) == {gate, own_dep}

    # Nothing in the container may start while the gate job has not run.
    worker = queue.worker(**WORKER_OPTIONS)
    deadline = time.monotonic() + 10
    while queue.get(own_dep).state is not JobState.DONE:
        assert time.monotonic() < deadline
        worker.run_once()
        time.sleep(0.01)
    for _ in range(3):
        worker.run_once()
    assert set(timeline.started) == {own_dep}
    assert queue.get(both).state is JobState.WAITING

    queue.store.clock_offset = 601
    run_bounded(queue)

    for child in (*children, deep, both):
        assert queue.get(child).state is JobState.DONE
        assert timeline.started[child] > timeline.finished[gate]
    assert queue.get(box).state is JobState.DONE

    # A child added once the container's dependency is done is ready at once.
    box2 = queue.enqueue_container("batch", depends_on=[gate])
    assert queue.get(queue.enqueue("work", parent=box2)).state is JobState.READY


def test_container_dependency_failure_ends_children_and_container_upstream_failed(
    queue: readyq.Queue, timeline: Timeline
) -> None:
    bad = queue.enqueue("boom")
    box = queue.enqueue_container("batch", depends_on=[bad])
    children = [queue.enqueue("work", parent=box) for _ in range(2)]

    run_bounded(queue)

    for child in children:
        info = queue.get(child)
        assert info.state is JobState.UPSTREAM_FAILED
        assert info.error == f"dependency {bad} ended failed"
    # The container's own dependency ended it, as it ends a job.
    info = queue.get(box)
    assert info.state is JobState.UPSTREAM_FAILED
    assert info.error == f"dependency {bad} ended failed"
    with pytest.raises(readyq.InvalidParent):
        queue.enqueue("work", parent=box)


@pytest.mark.parametrize("end", ["done", "failed"])
def test_adding_a_child_to_a_finished_container_raises(
    queue: readyq.Queue, timeline: Timeline, end: str
) -> None:
    box = queue.enqueue_container("batch")
    queue.enqueue("work" if end == "done" else "boom", parent=box)
    run_bounded(queue)
    assert queue.get(box).state.value == end
    before = queue.counts()

    with pytest.raises(readyq.InvalidParent, match="already finished"):
        queue.enqueue("work", parent=box)
    with pytest.raises(readyq.InvalidParent, match="already finished"):
        queue.enqueue_container("batch", parent=box)

    assert queue.counts() == before


def test_depending_on_your_own_container_is_a_cycle(
    queue: readyq.Queue, timeline: Timeline
) -> None:
    outer = queue.enqueue_container("batch")
    inner = queue.enqueue_container("batch", parent=outer)
    before = queue.counts()

    with pytest.raises(readyq.DependencyCycle):
        queue.enqueue("work", parent=outer, depends_on=[outer])
    with pytest.raises(readyq.DependencyCycle):
        queue.enqueue("work", parent=inner, depends_on=[outer])  # an ancestor
    with pytest.raises(readyq.DependencyCycle):
        queue.enqueue_container("batch", parent=inner, depends_on=[inner])

    assert queue.counts() == before
    assert queue.get(outer).state is JobState.ACTIVE
    # Both containers are still usable.
    child = queue.enqueue("work", parent=inner)
    run_bounded(queue)
    assert {queue.get(i).state for i in (child, inner, outer)} == {JobState.DONE}
