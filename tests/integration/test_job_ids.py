"""A job id is never given twice, even once the jobs that held the newest ids are pruned.

Users keep job ids in their own tables and logs. SQLite without AUTOINCREMENT gives the
largest id in the table plus one, so once the newest jobs were pruned the next job took
the id of a pruned one (issue 27, item 1). PostgreSQL's and MariaDB's sequences never go
back; the test holds on every database.
"""

from __future__ import annotations

import sqlalchemy as sa

import readyq
from readyq import JobSpec, admin


def finish_and_prune(queue: readyq.Queue) -> int:
    """Run every job, age them, prune them all; return how many were deleted."""
    queue.run_worker(until_idle=True, concurrency=2, poll_interval=0.02, lease_ttl=10.0,
                     heartbeat_interval=2.0)
    j = queue.store.tables.jobs
    with queue.engine.begin() as conn:
        conn.execute(sa.update(j).values(finished_at=j.c.finished_at - 60.0))
    return admin.prune(queue, older_than=30.0).deleted


def test_ids_of_pruned_jobs_are_never_given_again(queue: readyq.Queue) -> None:
    @queue.handler("noop")
    def noop(job: readyq.Job) -> None:
        return None

    given = [queue.enqueue("noop", {}) for _ in range(3)]
    assert given == sorted(given) and len(set(given)) == 3
    assert finish_and_prune(queue) == 3
    assert queue.counts() == {}

    one = queue.enqueue("noop", {})
    assert one > max(given), f"id {one} given again after {given} were pruned"
    given.append(one)
    assert finish_and_prune(queue) == 1

    # The batch insert takes its ids its own way on each database: the same rule holds.
    batch = queue.enqueue_many([JobSpec("noop", {}, key="a"), JobSpec("noop", {}, key="b",
                                                                      depends_on=["a"])])
    assert min(batch) > max(given), f"ids {batch} given again after {given} were pruned"
    given.extend(batch)
    assert finish_and_prune(queue) == 2
    container = queue.enqueue_container("batch")
    assert container > max(given)
