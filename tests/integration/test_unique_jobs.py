"""Unique jobs: one job that has not ended per key, enforced by the database.

Every test runs on SQLite, PostgreSQL and MariaDB. The races use one Queue (and so one
engine and connection pool) per thread, so the enqueues meet only in the database.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sa

import readyq
from async_support import async_engine
from readyq import admin
from readyq.model import TERMINAL_STATES
from readyq.schema import LIVE_KEY_EXPRESSION, LIVE_KEY_WHERE


@pytest.fixture
def q(queue: readyq.Queue) -> Iterator[readyq.Queue]:
    @queue.handler("work", max_attempts=1)
    def work(job: readyq.Job) -> object:
        if job.args and job.args.get("fail"):
            raise RuntimeError("asked to fail")
        return job.args

    yield queue


def drain(queue: readyq.Queue) -> None:
    queue.run_worker(until_idle=True, concurrency=4, poll_interval=0.02)


def test_the_index_predicate_names_every_end_state() -> None:
    for state in TERMINAL_STATES:
        assert f"'{state.value}'" in LIVE_KEY_WHERE
        assert f"'{state.value}'" in LIVE_KEY_EXPRESSION
    assert LIVE_KEY_WHERE.count("'") == 2 * len(TERMINAL_STATES)


def test_a_live_key_returns_the_existing_job_and_an_ended_job_frees_it(
    q: readyq.Queue,
) -> None:
    first = q.enqueue("work", {"n": 1}, unique_key="report:2030-01-01")
    assert q.enqueue("work", {"n": 2}, unique_key="report:2030-01-01") == first
    assert q.enqueue_unique("work", {"n": 3}, unique_key="report:2030-01-01") == (first, False)
    other = q.enqueue_unique("work", unique_key="report:2030-01-02")
    assert other.created and other.id != first
    assert q.counts() == {"ready": 2}
    info = q.get(first)
    assert info.unique_key == "report:2030-01-01" and info.args == {"n": 1}

    drain(q)  # done: the key is free again
    assert q.get(first).state is readyq.JobState.DONE
    second = q.enqueue_unique("work", {"n": 4}, unique_key="report:2030-01-01")
    assert second.created and second.id != first

    assert q.cancel(second.id)  # cancelled: free again
    third = q.enqueue("work", {"fail": True}, unique_key="report:2030-01-01")
    assert third not in (first, second.id)
    drain(q)  # failed: free again
    assert q.get(third).state is readyq.JobState.FAILED

    # A job born upstream_failed never holds its key.
    doomed = q.enqueue("work", unique_key="report:2030-01-01", depends_on=[third])
    assert q.get(doomed).state is readyq.JobState.UPSTREAM_FAILED
    held = q.enqueue("work", unique_key="report:2030-01-01")
    assert held != doomed
    assert q.enqueue("work", unique_key="report:2030-01-01") == held
    # A waiting job holds its key as any job that has not ended does.
    waiting = q.enqueue("work", unique_key="waits", depends_on=[held])
    assert q.get(waiting).state is readyq.JobState.WAITING
    assert q.enqueue("work", unique_key="waits") == waiting


BAD_KEYS = ["", " padded", "padded ", "nul\x00", "x" * 201, "\ud800", 7, b"bytes"]


def test_bad_keys_are_refused_before_anything_is_written(q: readyq.Queue) -> None:
    for key in BAD_KEYS:
        with pytest.raises(readyq.InvalidUniqueKey):
            q.enqueue("work", unique_key=key)  # type: ignore[arg-type]
        with pytest.raises(readyq.InvalidUniqueKey):
            q.enqueue_unique("work", unique_key=key)  # type: ignore[arg-type]
        with pytest.raises(readyq.InvalidUniqueKey):
            q.enqueue_many([readyq.JobSpec("work", unique_key=key)])  # type: ignore[arg-type]
    assert issubclass(readyq.InvalidUniqueKey, readyq.InvalidJobOption)
    assert q.counts() == {}


def test_concurrent_enqueues_of_one_key_make_exactly_one_job(db: str, q: readyq.Queue) -> None:
    threads = 6
    queues = [readyq.Queue(db) for _ in range(threads)]
    try:
        for round_ in range(3):
            key = f"race-{round_}"
            barrier = threading.Barrier(threads)

            def enqueue(queue: readyq.Queue, key: str = key,
                        barrier: threading.Barrier = barrier) -> readyq.Enqueued:
                barrier.wait()
                return queue.enqueue_unique("work", {"by": id(queue)}, unique_key=key)

            with ThreadPoolExecutor(threads) as pool:
                results = list(pool.map(enqueue, queues))
            assert len({r.id for r in results}) == 1, results
            assert sum(r.created for r in results) == 1, results
        assert q.counts() == {"ready": 3}
    finally:
        for other in queues:
            other.close()


def test_many_racing_enqueues_of_few_keys_each_get_an_id(db: str, q: readyq.Queue) -> None:
    """Threads enqueue three keys over and over, and cancel what they got now and then so
    that the keys keep coming free: inserts of one key meet at the index all the time.
    MariaDB answers some of those meetings with a deadlock, which ends the whole
    transaction, savepoint included; each call must still return an id (the unit runs
    again), never the database's error about the lost savepoint."""
    threads, calls, keys = 8, 150, 3
    queues = [readyq.Queue(db) for _ in range(threads)]
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []
    got: list[tuple[str, int]] = []
    lock = threading.Lock()

    def race(n: int) -> None:
        queue = queues[n]
        barrier.wait()
        for i in range(calls):
            key = f"hot-{(n + i) % keys}"
            try:
                if i % 3 == 2:
                    job_id = queue.enqueue_many([
                        readyq.JobSpec("work", {"by": n}, key="a", unique_key=key),
                        readyq.JobSpec("work", {"by": n}, depends_on=["a"]),
                    ])[0]
                else:
                    job_id = queue.enqueue_unique("work", {"by": n}, unique_key=key).id
                if i % 2 == 0:
                    queue.cancel(job_id)
            except BaseException as exc:
                with lock:
                    errors.append(exc)
                continue
            with lock:
                got.append((key, job_id))

    try:
        pool = [threading.Thread(target=race, args=(n,)) for n in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join(120)
        assert not errors, [f"{type(e).__name__}: {e}" for e in errors[:3]]
        assert len(got) == threads * calls
        # Every id is a job holding the key it was asked for, and no key has two jobs
        # that have not ended.
        for key, job_id in got:
            assert q.get(job_id).unique_key == key
        for n in range(keys):
            live = q.jobs(unique_key=f"hot-{n}", state=["ready", "waiting"], limit=10)
            assert len(live.jobs) <= 1, live.jobs
    finally:
        for other in queues:
            other.close()


def test_a_conflict_inside_the_callers_transactions(db: str, q: readyq.Queue) -> None:
    """B's insert meets A's uncommitted row: B waits, then returns A's job, and B's own
    transaction (default isolation of a plain engine: REPEATABLE READ on MariaDB) goes
    on and commits what it wrote before."""
    engine = sa.create_engine(db)
    q_b = readyq.Queue(engine)
    inserted = threading.Event()
    holder: list[int] = []

    def transaction_a() -> None:
        with engine.begin() as conn:
            holder.append(q.enqueue("work", {"by": "a"}, unique_key="shared", connection=conn))
            inserted.set()
            time.sleep(0.3)

    try:
        thread = threading.Thread(target=transaction_a)
        thread.start()
        assert inserted.wait(10)
        with engine.begin() as conn:
            # A read first, so that a REPEATABLE READ snapshot predates A's commit.
            jobs = q.store.tables.jobs
            assert conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar() == 0
            before = q_b.enqueue("work", {"by": "b"}, connection=conn)
            got = q_b.enqueue_unique("work", {"by": "b"}, unique_key="shared", connection=conn)
        thread.join()
        assert got == (holder[0], False)
        assert q.get(before).args == {"by": "b"}
        assert q.counts() == {"ready": 2}
    finally:
        q_b.close()
        engine.dispose()


def test_a_rolled_back_holder_leaves_the_key_free(db: str, q: readyq.Queue) -> None:
    with q.engine.connect() as conn, conn.begin() as tx:
        q.enqueue("work", unique_key="k", connection=conn)
        tx.rollback()
    made = q.enqueue_unique("work", unique_key="k")
    assert made.created and q.counts() == {"ready": 1}


def test_enqueue_many_with_unique_keys(q: readyq.Queue) -> None:
    existing = q.enqueue("work", {"old": True}, unique_key="fetch:a")
    ids = q.enqueue_many([
        readyq.JobSpec("work", {"n": 0}, key="fa", unique_key="fetch:a"),
        readyq.JobSpec("work", {"n": 1}, key="fb", unique_key="fetch:b"),
        readyq.JobSpec("work", {"n": 2}, depends_on=["fa", "fb"], unique_key="merge"),
        readyq.JobSpec("work", {"n": 3}, depends_on=["fa"]),
    ])
    assert ids[0] == existing
    assert len(set(ids)) == 4
    assert q.get(ids[2]).depends_on == tuple(sorted((existing, ids[1])))
    assert q.get(ids[3]).depends_on == (existing,)
    assert q.get(ids[1]).unique_key == "fetch:b"
    # Held keys, again: every position maps to the job that holds its key.
    again = q.enqueue_many([readyq.JobSpec("work", unique_key="merge"),
                            readyq.JobSpec("work", unique_key="fetch:b")])
    assert again == [ids[2], ids[1]]
    assert q.counts() == {"ready": 2, "waiting": 2}

    # Twice in one batch, or on a container: refused, nothing written.
    with pytest.raises(readyq.InvalidUniqueKey, match="jobs #0 and #2"):
        q.enqueue_many([readyq.JobSpec("work", unique_key="twice"),
                        readyq.JobSpec("work"),
                        readyq.JobSpec("work", unique_key="twice")])
    with pytest.raises(readyq.InvalidUniqueKey, match="container"):
        q.enqueue_many([readyq.JobSpec("box", container=True, unique_key="box")])
    assert q.counts() == {"ready": 2, "waiting": 2}

    # A larger batch (PostgreSQL inserts it through arrays) with keys already held.
    big = q.enqueue_many(
        [readyq.JobSpec("work", {"i": i}, unique_key=f"bulk:{i % 60}") for i in range(60)]
    )
    again = q.enqueue_many(
        [readyq.JobSpec("work", unique_key=f"bulk:{i}") for i in range(70)]
    )
    assert again[:60] == big and len(set(again[60:]) - set(big)) == 10


def test_retry_refuses_a_job_whose_key_is_held_again(q: readyq.Queue) -> None:
    failed = q.enqueue("work", {"fail": True}, unique_key="nightly")
    drain(q)
    assert q.get(failed).state is readyq.JobState.FAILED
    newer = q.enqueue("work", unique_key="nightly")
    with pytest.raises(admin.NotRetryable, match=f"held by job {newer}"):
        admin.retry(q, failed)
    assert q.get(failed).state is readyq.JobState.FAILED
    q.cancel(newer)
    assert admin.retry(q, failed).revived == [(failed, "ready")]
    assert q.enqueue("work", unique_key="nightly") == failed


def test_async_queue_deduplicates_too(db: str, q: readyq.Queue) -> None:
    async def main() -> tuple[readyq.Enqueued, int]:
        aq = readyq.AsyncQueue(async_engine(db))
        try:
            first = await aq.enqueue_unique("work", unique_key="async")
            return first, await aq.enqueue("work", unique_key="async")
        finally:
            await aq.close()
            await aq.async_engine.dispose()

    first, second = asyncio.run(main())
    assert first.created and second == first.id
    assert q.counts() == {"ready": 1}
