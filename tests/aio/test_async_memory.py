"""A job's memory (steps, state, progress, upstream results) from ``async def`` handlers and
from plain handlers, in the thread worker and in the asyncio worker, on every database.

The async worker's store runs on the event loop: a coroutine awaits the ``a``-named
twins, a plain handler's thread calls the plain names and waits for the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from test_async_api import Api

import readyq
from readyq import JobSpec, JobState


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest, db: str) -> Iterator[Api]:
    a = Api(db, request.param)
    try:
        yield a
    finally:
        a.close()


def _checkpoint(api: Api, job_id: int) -> Any:
    c = api.store.tables.checkpoints

    def read(conn: sa.Connection) -> Any:
        return conn.execute(sa.select(c).where(c.c.job_id == job_id)).first()

    return api.store_call("read", read)


def test_async_handlers_keep_steps_and_state_across_attempts(api: Api) -> None:
    calls: list[str] = []

    async def fetch(name: str) -> list[int]:
        calls.append(name)
        await asyncio.sleep(0)
        return [1, 2, 3]

    @api.handler("up")
    async def up(job: readyq.Job) -> int:
        return 5

    @api.handler("a", max_attempts=2)
    async def a(job: readyq.Job) -> dict[str, Any]:
        items = await job.astep("fetch", fetch, "x")
        start = await job.astate() or 0
        for i in range(start, len(items)):
            await job.asave_state(i + 1)
            job.progress(i + 1, len(items), "item")
            if job.attempt == 1 and i == 1:
                raise RuntimeError("crash at item 2")
        return {"start": start, "up": await job.aupstream_results()}

    u = api.enqueue("up", {})
    jid = api.enqueue("a", {}, depends_on=[u])
    api.run()
    info = api.get(jid)
    assert info.state is JobState.DONE, info.error
    assert info.result == {"start": 2, "up": {str(u): 5}}
    assert calls == ["x"]
    row = _checkpoint(api, jid)
    assert row.state == "3" and row.state_attempt == 2
    assert info.progress is not None and info.progress.fraction == 1.0


def test_plain_handlers_use_the_plain_names_in_either_worker(api: Api) -> None:
    @api.handler("p", max_attempts=2)
    def p(job: readyq.Job) -> Any:
        n = job.step("n", lambda: 41)
        start = job.state or 0
        job.save_state(start + 1)
        job.progress(1, 2)
        if job.attempt == 1:
            raise RuntimeError("again")
        return {"n": n + 1, "start": start, "up": job.upstream_results(by="key")}

    (first, jid) = api.call(api.q.enqueue_many, [
        JobSpec("p", {}, key="first"), JobSpec("p", {}, depends_on=["first"]),
    ])
    api.run()
    assert api.get(first).result == {"n": 42, "start": 1, "up": {}}
    assert api.get(jid).result == {"n": 42, "start": 1,
                                   "up": {"first": {"n": 42, "start": 1, "up": {}}}}


def test_a_blocking_call_on_the_async_workers_loop_is_refused(db: str) -> None:
    api = Api(db, "async")
    try:
        seen: list[str] = []

        @api.handler("c", max_attempts=1)
        async def c(job: readyq.Job) -> None:
            try:
                job.save_state(1)
            except readyq.ConfigurationError as exc:
                seen.append(str(exc))
            await job.asave_state(2)

        jid = api.enqueue("c", {})
        api.run()
        assert api.get(jid).state is JobState.DONE
        assert seen and "asave_state" in seen[0]
        assert _checkpoint(api, jid).state == "2"
    finally:
        api.close()


def test_async_state_in_the_callers_async_transaction(db: str) -> None:
    api = Api(db, "async")
    try:
        @api.handler("t", max_attempts=1)
        async def t(job: readyq.Job) -> None:
            async with api.engine.connect() as conn:
                await conn.begin()
                await job.asave_state("rolled back", connection=conn)
                await conn.rollback()
                await conn.begin()
                await job.asave_state("kept", connection=conn)
                await conn.commit()

        jid = api.enqueue("t", {})
        api.run()
        assert api.get(jid).state is JobState.DONE, api.get(jid).error
        assert _checkpoint(api, jid).state == '"kept"'
    finally:
        api.close()
