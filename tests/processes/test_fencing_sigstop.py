"""A worker paused past its lease is fenced out: the job's result stays its successor's."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from harness import (
    Workers,
    count_events,
    enqueue_many,
    job_row,
    read_history,
    wait_for,
    wait_taken_from,
)

import readyq

pytestmark = pytest.mark.slow


def test_a_paused_worker_cannot_overwrite_the_job_its_successor_finished(
    queue: readyq.Queue, history_engine: sa.Engine, workers: Workers
) -> None:
    # The first attempt runs for 3 s, any later one for 0.1 s.
    [job_id] = enqueue_many(queue, [({"first_sleep": 3.0, "sleep": 0.1}, "default", 1)])
    # A long poll interval: between two heartbeats A's loop runs no transaction at all.
    a = workers.start(
        "A", concurrency=1, lease_ttl=2.0, heartbeat=0.5, poll=5.0, until_idle=False,
        mode="check-lease",
    )
    wait_for(
        lambda: count_events(history_engine, "start", worker="A"),
        timeout=30, what="worker A to start the job",
    )
    claimed = job_row(queue, job_id)
    assert (claimed.state, claimed.lease_owner, claimed.attempts) == ("running", "A", 1)

    # Pause A right after one of its heartbeats committed, so that it holds no lock.
    wait_for(
        lambda: job_row(queue, job_id).heartbeat_at != claimed.heartbeat_at,
        timeout=10, interval=0.005, what="a heartbeat from worker A",
    )
    a.pause()
    paused = job_row(queue, job_id)
    assert paused.lease_owner == "A"
    assert count_events(history_engine, "end", worker="A") == 0, "A finished before the pause"

    b = workers.start("B", concurrency=1, lease_ttl=2.0, heartbeat=0.5, poll=0.1)
    # Nobody takes the job before A's lease expires by the database clock.
    wait_taken_from(queue, job_id, "A", paused.lease_expires, timeout=30)
    stats_b = b.wait_ok(timeout=60)
    assert stats_b["reclaimed"] == 1
    assert stats_b["done"] == 1
    finished = job_row(queue, job_id)
    assert (finished.state, finished.lease_owner, finished.attempts) == ("done", "B", 2)
    assert finished.started_at > paused.lease_expires
    assert queue.get(job_id).result == {"worker": "B", "attempt": 2}

    a.resume()
    wait_for(
        lambda: count_events(history_engine, "fenced", worker="A"),
        timeout=30, what="worker A's outcome to be fenced out",
    )
    a.terminate()
    stats_a = a.wait_ok(timeout=30)
    print(f"A: {stats_a}\nB: {stats_b}")
    assert stats_a["fenced_out"] == 1
    assert stats_a["done"] == 0

    # A's handler learned that its lease was gone, and its 'done' was refused.
    mine = [(e.event, e.attempt) for e in read_history(history_engine) if e.worker == "A"]
    assert mine == [("start", 1), ("lease_lost", 1), ("end", 1), ("fenced", 1)]
    after = job_row(queue, job_id)
    for column in ("state", "attempts", "lease_owner", "lease_token", "result", "finished_at"):
        assert getattr(after, column) == getattr(finished, column), column
    assert queue.get(job_id).result == {"worker": "B", "attempt": 2}


def test_a_paused_worker_resumed_during_its_successors_attempt_changes_nothing(
    queue: readyq.Queue, history_engine: sa.Engine, workers: Workers
) -> None:
    # Here A wakes up while B still holds the lease and the job is still running, so only
    # the lease owner and token tell A's stale 'done' from B's.
    [job_id] = enqueue_many(queue, [({"first_sleep": 3.0, "sleep": 2.0}, "default", 1)])
    a = workers.start(
        "A", concurrency=1, lease_ttl=2.0, heartbeat=0.5, poll=5.0, until_idle=False,
        mode="check-lease",
    )
    wait_for(
        lambda: count_events(history_engine, "start", worker="A"),
        timeout=30, what="worker A to start the job",
    )
    claimed = job_row(queue, job_id)
    wait_for(
        lambda: job_row(queue, job_id).heartbeat_at != claimed.heartbeat_at,
        timeout=10, interval=0.005, what="a heartbeat from worker A",
    )
    a.pause()
    paused = job_row(queue, job_id)
    assert count_events(history_engine, "end", worker="A") == 0, "A finished before the pause"

    b = workers.start("B", concurrency=1, lease_ttl=2.0, heartbeat=0.5, poll=0.1)
    wait_taken_from(queue, job_id, "A", paused.lease_expires, timeout=30)
    wait_for(
        lambda: count_events(history_engine, "start", worker="B"),
        timeout=30, what="worker B to start the job again",
    )
    taken = job_row(queue, job_id)
    assert (taken.state, taken.lease_owner, taken.attempts) == ("running", "B", 2)
    assert taken.started_at > paused.lease_expires

    a.resume()
    # Until A's outcome is either refused or (wrongly) recorded over B's attempt.
    wait_for(
        lambda: count_events(history_engine, "fenced", worker="A")
        or job_row(queue, job_id).state != "running",
        timeout=30, what="worker A's outcome to be handled",
    )
    # A's refused 'done' left B's attempt running under B's lease.
    during = job_row(queue, job_id)
    assert count_events(history_engine, "end", worker="B") == 0, "B ended too soon"
    assert (during.state, during.lease_owner, during.lease_token, during.result) == (
        "running", "B", taken.lease_token, None,
    )
    a.terminate()
    stats_a = a.wait_ok(timeout=30)
    assert stats_a["fenced_out"] == 1
    assert stats_a["done"] == 0

    stats_b = b.wait_ok(timeout=60)
    assert stats_b["done"] == 1
    assert stats_b["fenced_out"] == stats_b["leases_lost"] == 0
    info = queue.get(job_id)
    assert (info.state, info.attempts, info.lease_owner) == (readyq.JobState.DONE, 2, "B")
    assert info.result == {"worker": "B", "attempt": 2}
    mine = [(e.event, e.attempt) for e in read_history(history_engine) if e.worker == "A"]
    assert mine == [("start", 1), ("lease_lost", 1), ("end", 1), ("fenced", 1)]


def test_a_stale_retry_after_the_lease_was_swept_is_reported_fenced_out(
    db: str, queue: readyq.Queue, history_engine: sa.Engine, workers: Workers
) -> None:
    # Attempt 1 runs for 3 s and then raises: its outcome is a 'retry'.
    [job_id] = enqueue_many(
        queue, [({"first_sleep": 3.0, "sleep": 0.1, "fail_attempts": 1}, "default", 1)]
    )
    a = workers.start(
        "A", concurrency=1, lease_ttl=2.0, heartbeat=0.5, poll=5.0, until_idle=False
    )
    wait_for(
        lambda: count_events(history_engine, "start", worker="A"),
        timeout=30, what="worker A to start the job",
    )
    claimed = job_row(queue, job_id)
    wait_for(
        lambda: job_row(queue, job_id).heartbeat_at != claimed.heartbeat_at,
        timeout=10, interval=0.005, what="a heartbeat from worker A",
    )
    a.pause()
    paused = job_row(queue, job_id)

    # A worker for other job types sweeps the expired lease: the job goes back to ready,
    # still naming A as its last owner, with A's token.
    sweeper_queue = readyq.Queue(db)
    try:
        sweeper_queue.handler("other")(lambda job: None)
        sweeper = sweeper_queue.worker(
            concurrency=1, lease_ttl=2.0, heartbeat_interval=0.5, poll_interval=0.05,
            types=["other"], worker_id="sweeper",
        )
        wait_for(lambda: sweeper.run_once().reclaimed, timeout=30, what="a sweep")
    finally:
        sweeper_queue.close()
    swept = job_row(queue, job_id)
    assert (swept.state, swept.lease_owner, swept.lease_token, swept.attempts) == (
        "ready", "A", paused.lease_token, 1,
    )
    assert swept.updated_at > paused.lease_expires
    assert swept.error.startswith("lease expired")

    # A wakes up and its attempt 1 raises: that stale 'retry' must change nothing, and A
    # must count it as fenced out rather than as a retry it recorded.
    a.resume()
    wait_for(
        lambda: count_events(history_engine, "fenced", worker="A"),
        timeout=15, what="worker A's stale retry to be reported fenced out",
    )
    a.terminate()
    stats_a = a.wait_ok(timeout=30)
    assert stats_a["fenced_out"] == 1, stats_a
    assert stats_a["retried"] == 0, stats_a
    mine = [(e.event, e.attempt) for e in read_history(history_engine) if e.worker == "A"]
    assert mine[0] == ("start", 1) and mine[-1] == ("fenced", 1), mine
    after = job_row(queue, job_id)
    for column in ("state", "attempts", "lease_owner", "lease_token", "error", "run_after",
                   "updated_at"):
        assert getattr(after, column) == getattr(swept, column), column
