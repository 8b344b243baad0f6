"""A job starts only once every job it depends on is done, and not before its run_after.

Handlers record when they start and finish (time.monotonic in one process), so "started
after all its dependencies finished" is checked on the real order of execution. Bad ends
(failed, cancelled) reach every job downstream as ``upstream_failed``.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import readyq
from readyq import JobState
from readyq.claim_order import ClaimOrder, StartPolicy
from readyq.store import Outcome, OutcomeKind

WORKER_OPTIONS: dict[str, Any] = {
    "concurrency": 8,
    "poll_interval": 0.02,
    "lease_ttl": 10.0,
    "heartbeat_interval": 2.0,
}


class Timeline:
    """Thread-safe record of when each job's handler started and finished."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started: dict[int, float] = {}
        self.finished: dict[int, float] = {}
        self.order: list[int] = []

    def start(self, job_id: int) -> None:
        with self._lock:
            assert job_id not in self.started, f"job {job_id} started twice"
            self.started[job_id] = time.monotonic()
            self.order.append(job_id)

    def finish(self, job_id: int) -> None:
        with self._lock:
            self.finished[job_id] = time.monotonic()

    def assert_after_deps(self, deps: dict[int, list[int]]) -> None:
        for job_id, upstream in deps.items():
            assert job_id in self.started, f"job {job_id} never ran"
            for dep in upstream:
                assert dep in self.finished, f"dependency {dep} of job {job_id} never finished"
                assert self.started[job_id] > self.finished[dep], (
                    f"job {job_id} started before its dependency {dep} finished"
                )


def register_recorder(queue: readyq.Queue, timeline: Timeline, type: str = "step") -> None:
    @queue.handler(type)
    def step(job: readyq.Job) -> Any:
        timeline.start(job.id)
        time.sleep(0.001)
        timeline.finish(job.id)
        return job.id


def run_bounded(queue: readyq.Queue, timeout: float = 60.0, **options: Any) -> readyq.WorkerStats:
    """Run a worker until idle in a thread; fail (instead of hanging) if it never returns."""
    worker = queue.worker(**{**WORKER_OPTIONS, **options})
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["stats"] = worker.run(until_idle=True)
        except BaseException as exc:  # surfaced below
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


def assert_all_done(queue: readyq.Queue, ids: list[int]) -> None:
    states = {i: queue.get(i).state for i in ids}
    assert all(s is JobState.DONE for s in states.values()), states


# -- ordering ----------------------------------------------------------------------------


def test_chain_runs_in_order(queue: readyq.Queue) -> None:
    timeline = Timeline()
    register_recorder(queue, timeline)
    ids = [queue.enqueue("step")]
    for _ in range(5):
        ids.append(queue.enqueue("step", depends_on=[ids[-1]]))
    assert [queue.get(i).state for i in ids] == [JobState.READY] + [JobState.WAITING] * 5

    run_bounded(queue)

    assert_all_done(queue, ids)
    assert timeline.order == ids
    timeline.assert_after_deps({ids[k]: [ids[k - 1]] for k in range(1, len(ids))})


def test_diamond(queue: readyq.Queue) -> None:
    timeline = Timeline()
    register_recorder(queue, timeline)
    top = queue.enqueue("step")
    left = queue.enqueue("step", depends_on=[top])
    right = queue.enqueue("step", depends_on=[top])
    bottom = queue.enqueue("step", depends_on=[left, right])
    assert queue.get(bottom).depends_on == tuple(sorted([left, right]))

    run_bounded(queue)

    assert_all_done(queue, [top, left, right, bottom])
    timeline.assert_after_deps({left: [top], right: [top], bottom: [left, right]})


def test_fan_in_of_100(queue: readyq.Queue) -> None:
    timeline = Timeline()
    register_recorder(queue, timeline)
    sources = [queue.enqueue("step") for _ in range(100)]
    sink = queue.enqueue("step", depends_on=sources)
    assert queue.get(sink).state is JobState.WAITING
    assert len(queue.get(sink).depends_on) == 100

    run_bounded(queue)

    assert_all_done(queue, [*sources, sink])
    timeline.assert_after_deps({sink: sources})
    assert timeline.order[-1] == sink


def test_fan_out_of_100(queue: readyq.Queue) -> None:
    timeline = Timeline()
    register_recorder(queue, timeline)
    root = queue.enqueue("step")
    leaves = [queue.enqueue("step", depends_on=[root]) for _ in range(100)]
    assert {queue.get(i).state for i in leaves[:5]} == {JobState.WAITING}

    run_bounded(queue)

    assert_all_done(queue, [root, *leaves])
    timeline.assert_after_deps({leaf: [root] for leaf in leaves})
    assert timeline.order[0] == root


def test_mixed_graph_with_shared_dependencies(queue: readyq.Queue) -> None:
    """Layers where each job depends on several jobs of the previous layer."""
    timeline = Timeline()
    register_recorder(queue, timeline)
    deps: dict[int, list[int]] = {}
    previous = [queue.enqueue("step") for _ in range(4)]
    for _layer in range(4):
        current = []
        for k in range(4):
            upstream = [previous[k], previous[(k + 1) % 4]]
            job = queue.enqueue("step", depends_on=upstream)
            deps[job] = upstream
            current.append(job)
        previous = current

    run_bounded(queue)

    assert_all_done(queue, list(deps))
    timeline.assert_after_deps(deps)


# -- run_after ---------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["delay", "datetime"])
def test_run_after_in_the_future_is_respected(queue: readyq.Queue, form: str) -> None:
    timeline = Timeline()
    register_recorder(queue, timeline)
    if form == "delay":
        later = queue.enqueue("step", run_after=600)
    else:
        later = queue.enqueue(
            "step", run_after=datetime.now(timezone.utc) + timedelta(seconds=600)
        )
    now_job = queue.enqueue("step")
    # A dependent of the delayed job waits for it, delay included.
    after = queue.enqueue("step", depends_on=[later])

    worker = queue.worker(**WORKER_OPTIONS)
    deadline = time.monotonic() + 10
    while now_job not in timeline.finished or queue.get(now_job).state is not JobState.DONE:
        assert time.monotonic() < deadline, "the job without run_after never ran"
        worker.run_once()
        time.sleep(0.01)
    for _ in range(5):
        worker.run_once()
    assert worker.running == 0
    info = queue.get(later)
    assert info.state is JobState.READY
    assert info.attempts == 0 and info.started_at is None
    assert later not in timeline.started
    assert queue.get(after).state is JobState.WAITING
    assert queue.store.claim_jobs(ClaimOrder(
        owner="probe", cap=10, limit=10, lease_ttl=30, types=None,
    )) == []

    queue.store.clock_offset = 601.0
    run_bounded(queue)

    info = queue.get(later)
    assert info.state is JobState.DONE
    assert info.run_after is not None and info.started_at is not None
    assert info.started_at >= info.run_after
    assert queue.get(after).state is JobState.DONE
    timeline.assert_after_deps({after: [later]})


def test_run_after_short_real_delay(queue: readyq.Queue) -> None:
    timeline = Timeline()
    register_recorder(queue, timeline)
    enqueued = time.monotonic()
    job = queue.enqueue("step", run_after=0.3)
    run_bounded(queue)
    assert queue.get(job).state is JobState.DONE
    # The database clock and the monotonic clock may disagree by a few milliseconds.
    assert timeline.started[job] - enqueued >= 0.25


# -- bad ends flow downstream ------------------------------------------------------------


def register_failing(queue: readyq.Queue) -> None:
    @queue.handler("boom", max_attempts=1)
    def boom(job: readyq.Job) -> Any:
        raise RuntimeError("boom on purpose")


def test_failed_dependency_makes_dependents_upstream_failed(queue: readyq.Queue) -> None:
    timeline = Timeline()
    register_recorder(queue, timeline)
    register_failing(queue)
    bad = queue.enqueue("boom")
    child = queue.enqueue("step", depends_on=[bad])
    grandchild = queue.enqueue("step", depends_on=[child])
    great = queue.enqueue("step", depends_on=[grandchild])
    ok = queue.enqueue("step")
    also_ok = queue.enqueue("step", depends_on=[ok])
    # Depends on a good and a bad branch: the bad one wins.
    mixed = queue.enqueue("step", depends_on=[ok, child])

    run_bounded(queue, timeout=30)

    assert queue.get(bad).state is JobState.FAILED
    expected = {child: bad, grandchild: child, great: grandchild, mixed: child}
    for job_id, dep in expected.items():
        info = queue.get(job_id)
        assert info.state is JobState.UPSTREAM_FAILED, (job_id, info.state)
        assert info.error is not None and f"dependency {dep} " in info.error, info.error
        assert info.attempts == 0 and info.started_at is None
        assert info.finished_at is not None
        assert job_id not in timeline.started
    assert "ended failed" in (queue.get(child).error or "")
    assert "ended upstream_failed" in (queue.get(grandchild).error or "")
    assert_all_done(queue, [ok, also_ok])
    assert not queue.store.has_unfinished()


def test_cancelled_dependency_makes_dependents_upstream_failed(queue: readyq.Queue) -> None:
    timeline = Timeline()
    register_recorder(queue, timeline)
    first = queue.enqueue("step", run_after=600)  # cannot start before the cancel
    child = queue.enqueue("step", depends_on=[first])
    grandchild = queue.enqueue("step", depends_on=[child])
    other = queue.enqueue("step")

    assert queue.cancel(first) is True

    # The cascade happens in the cancel itself, before any worker runs.
    assert queue.get(first).state is JobState.CANCELLED
    info = queue.get(child)
    assert info.state is JobState.UPSTREAM_FAILED
    assert info.error == f"dependency {first} ended cancelled"
    info = queue.get(grandchild)
    assert info.state is JobState.UPSTREAM_FAILED
    assert info.error == f"dependency {child} ended upstream_failed"

    run_bounded(queue, timeout=30)

    assert queue.get(other).state is JobState.DONE
    assert set(timeline.started) == {other}
    assert queue.counts() == {"cancelled": 1, "upstream_failed": 2, "done": 1}


@pytest.mark.parametrize("end", ["failed", "cancelled", "upstream_failed"])
def test_job_enqueued_after_a_bad_end_is_born_upstream_failed(
    queue: readyq.Queue, end: str
) -> None:
    timeline = Timeline()
    register_recorder(queue, timeline)
    register_failing(queue)
    good = queue.enqueue("step")
    if end == "failed":
        bad = queue.enqueue("boom")
        run_bounded(queue, timeout=30)
    elif end == "cancelled":
        bad = queue.enqueue("step", run_after=600)
        queue.cancel(bad)
    else:
        root = queue.enqueue("step", run_after=600)
        bad = queue.enqueue("step", depends_on=[root])
        queue.cancel(root)
    assert queue.get(bad).state.value == end

    late = queue.enqueue("step", depends_on=[good, bad])

    info = queue.get(late)
    assert info.state is JobState.UPSTREAM_FAILED
    assert info.error == f"dependency {bad} ended {end}"
    assert info.finished_at is not None and info.attempts == 0
    run_bounded(queue, timeout=30)
    assert queue.get(late).state is JobState.UPSTREAM_FAILED
    assert late not in timeline.started


def test_has_unfinished_sees_every_unfinished_state_of_the_given_types(
    queue: readyq.Queue,
) -> None:
    store = queue.store

    @queue.handler("a")
    def a(job: readyq.Job) -> None:
        return None

    @queue.handler("b")
    def b(job: readyq.Job) -> None:
        return None

    assert not store.has_unfinished()
    upstream = queue.enqueue("a")
    waiting = queue.enqueue("b", depends_on=[upstream])
    assert store.has_unfinished() and store.has_unfinished(["a"])
    assert store.has_unfinished(["b"])  # waiting only
    assert not store.has_unfinished(["c"])
    queue.cancel(waiting)
    assert not store.has_unfinished(["b"])
    assert store.has_unfinished(["a"])  # ready
    (claimed,) = store.claim_jobs(ClaimOrder(owner="w", cap=1, limit=1, lease_ttl=30, types=["a"]))
    assert store.has_unfinished(["a"])  # leased
    assert store.start_jobs("w", [(claimed, StartPolicy(None))]) == {upstream}
    assert store.has_unfinished(["a"])  # running
    done = store.record_outcomes("w", [Outcome(job=claimed, kind=OutcomeKind.DONE)])
    assert done == {(upstream, claimed.lease_token): True}
    assert not store.has_unfinished(["a"]) and not store.has_unfinished()
    later = queue.enqueue("a", run_after=3600)  # ready, not yet runnable
    assert store.has_unfinished(["a"])
    queue.cancel(later)
    assert not store.has_unfinished()
