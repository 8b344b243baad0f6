"""Every statement a worker builds is compiled once, not once per claim.

SQLAlchemy keeps compiled SQL keyed by each statement's cache key. A construct that has
no cache key (MySQL's ``ON DUPLICATE KEY UPDATE`` is one) is compiled anew at every
execution, which costs more than the round trip on the hot path. The worker runs a
workload that takes every branch of its loop (several fair-share groups, dependencies,
a failure that is retried, a delayed job); each statement object it executes must be
cacheable. Driver SQL (``BEGIN IMMEDIATE``, and statements readyq compiles itself) is
not a construct and is left out.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine.default import DefaultDialect

import readyq


def test_worker_statements_all_have_a_cache_key(queue: readyq.Queue) -> None:
    uncached: dict[str, int] = {}
    executed = 0

    def after(conn: Any, cursor: Any, statement: str, params: Any, context: Any,
              executemany: bool) -> None:
        nonlocal executed
        compiled = getattr(context, "compiled", None)
        if compiled is None or compiled.statement is None:
            return  # driver SQL
        executed += 1
        if context.cache_hit is DefaultDialect.NO_CACHE_KEY:
            key = " ".join(statement.split())[:120]
            uncached[key] = uncached.get(key, 0) + 1

    failed_once: set[int] = set()

    @queue.handler("work", retry_backoff=0.01, retry_backoff_max=0.02)
    def work(job: readyq.Job) -> Any:
        if job.args.get("fail_once") and job.id not in failed_once:
            failed_once.add(job.id)
            raise RuntimeError("first attempt fails")
        return {"n": job.args["n"]}

    specs = [
        readyq.JobSpec("work", {"n": i}, group=f"g{i % 3}", weight=1 + i % 3, key=f"k{i}",
                       depends_on=[f"k{i - 3}"] if i >= 3 else [])
        for i in range(30)
    ]
    queue.enqueue_many(specs)
    queue.enqueue("work", {"n": 99, "fail_once": True}, max_attempts=3)
    queue.enqueue("work", {"n": 100}, run_after=0.05)

    sa.event.listen(queue.engine, "after_cursor_execute", after)
    try:
        worker = queue.worker(concurrency=4, poll_interval=0.01, lease_ttl=30)
        worker.run(until_idle=True, handle_signals=False)
    finally:
        sa.event.remove(queue.engine, "after_cursor_execute", after)

    assert queue.counts() == {"done": 32}
    assert executed > 50
    assert uncached == {}, f"statements compiled at every execution: {uncached}"
