"""A worker killed mid-job: another worker runs the job again once the lease expires."""

from __future__ import annotations

import signal

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


def test_a_job_whose_worker_was_killed_is_run_again_after_the_lease_expires(
    queue: readyq.Queue, history_engine: sa.Engine, workers: Workers
) -> None:
    # The first attempt would run for a minute, any later one for 0.1 s.
    [job_id] = enqueue_many(queue, [({"first_sleep": 60.0, "sleep": 0.1}, "default", 1)])
    a = workers.start("A", concurrency=1, lease_ttl=2.0, heartbeat=0.5, poll=0.1,
                      until_idle=False)
    wait_for(
        lambda: count_events(history_engine, "start", worker="A"),
        timeout=30, what="worker A to start the job",
    )
    a.kill()
    assert a.popen.returncode == -signal.SIGKILL
    orphan = job_row(queue, job_id)
    assert (orphan.state, orphan.lease_owner, orphan.attempts) == ("running", "A", 1)

    b = workers.start("B", concurrency=1, lease_ttl=2.0, heartbeat=0.5, poll=0.1)
    # Nobody takes the job before the dead worker's lease expires by the database clock.
    wait_taken_from(queue, job_id, "A", orphan.lease_expires, timeout=30)
    stats_b = b.wait_ok(timeout=60)
    assert stats_b["reclaimed"] == 1
    assert stats_b["done"] == 1

    info = queue.get(job_id)
    assert info.state is readyq.JobState.DONE
    assert info.attempts == 2
    assert info.result == {"worker": "B", "attempt": 2}
    assert info.lease_owner == "B"
    assert job_row(queue, job_id).started_at > orphan.lease_expires

    history = [(e.worker, e.event, e.attempt) for e in read_history(history_engine)]
    assert history == [("A", "start", 1), ("B", "start", 2), ("B", "end", 2)]
