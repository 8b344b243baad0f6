"""A worker waits out a database it cannot reach, but not one that refuses its
statements: a table without a column readyq needs (a schema older or newer than the
library) ends the worker with the database's error, at once, and changes nothing.
"""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

import readyq


def _run_in_thread(worker: readyq.Worker) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            worker.run(until_idle=True, handle_signals=False)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


def test_a_worker_stops_on_a_schema_it_does_not_match(queue: readyq.Queue) -> None:
    @queue.handler("t")
    def never(job: readyq.Job) -> None:
        raise AssertionError("no job can be claimed without the column")

    job_id = queue.enqueue("t")
    jobs = queue.store.tables.jobs
    with queue.engine.begin() as conn:
        conn.exec_driver_sql(f"ALTER TABLE {jobs.name} DROP COLUMN timeout")
    worker = queue.worker(poll_interval=0.01)
    thread, errors = _run_in_thread(worker)
    thread.join(20)
    if thread.is_alive():  # still waiting the error out as if the database were down
        worker.stop()
        thread.join(20)
        pytest.fail(f"the worker kept retrying: {worker.stats}")
    assert len(errors) == 1 and isinstance(errors[0], sa.exc.DBAPIError), errors
    assert "timeout" in str(errors[0].orig)
    assert worker.stats.db_errors == 0 and worker.stats.claimed == 0
    with queue.engine.connect() as conn:
        state = conn.execute(sa.select(jobs.c.state).where(jobs.c.id == job_id)).scalar_one()
    assert state == "ready"


def test_permanent_codes_are_not_the_ones_retried(queue: readyq.Queue) -> None:
    """A code is either waited out (retried, or a lost connection) or ends the worker."""
    dialect = queue.store.dialect
    assert not dialect.permanent_codes & dialect.retryable_codes


def test_an_async_worker_stops_on_it_too(db: str) -> None:
    """The asyncio API's drivers (asyncpg, aiosqlite, asyncmy) report the same codes."""
    import asyncio

    from async_support import Runner, async_engine

    engine = async_engine(db)
    queue = readyq.AsyncQueue(engine)

    @queue.handler("t")
    async def never(job: readyq.Job) -> None:
        raise AssertionError("no job can be claimed without the column")

    async def scenario() -> readyq.WorkerStats:
        await queue.create_schema()
        await queue.enqueue("t")
        name = queue.queue.store.tables.jobs.name
        async with engine.begin() as conn:
            await conn.exec_driver_sql(f"ALTER TABLE {name} DROP COLUMN timeout")
        worker = queue.worker(poll_interval=0.01)
        try:
            with pytest.raises(sa.exc.DBAPIError, match="timeout"):
                await asyncio.wait_for(worker.run(until_idle=True, handle_signals=False), 20)
        except asyncio.TimeoutError:  # the builtin TimeoutError from Python 3.11
            pytest.fail(f"the worker kept retrying: {worker.stats}")
        return worker.stats

    runner = Runner()
    try:
        stats = runner.run(scenario())
        assert stats.db_errors == 0 and stats.claimed == 0
    finally:
        runner.run(queue.close())
        runner.run(engine.dispose())
        runner.close()
