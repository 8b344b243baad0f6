"""``Worker.prepare()``: connect, check the tables and build the loop's statements
before ``run``, changing nothing in the database."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

import readyq
from readyq.errors import SchemaNotFound


def _snapshot(queue: readyq.Queue) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every readyq table, in primary-key order."""
    t = queue.store.tables
    tables = [t.jobs, t.deps, t.groups, t.gate, t.rate_limits, t.rate_slots]
    with queue.engine.connect() as conn:
        return {
            table.name: [
                tuple(row)
                for row in conn.execute(
                    sa.select(table).order_by(*table.primary_key.columns)
                )
            ]
            for table in tables
        }


def _fill(queue: readyq.Queue, ran: list[int]) -> list[int]:
    """Ready jobs in three weighted groups, one of them rate-limited, and dependents
    that the rehearsed finish would release."""

    @queue.handler("t")
    def t(job: readyq.Job) -> None:
        ran.append(job.id)

    queue.rate_limit("api", 100, per=60)

    @queue.handler("limited", rate_limit="api")
    def limited(job: readyq.Job) -> None:
        ran.append(job.id)

    ids = []
    for i, (group, weight) in enumerate([("a", 3), ("b", 2), ("c", 1)] * 3):
        ids.append(queue.enqueue("t", {"i": i}, group=group, weight=weight))
    ids.append(queue.enqueue("limited", {}, group="a", weight=3))
    ids.append(queue.enqueue("t", {"dep": 1}, depends_on=[ids[0], ids[1]]))
    ids.append(queue.enqueue("t", {"dep": 2}, depends_on=[ids[-1]]))
    return ids


def test_prepare_changes_nothing_and_the_worker_then_runs_every_job(
    queue: readyq.Queue,
) -> None:
    ran: list[int] = []
    _fill(queue, ran)
    # Fair-share history and used rate slots, as a queue that has run for a while has.
    queue.worker(concurrency=2, poll_interval=0.01).run(until_idle=True, handle_signals=False)
    first = sorted(ran)
    ran.clear()
    ids = [queue.enqueue("t", {"i": i}, group=g, weight=w)
           for i, (g, w) in enumerate([("a", 3), ("b", 2), ("c", 1)] * 2)]
    ids.append(queue.enqueue("limited", {}, group="b", weight=2))
    ids.append(queue.enqueue("t", {"dep": 1}, depends_on=[ids[0], ids[1]]))
    before = _snapshot(queue)
    worker = queue.worker(concurrency=4, poll_interval=0.01)
    worker.prepare()
    assert _snapshot(queue) == before
    assert not ran
    worker.run(until_idle=True, handle_signals=False)
    assert sorted(ran) == sorted(ids)
    assert queue.counts() == {"done": len(first) + len(ids)}


def test_prepare_on_an_empty_queue_changes_nothing(queue: readyq.Queue) -> None:
    @queue.handler("t")
    def t(job: readyq.Job) -> None:
        return None

    before = _snapshot(queue)
    queue.worker(concurrency=2).prepare()
    assert _snapshot(queue) == before


def test_prepare_raises_on_tables_that_do_not_match(queue: readyq.Queue) -> None:
    @queue.handler("t")
    def t(job: readyq.Job) -> None:
        raise AssertionError("never claimed")

    job_id = queue.enqueue("t")
    jobs = queue.store.tables.jobs
    with queue.engine.begin() as conn:
        conn.exec_driver_sql(f"ALTER TABLE {jobs.name} DROP COLUMN timeout")
    with pytest.raises(sa.exc.DBAPIError, match="timeout"):
        queue.worker(concurrency=1).prepare()
    with queue.engine.connect() as conn:
        row = conn.execute(
            sa.select(jobs.c.state, jobs.c.attempts).where(jobs.c.id == job_id)
        ).one()
    assert tuple(row) == ("ready", 0)


def test_prepare_raises_without_the_tables(db: str) -> None:
    queue = readyq.Queue(db)
    try:
        @queue.handler("t")
        def t(job: readyq.Job) -> None:
            return None

        with pytest.raises((SchemaNotFound, sa.exc.DBAPIError)):
            queue.worker(concurrency=1).prepare()
    finally:
        queue.close()


def test_an_async_worker_prepares_too(db: str) -> None:
    from async_support import Runner, async_engine

    engine = async_engine(db)
    aqueue = readyq.AsyncQueue(engine)
    sync = readyq.Queue(db)
    ran: list[int] = []

    @aqueue.handler("t")
    async def t(job: readyq.Job) -> None:
        ran.append(job.id)

    async def scenario() -> list[int]:
        await aqueue.create_schema()
        ids = [await aqueue.enqueue("t", {"i": i}, group=f"g{i % 2}") for i in range(4)]
        before = _snapshot(sync)
        worker = aqueue.worker(concurrency=4, poll_interval=0.01)
        await worker.prepare()
        assert _snapshot(sync) == before
        await worker.run(until_idle=True, handle_signals=False)
        return ids

    runner = Runner()
    try:
        ids = runner.run(scenario())
        assert sorted(ran) == ids
    finally:
        runner.run(aqueue.close())
        runner.run(engine.dispose())
        runner.close()
        sync.close()
