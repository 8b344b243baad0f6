"""The core scenarios through the sync and the asyncio API, on every database.

``Api`` drives either a ``readyq.Queue`` or a ``readyq.AsyncQueue`` (one event loop per
test) through the same calls, so each scenario is written once and run both ways.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

import readyq
from async_support import Runner, async_engine
from readyq import JobState
from readyq.claim_order import ClaimOrder, StartPolicy
from readyq.store import Outcome, OutcomeKind

OPTIONS: dict[str, Any] = {
    "concurrency": 4, "poll_interval": 0.02, "lease_ttl": 10.0, "heartbeat_interval": 2.0,
}


class Api:
    """One calling convention over both queues: every method is sync here."""

    def __init__(self, db: str, mode: str) -> None:
        self.mode = mode
        if mode == "sync":
            self.q: Any = readyq.Queue(db)
            self.runner = None
            self.store = self.q.store
        else:
            self.runner = Runner()
            self.engine = async_engine(db)
            self.q = readyq.AsyncQueue(self.engine)
            self.store = self.q.queue.store
        self.call(self.q.create_schema)

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        if self.runner is not None:
            return self.runner.run(out)
        return out

    def store_call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        fn = getattr(self.store, method)
        if self.runner is not None:
            return self.runner.run(self.q.run(fn, *args, **kwargs))
        return fn(*args, **kwargs)

    def handler(self, *args: Any, **kwargs: Any) -> Any:
        return self.q.handler(*args, **kwargs)

    def enqueue(self, *args: Any, **kwargs: Any) -> int:
        return int(self.call(self.q.enqueue, *args, **kwargs))

    def get(self, job_id: int) -> readyq.JobInfo:
        return self.call(self.q.get, job_id)  # type: ignore[no-any-return]

    def counts(self) -> dict[str, int]:
        return self.call(self.q.counts)  # type: ignore[no-any-return]

    def run(self, **options: Any) -> readyq.WorkerStats:
        return self.call(self.q.run_worker, until_idle=True, **{**OPTIONS, **options})  # type: ignore[no-any-return]

    def close(self) -> None:
        if self.runner is None:
            self.q.close()
            return
        self.runner.run(self.q.close())
        self.runner.run(self.engine.dispose())
        self.runner.close()


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest, db: str) -> Iterator[Api]:
    a = Api(db, request.param)
    try:
        yield a
    finally:
        a.close()


def test_a_dag_runs_in_dependency_order(api: Api) -> None:
    order: list[str] = []
    lock = threading.Lock()

    @api.handler("step")
    def step(job: readyq.Job) -> str:
        with lock:
            order.append(job.args["name"])
        return job.args["name"]

    @api.handler("astep")
    async def astep(job: readyq.Job) -> str:
        await asyncio.sleep(0.005)
        with lock:
            order.append(job.args["name"])
        return job.args["name"]

    a = api.enqueue("step", {"name": "a"})
    b = api.enqueue("astep", {"name": "b"}, depends_on=[a])
    c = api.enqueue("step", {"name": "c"}, depends_on=[a])
    d = api.enqueue("astep", {"name": "d"}, depends_on=[b, c])
    stats = api.run()
    assert stats.done == 4
    assert order[0] == "a" and order[-1] == "d" and set(order[1:3]) == {"b", "c"}
    assert api.get(d).state is JobState.DONE and api.get(d).result == "d"
    assert api.counts() == {"done": 4}


@pytest.mark.parametrize("n", [2, 3, 49, 50, 120])
def test_enqueue_many_of_any_size(api: Api, n: int) -> None:
    """A batch of 2 to 49 jobs takes the multi-row INSERT, of 50 or more the bulk load;
    on each driver of each database (asyncpg refused the first: it numbers the
    parameters of the clock once for all rows)."""
    ids = api.call(api.q.enqueue_many, [readyq.JobSpec("t", {"i": i}) for i in range(n)])
    assert len(ids) == n and ids == sorted(ids)
    assert [api.get(i).args for i in (ids[0], ids[-1])] == [{"i": 0}, {"i": n - 1}]


def test_retries_then_fails(api: Api) -> None:
    calls: list[int] = []

    @api.handler("flaky", max_attempts=3, retry_backoff=0.01, retry_backoff_max=0.02)
    async def flaky(job: readyq.Job) -> None:
        calls.append(job.attempt)
        raise RuntimeError(f"boom {job.attempt}")

    @api.handler("after")
    def after(job: readyq.Job) -> None:
        raise AssertionError("must not run")

    job = api.enqueue("flaky", {})
    dep = api.enqueue("after", {}, depends_on=[job])
    stats = api.run()
    assert calls == [1, 2, 3]
    assert (stats.retried, stats.failed) == (2, 1)
    info = api.get(job)
    assert info.state is JobState.FAILED and info.attempts == 3
    assert "RuntimeError: boom 3" in (info.error or "")
    assert api.get(dep).state is JobState.UPSTREAM_FAILED


def test_containers_follow_their_dependency_and_stuck_ones_are_seen_and_closed(
    api: Api,
) -> None:
    @api.handler("a", max_attempts=1)
    async def a(job: readyq.Job) -> None:
        raise RuntimeError("a failed")

    @api.handler("b")
    def b(job: readyq.Job) -> None:
        return None

    first = api.enqueue("a", {})
    box = api.call(api.q.enqueue_container, "fanout", depends_on=[first])
    after = api.enqueue("b", {}, depends_on=[box])
    api.run()
    assert [api.get(i).state for i in (box, after)] == [JobState.UPSTREAM_FAILED] * 2

    empty = api.call(api.q.enqueue_container, "open")
    later = api.enqueue("b", {}, depends_on=[empty])
    [stuck] = api.call(api.q.stuck, empty_after=0)
    assert (stuck.id, stuck.reason, stuck.blocks) == (empty, "empty_container", 1)
    with pytest.raises(readyq.NotClosable, match=f"job {later} is not a container"):
        api.call(api.q.close_container, later)
    api.call(api.q.close_container, empty)
    assert api.call(api.q.stuck, empty_after=0) == []
    api.run()
    assert [api.get(i).state for i in (empty, later)] == [JobState.DONE] * 2


def test_a_stale_finish_is_fenced_out(api: Api) -> None:
    @api.handler("t")
    def t(job: readyq.Job) -> None:
        return None

    job_id = api.enqueue("t", {})
    cycle = {"cap": 10, "limit": 10, "lease_ttl": 5.0, "types": ["t"],
             "start": {"t": StartPolicy(None, True)}}
    _, [first] = api.store_call("finish_and_claim", [], ClaimOrder(owner="worker-a", **cycle))
    api.store.clock_offset += 60  # worker-a's lease expires
    assert api.store_call("reclaim_expired").retried == 1
    api.store.clock_offset += 600  # past the retry backoff
    _, [second] = api.store_call("finish_and_claim", [], ClaimOrder(owner="worker-b", **cycle))
    assert second.id == first.id == job_id and second.lease_token != first.lease_token
    stale = Outcome(job=first, kind=OutcomeKind.DONE, result_json='"stale"')
    assert api.store_call("record_outcomes", "worker-a", [stale]) == {
        (job_id, first.lease_token): False
    }
    fresh = Outcome(job=second, kind=OutcomeKind.DONE, result_json='"fresh"')
    assert api.store_call("record_outcomes", "worker-b", [fresh]) == {
        (job_id, second.lease_token): True
    }
    info = api.get(job_id)
    assert info.state is JobState.DONE and info.result == "fresh"


def test_a_rolled_back_transactional_enqueue_never_existed(api: Api, db: str) -> None:
    @api.handler("echo")
    def echo(job: readyq.Job) -> Any:
        return job.args

    if api.mode == "sync":
        with api.q.engine.connect() as conn:
            api.q.enqueue("echo", {"n": 1}, connection=conn)
            conn.rollback()
        with api.q.engine.connect() as conn:
            kept = api.q.enqueue("echo", {"n": 2}, connection=conn)
            conn.commit()
    else:

        async def both() -> int:
            async with api.engine.connect() as aconn:
                assert isinstance(aconn, AsyncConnection)
                await api.q.enqueue("echo", {"n": 1}, connection=aconn)
                await aconn.rollback()
            async with api.engine.connect() as aconn:
                kept = await api.q.enqueue("echo", {"n": 2}, connection=aconn)
                await aconn.commit()
            return int(kept)

        kept = api.runner.run(both())  # type: ignore[union-attr]
    assert api.counts() == {"ready": 1}
    assert api.run().done == 1
    assert api.get(kept).result == {"n": 2}
    assert api.counts() == {"done": 1}


def test_ids_that_no_job_can_have_are_refused_alike(api: Api) -> None:
    """On both APIs and every database, before the database is asked (PostgreSQL raised
    its own error, SQLite overflowed, MariaDB looked the id up)."""
    existing = api.enqueue("t")
    calls: list[Callable[[Any], object]] = [
        api.get,
        lambda bad: api.call(api.q.cancel, bad),
        lambda bad: api.call(api.q.wait, bad, 0),
        lambda bad: api.enqueue("t", depends_on=[existing, bad]),
        lambda bad: api.enqueue("t", parent=bad),
        lambda bad: api.call(api.q.enqueue_many, [readyq.JobSpec("t", parent=bad)]),
    ]
    for bad in (2**63, 2**64, -1, 0, 7.0):
        for call in calls:
            with pytest.raises(readyq.InvalidJobId):
                call(bad)
    assert api.counts() == {"ready": 1}


def test_async_handlers_in_the_sync_worker(db: str) -> None:
    api = Api(db, "sync")
    try:
        @api.handler("a", timeout=5)
        async def a(job: readyq.Job) -> int:
            await asyncio.sleep(0.01)
            return int(job.args["n"]) + 1

        ids = [api.enqueue("a", {"n": n}) for n in range(3)]
        assert api.run().done == 3
        assert [api.get(i).result for i in ids] == [1, 2, 3]
    finally:
        api.close()


def test_sync_handlers_in_the_async_worker(db: str) -> None:
    api = Api(db, "async")
    try:
        threads: set[str] = set()

        @api.handler("s")
        def s(job: readyq.Job) -> int:
            threads.add(threading.current_thread().name)
            job.heartbeat()  # from the handler's thread, run on the worker's loop
            time.sleep(0.01)
            return int(job.args["n"]) * 2

        ids = [api.enqueue("s", {"n": n}) for n in range(3)]
        assert api.run().done == 3
        assert [api.get(i).result for i in ids] == [0, 2, 4]
        assert threads and threading.main_thread().name not in threads
    finally:
        api.close()


def test_async_worker_honours_the_global_cap(db: str) -> None:
    api = Api(db, "async")
    try:
        running = peak = 0

        @api.handler("slow")
        async def slow(job: readyq.Job) -> None:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.03)
            running -= 1

        for _ in range(8):
            api.enqueue("slow", {})
        assert api.run(concurrency=[3, lambda: 2]).done == 8
        assert peak == 2
    finally:
        api.close()


def test_async_claims_begin_immediate_on_aiosqlite(db: str, dialect_name: str) -> None:
    if dialect_name != "sqlite":
        pytest.skip("BEGIN IMMEDIATE is the SQLite write branch")
    from sqlalchemy.util.concurrency import await_only

    api = Api(db, "async")
    try:
        api.enqueue("a", {})
        executed: list[str] = []

        def trace(dbapi_conn: Any, _record: Any) -> None:
            await_only(dbapi_conn.driver_connection.set_trace_callback(executed.append))

        sa.event.listen(api.engine.sync_engine, "connect", trace)
        api.runner.run(api.engine.dispose())  # type: ignore[union-attr]
        claimed = api.store_call("claim_jobs", ClaimOrder(
            owner="tester", cap=10, limit=10, lease_ttl=30.0, types=None))
        assert len(claimed) == 1
        statements = [" ".join(s.split()).upper() for s in executed
                      if not s.upper().startswith("PRAGMA")]
        begin = statements.index("BEGIN IMMEDIATE")
        claim = next(i for i, s in enumerate(statements)
                     if s.startswith("UPDATE READYQ_JOBS SET STATE"))
        assert begin < claim < statements.index("COMMIT", begin)
        assert [s for s in statements[:claim] if s.startswith("BEGIN")] == ["BEGIN IMMEDIATE"]
    finally:
        api.close()


def test_async_claims_run_at_read_committed_on_asyncmy(db: str, dialect_name: str) -> None:
    if dialect_name != "mariadb":
        pytest.skip("isolation of the MySQL-family claim branch")
    api = Api(db, "async")
    try:
        api.enqueue("a", {})
        seen: list[tuple[Any, ...]] = []

        def probe(conn: sa.Connection) -> None:
            seen.append(tuple(conn.exec_driver_sql("SELECT @@tx_isolation, @@autocommit").one()))

        api.store.on_claim_transaction = probe
        claimed = api.store_call("claim_jobs", ClaimOrder(
            owner="tester", cap=10, limit=10, lease_ttl=30.0, types=None))
        assert len(claimed) == 1
        assert seen == [("READ-COMMITTED", 0)]
    finally:
        api.close()


def test_async_queue_on_psycopg_async(db: str, dialect_name: str) -> None:
    if dialect_name != "postgresql":
        pytest.skip("the psycopg async driver is PostgreSQL's")

    async def main() -> list[Any]:
        engine = async_engine(db, pg_driver="psycopg")
        q = readyq.AsyncQueue(engine)
        try:
            await q.create_schema()

            @q.handler("a")
            async def a(job: readyq.Job) -> Any:
                return job.args

            ids = await q.enqueue_many([readyq.JobSpec("a", {"n": n}) for n in range(3)])
            stats = await q.run_worker(until_idle=True, **OPTIONS)
            assert stats.done == 3
            return [(await q.get(i)).result for i in ids]
        finally:
            await q.close()
            await engine.dispose()

    assert asyncio.run(main()) == [{"n": 0}, {"n": 1}, {"n": 2}]


def test_pause_and_resume(api: Api) -> None:
    a = api.enqueue("x", {}, group="a")
    b = api.enqueue("x", {}, group="b")
    api.call(api.q.pause, group="a", until=3600)
    (p,) = api.call(api.q.pauses)
    assert (p.group, p.type) == ("a", None) and p.until is not None
    claimed = api.store_call(
        "claim_jobs", ClaimOrder(owner="t", cap=10, limit=10, lease_ttl=30.0, types=["x"])
    )
    assert [c.id for c in claimed] == [b]
    with pytest.raises(readyq.InvalidPause):
        api.call(api.q.resume)
    assert api.call(api.q.resume, group="a") is True
    assert api.call(api.q.pauses) == []
    claimed = api.store_call(
        "claim_jobs", ClaimOrder(owner="t", cap=10, limit=10, lease_ttl=30.0, types=["x"])
    )
    assert [c.id for c in claimed] == [a]


def test_a_schedule_fires_from_either_worker_and_pauses(api: Api) -> None:
    @api.handler("tick")
    def tick(job: readyq.Job) -> None:
        return None

    api.q.schedule("every-minute", every=60,
                   job=lambda at: readyq.JobSpec("tick", {"at": int(at.timestamp())}))
    api.run()  # the first firing stores the schedule's row; past occurrences do not fire
    (info,) = api.call(api.q.schedules)
    assert info.name == "every-minute" and not info.paused
    api.store.clock_offset += 61.0  # the next occurrence is due
    api.run()
    assert api.counts() == {"done": 1}
    api.call(api.q.pause_schedule, "every-minute")
    assert api.call(api.q.schedules)[0].paused
    api.store.clock_offset += 120.0
    api.run()
    assert api.counts() == {"done": 1}
    assert api.call(api.q.resume_schedule, "every-minute") is True
