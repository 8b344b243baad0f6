"""Retries with exponential backoff, final failure with the traceback, and handler timeouts
ended by a sweep whose abandoned attempt can never write its result."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from readyq import JobState


def db_now(queue: readyq.Queue) -> float:
    """The database clock as readyq sees it (clock_offset included)."""
    store = queue.store
    return float(store.read(lambda conn: conn.execute(sa.select(store.now())).scalar_one()))


def drive(worker: readyq.Worker, until: Callable[[], bool], timeout: float = 15.0) -> None:
    """Tick a worker from this thread until ``until()`` holds."""
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, "condition not reached in time"
        worker.run_once()
        time.sleep(0.005)


def wait_for(condition: Callable[[], bool], timeout: float = 15.0, interval: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(interval)


@contextmanager
def background(worker: readyq.Worker) -> Iterator[readyq.Worker]:
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


def state_of(queue: readyq.Queue, job_id: int) -> tuple[JobState, int]:
    info = queue.get(job_id)
    return info.state, info.attempts


# -- backoff -----------------------------------------------------------------------------


def test_exponential_backoff_then_failure_with_the_error(queue: readyq.Queue) -> None:
    calls: list[int] = []

    @queue.handler("flaky", max_attempts=4, retry_backoff=10, retry_backoff_max=30)
    def flaky(job: readyq.Job) -> Any:
        calls.append(job.attempt)
        raise ValueError(f"flaky failure number {job.attempt}")

    job_id = queue.enqueue("flaky", {"x": 1})
    worker = queue.worker(concurrency=1, poll_interval=0.01, lease_ttl=10, heartbeat_interval=2)

    # base * 2**(attempt-1), capped at retry_backoff_max: 10, 20, then 30 (not 40).
    for attempt, expected in ((1, 10.0), (2, 20.0), (3, 30.0)):
        drive(worker, lambda a=attempt: state_of(queue, job_id) == (JobState.READY, a))
        info = queue.get(job_id)
        assert info.run_after is not None
        remaining = info.run_after.timestamp() - db_now(queue)
        # ±10% jitter; the database clock moved on a little since the retry was recorded.
        assert expected * 0.9 - 1.0 <= remaining <= expected * 1.1 + 0.01, (attempt, remaining)
        assert info.error is not None
        assert f"ValueError: flaky failure number {attempt}" in info.error
        assert info.result is None
        # Not before its time: more ticks claim nothing.
        for _ in range(3):
            assert worker.run_once().claimed == 0
        assert calls == list(range(1, attempt + 1))
        queue.store.clock_offset += remaining + 0.5

    drive(worker, lambda: queue.get(job_id).state is JobState.FAILED)
    info = queue.get(job_id)
    assert info.attempts == 4 == info.max_attempts
    assert calls == [1, 2, 3, 4]
    assert info.error is not None
    assert info.error.startswith("Traceback (most recent call last)")
    assert "ValueError: flaky failure number 4" in info.error
    assert "raise ValueError" in info.error
    assert info.finished_at is not None
    assert worker.stats.retried == 3 and worker.stats.failed == 1
    assert worker.running == 0


def test_max_attempts_per_job_and_success_on_a_retry(queue: readyq.Queue) -> None:
    @queue.handler("sometimes", max_attempts=5, retry_backoff=1)
    def sometimes(job: readyq.Job) -> Any:
        if job.args["fail_until"] >= job.attempt:
            raise RuntimeError(f"not yet ({job.attempt})")
        return {"attempt": job.attempt}

    once = queue.enqueue("sometimes", {"fail_until": 99}, max_attempts=1)
    twice = queue.enqueue("sometimes", {"fail_until": 99}, max_attempts=2)
    recovers = queue.enqueue("sometimes", {"fail_until": 2})
    # A long lease: the clock jumps below must only ever pass backoffs, never leases.
    worker = queue.worker(concurrency=4, poll_interval=0.01, lease_ttl=600, heartbeat_interval=300)

    def settled() -> bool:
        states = [queue.get(i).state for i in (once, twice, recovers)]
        if any(s is JobState.READY for s in states):
            queue.store.clock_offset += 5  # skip every backoff without sleeping
        return all(s.is_terminal for s in states)

    drive(worker, settled)

    assert state_of(queue, once) == (JobState.FAILED, 1)
    assert "not yet (1)" in (queue.get(once).error or "")
    assert state_of(queue, twice) == (JobState.FAILED, 2)
    assert "not yet (2)" in (queue.get(twice).error or "")
    info = queue.get(recovers)
    assert (info.state, info.attempts, info.result) == (JobState.DONE, 3, {"attempt": 3})
    assert info.error is None


# -- timeouts ----------------------------------------------------------------------------


@pytest.mark.parametrize("retry_on_timeout", [True, False])
def test_timeout_ends_the_attempt_and_fences_the_late_result(
    queue: readyq.Queue, retry_on_timeout: bool
) -> None:
    timeout, poll = 0.5, 0.05
    release = threading.Event()
    first_started = threading.Event()
    first_returned = threading.Event()
    started_at: dict[int, float] = {}

    @queue.handler("slow", timeout=timeout, retry_on_timeout=retry_on_timeout, max_attempts=3)
    def slow(job: readyq.Job) -> Any:
        started_at[job.attempt] = time.monotonic()
        if job.attempt == 1:
            first_started.set()
            try:
                release.wait(3.0)  # far past the timeout
                return {"attempt": 1, "late": True}
            finally:
                first_returned.set()
        return {"attempt": job.attempt}

    job_id = queue.enqueue("slow")
    worker = queue.worker(concurrency=2, poll_interval=poll, lease_ttl=5, heartbeat_interval=0.1)
    with background(worker):
        assert first_started.wait(10)
        wait_for(lambda: queue.get(job_id).state not in (JobState.LEASED, JobState.RUNNING),
                 interval=0.005)
        ended = time.monotonic()
        elapsed = ended - started_at[1]
        assert elapsed >= timeout - 0.1, elapsed
        # One tick after the deadline, with room for a loaded machine (a full suite on 2
        # busy cores once took 0.75 s past the deadline); the handler would have slept 3 s.
        assert elapsed <= timeout + poll + 0.9, elapsed
        info = queue.get(job_id)
        assert info.error is not None
        assert f"timed out after {timeout:g}s (attempt 1)" in info.error
        assert not first_returned.is_set()
        # The worker's own heartbeat learns that the attempt is gone.
        wait_for(lambda: worker.stats.leases_lost == 1)
        if retry_on_timeout:
            assert info.state is JobState.READY
            queue.store.clock_offset = 5.0  # skip the retry delay
            wait_for(lambda: queue.get(job_id).state is JobState.DONE)
            assert not first_returned.is_set()
            info = queue.get(job_id)
            assert info.result == {"attempt": 2}
            assert info.attempts == 2
        else:
            assert info.state is JobState.FAILED
            assert info.attempts == 1
            assert info.finished_at is not None
        # Now let the abandoned attempt return: its outcome must be fenced out.
        release.set()
        assert first_returned.wait(10)
        wait_for(lambda: worker.stats.fenced_out == 1)
        assert worker.stats.timed_out == 1
        assert worker.stats.leases_lost == 1

    info = queue.get(job_id)
    if retry_on_timeout:
        assert (info.state, info.result, info.attempts) == (JobState.DONE, {"attempt": 2}, 2)
    else:
        assert (info.state, info.result, info.attempts) == (JobState.FAILED, None, 1)
        assert info.error is not None and "timed out" in info.error
    assert sorted(started_at) == ([1, 2] if retry_on_timeout else [1])


def test_timeout_with_retries_exhausted_fails(queue: readyq.Queue) -> None:
    release = threading.Event()

    @queue.handler("slow", timeout=0.2, retry_on_timeout=True, max_attempts=1)
    def slow(job: readyq.Job) -> Any:
        release.wait(5)
        return "late"

    job_id = queue.enqueue("slow")
    worker = queue.worker(concurrency=1, poll_interval=0.01, lease_ttl=10, heartbeat_interval=5)
    drive(worker, lambda: queue.get(job_id).state is JobState.RUNNING)
    queue.store.clock_offset = 1.0  # past the deadline, without sleeping
    drive(worker, lambda: queue.get(job_id).state is JobState.FAILED)
    release.set()
    drive(worker, lambda: worker.stats.fenced_out == 1)
    info = queue.get(job_id)
    assert info.state is JobState.FAILED and info.result is None
    assert info.error == "timed out after 0.2s (attempt 1)"


def test_stale_outcome_does_not_drop_the_next_attempt_of_the_same_job(
    queue: readyq.Queue,
) -> None:
    """The timed-out attempt returns while the same worker already runs the retry.

    Its fenced-out outcome must not make the worker forget the live attempt (which it
    must keep heartbeating and counting against its concurrency).
    """
    gates = {1: threading.Event(), 2: threading.Event()}
    returned = {1: threading.Event(), 2: threading.Event()}
    seen: dict[int, readyq.Job] = {}

    @queue.handler("slow", timeout=5, retry_on_timeout=True, max_attempts=3)
    def slow(job: readyq.Job) -> Any:
        seen[job.attempt] = job
        try:
            gates[job.attempt].wait(10)
            return {"attempt": job.attempt}
        finally:
            returned[job.attempt].set()

    jobs = queue.store.tables.jobs

    def lease_expires() -> float:
        stmt = sa.select(jobs.c.lease_expires).where(jobs.c.id == job_id)
        return float(queue.store.read(lambda conn: conn.execute(stmt).scalar_one()))

    job_id = queue.enqueue("slow")
    # Heartbeats far apart: the worker has not noticed the timeout when it claims again.
    worker = queue.worker(concurrency=2, poll_interval=0.01, lease_ttl=60, heartbeat_interval=30)
    drive(worker, lambda: queue.get(job_id).state is JobState.RUNNING)
    queue.store.clock_offset = 6.0  # attempt 1 is past its deadline
    drive(worker, lambda: queue.get(job_id).state is JobState.READY)
    assert "timed out after 5s (attempt 1)" in (queue.get(job_id).error or "")
    queue.store.clock_offset = 10.0  # past the retry delay; attempt 2 has 5 s to run
    drive(worker, lambda: state_of(queue, job_id) == (JobState.RUNNING, 2))
    assert worker.running == 1
    wait_for(lambda: 2 in seen)
    # The abandoned attempt is told that its lease is gone.
    assert seen[1].lease_lost and not seen[2].lease_lost
    assert worker.stats.leases_lost == 1

    gates[1].set()
    assert returned[1].wait(10)
    drive(worker, lambda: worker.stats.fenced_out == 1)
    assert worker.running == 1, "the worker forgot the attempt it still runs"
    assert state_of(queue, job_id) == (JobState.RUNNING, 2)

    # The live attempt is still heartbeated.
    before = lease_expires()
    time.sleep(0.05)
    worker.heartbeat_interval = 0.001
    worker.run_once()
    assert lease_expires() > before

    gates[2].set()
    drive(worker, lambda: queue.get(job_id).state is JobState.DONE)
    info = queue.get(job_id)
    assert info.result == {"attempt": 2}
    assert worker.running == 0
    assert worker.stats.done == 1


def test_late_and_live_outcomes_of_one_job_recorded_together(
    queue: readyq.Queue, caplog: pytest.LogCaptureFixture
) -> None:
    """The timed-out attempt and the retry of the same job both return before the
    worker's next tick: their outcomes go to the database in one batch. The late one is
    fenced out and reported so; the live one is recorded and reported done."""
    gate = threading.Event()
    returned = {1: threading.Event(), 2: threading.Event()}
    started: set[int] = set()

    @queue.handler("slow", timeout=5, retry_on_timeout=True, max_attempts=3)
    def slow(job: readyq.Job) -> Any:
        started.add(job.attempt)
        try:
            gate.wait(10)
            return {"attempt": job.attempt}
        finally:
            returned[job.attempt].set()

    job_id = queue.enqueue("slow")
    worker = queue.worker(concurrency=2, poll_interval=0.01, lease_ttl=60, heartbeat_interval=30)
    drive(worker, lambda: queue.get(job_id).state is JobState.RUNNING)
    queue.store.clock_offset = 6.0  # attempt 1 is past its deadline
    drive(worker, lambda: queue.get(job_id).state is JobState.READY)
    queue.store.clock_offset = 10.0  # past the retry delay
    drive(worker, lambda: state_of(queue, job_id) == (JobState.RUNNING, 2))
    wait_for(lambda: 2 in started)

    gate.set()  # both attempts return; the worker is not ticking meanwhile
    assert returned[1].wait(10) and returned[2].wait(10)
    wait_for(lambda: len(worker._inbox.outcomes) == 2)
    with caplog.at_level(logging.WARNING, logger="readyq.worker"):
        worker.run_once()
    assert queue.get(job_id).state is JobState.DONE
    assert queue.get(job_id).result == {"attempt": 2}
    assert (worker.stats.done, worker.stats.fenced_out) == (1, 1)
    assert worker.running == 0
    fenced = [r.args for r in caplog.records if "fenced out" in str(r.msg)]
    assert fenced == [(job_id, 1, "done")]
