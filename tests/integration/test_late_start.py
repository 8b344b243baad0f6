"""A worker held up between its claim and the handler's start never starts the handler.

The worker is paused right after its claim commits, past the lease length (as SIGSTOP or
a starved process would do). By then the lease has expired in the database and the job
may be claimed elsewhere, so the handler must not start: the worker hands the job back
(uncharged while no one else took it; a write the fence refuses otherwise) and runs
nothing. Each time the handler does start, the test reads the database: the lease must
be live.
"""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa

import readyq
from readyq import JobState


def test_a_handler_never_starts_after_its_lease_expired(queue: readyq.Queue) -> None:
    store = queue.store
    jobs = store.tables.jobs
    starts: list[tuple[int, bool]] = []

    @queue.handler("t")
    def handler(job: readyq.Job) -> Any:
        live = store.read(
            lambda conn: conn.execute(
                sa.select(jobs.c.lease_expires > store.now()).where(
                    jobs.c.id == job.id, jobs.c.lease_token == job.lease_token
                )
            ).scalar()
        )
        starts.append((job.attempt, bool(live)))
        return "ran"

    job_id = queue.enqueue("t")
    worker = queue.worker(concurrency=1, lease_ttl=1.0, heartbeat_interval=0.5,
                          poll_interval=0.01)
    cycle = store.finish_and_claim

    def paused_after_claim(*args: Any, **kwargs: Any) -> Any:
        applied, claimed = cycle(*args, **kwargs)
        if claimed:
            time.sleep(1.5)  # the lease (1 s, database clock) runs out meanwhile
        return applied, claimed

    store.finish_and_claim = paused_after_claim  # type: ignore[method-assign]
    try:
        assert worker.run_once().claimed == 1
        time.sleep(0.2)  # a handler started now would see the expired lease
    finally:
        store.finish_and_claim = cycle  # type: ignore[method-assign]
    deadline = time.monotonic() + 10
    while queue.get(job_id).state is not JobState.DONE:
        assert time.monotonic() < deadline, queue.get(job_id)
        worker.run_once()
        time.sleep(0.01)
    info = queue.get(job_id)
    assert starts == [(1, True)], starts  # one run, under a live lease, uncharged before
    assert info.attempts == 1 and info.result == "ran"
