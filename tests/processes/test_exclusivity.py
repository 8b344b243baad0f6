"""Four worker processes race over the same 2,000 jobs: each job runs exactly once."""

from __future__ import annotations

from collections import Counter

import pytest
import sqlalchemy as sa
from harness import Workers, enqueue_many, read_history

import readyq

pytestmark = pytest.mark.slow

JOBS = 2000
GROUPS = 5
PROCESSES = 4
CAP = 32


def test_racing_processes_run_every_job_exactly_once(
    queue: readyq.Queue, history_engine: sa.Engine, workers: Workers
) -> None:
    ids = enqueue_many(
        queue, ((None, f"g{i % GROUPS}", 1 + i % GROUPS) for i in range(JOBS))
    )
    for n in range(PROCESSES):
        # Each process may run a quarter of the global cap, so all four take jobs and
        # race over the same rows.
        workers.start(f"w{n}", concurrency=CAP, poll=0.1, max_running=CAP // PROCESSES)
    stats = workers.wait_all_ok(timeout=120)

    events = read_history(history_engine)
    print("per process (claimed, db_errors):", [(s["claimed"], s["db_errors"]) for s in stats])
    starts = [e for e in events if e.event == "start"]
    ends = [e for e in events if e.event == "end"]
    per_job = Counter(e.job_id for e in starts)
    assert set(per_job) == set(ids)
    twice = {job: n for job, n in per_job.items() if n > 1}
    assert not twice, f"jobs started more than once: {dict(list(twice.items())[:10])}"
    assert len(ends) == JOBS
    assert {e.attempt for e in starts} == {1}
    assert not [e for e in events if e.event in ("lease_lost", "fenced")]

    assert queue.counts() == {"done": JOBS}
    j = queue.store.tables.jobs
    with queue.engine.connect() as conn:
        rows = conn.execute(sa.select(j.c.id, j.c.attempts, j.c.lease_owner)).all()
    assert {r.attempts for r in rows} == {1}
    # The worker that ran each job is the one whose lease finished it.
    owner = {e.job_id: e.worker for e in starts}
    assert {r.id: r.lease_owner for r in rows} == owner

    assert sum(s["claimed"] for s in stats) == JOBS
    assert all(s["claimed"] > 0 for s in stats), "every process should have raced for jobs"
    assert sum(s["done"] for s in stats) == JOBS
    assert sum(s["fenced_out"] + s["leases_lost"] for s in stats) == 0
