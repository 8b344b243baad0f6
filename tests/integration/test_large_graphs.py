"""A job may depend on more jobs than one statement may carry parameters (65,535 on
PostgreSQL's protocol): enqueue, cancel, retry and release work at that size on every
database."""

from __future__ import annotations

import time

import sqlalchemy as sa

import readyq
from readyq import JobState, admin

MANY = 65_600  # over 65,535


def test_a_job_with_more_dependencies_than_a_statement_has_parameters(
    queue: readyq.Queue,
) -> None:
    ran: list[int] = []

    @queue.handler("part")
    def part(job: readyq.Job) -> None:
        ran.append(job.id)

    ids = queue.enqueue_many([readyq.JobSpec("part", {}) for _ in range(MANY)])
    last = ids[-1]
    # All but the last are finished already, as after a long run: set directly, since
    # running 65,599 jobs is not what this test is about.
    jobs = queue.store.tables.jobs
    with queue.engine.begin() as conn:
        conn.execute(
            sa.update(jobs).where(jobs.c.id < last)
            .values(state="done", finished_at=time.time())
        )

    big = queue.enqueue("part", {}, depends_on=ids)
    assert queue.get(big).state is JobState.WAITING

    assert queue.cancel(last) is True
    failed = queue.get(big)
    assert (failed.state, failed.error) == (
        JobState.UPSTREAM_FAILED, f"dependency {last} ended cancelled")

    revived = admin.retry(queue, last)
    assert revived.revived == [(last, "ready"), (big, "waiting")]
    detail = admin.show(queue, big)
    assert detail.dependency_states == {"done": MANY - 1, "ready": 1}
    assert len(detail.dependencies) == 100

    queue.run_worker(until_idle=True)
    assert ran == [last, big]
    assert queue.get(big).state is JobState.DONE
