"""LISTEN/NOTIFY wake-up on PostgreSQL, through the sync and the asyncio worker.

Polling stays the floor: these tests use a long ``poll_interval`` so that only a
notification can explain a fast start. Each worker runs in the background (a thread for
the sync one; a task on an event loop in a thread for the asyncio one).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from async_support import async_engine
from readyq.claim_order import ClaimOrder, StartPolicy
from readyq.dialects.postgresql_listener import PgListener as Listener
from readyq.dialects.postgresql_listener import channel_for, conninfo_for
from readyq.store import Outcome, OutcomeKind

WORKER = {"concurrency": 4, "lease_ttl": 30.0, "heartbeat_interval": 10.0}


class Harness:
    """A queue, a handler that records start times, and a background worker."""

    def __init__(self, db: str, mode: str, poll_interval: float) -> None:
        self.db = db
        self.mode = mode
        self.started: dict[int, float] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        if mode == "sync":
            self.q: Any = readyq.Queue(db)
        else:
            self.loop = asyncio.new_event_loop()
            self._loop_thread = threading.Thread(target=self.loop.run_forever, daemon=True)
            self._loop_thread.start()
            self.engine = async_engine(db)
            self.q = readyq.AsyncQueue(self.engine)
        self.call(self.q.create_schema)

        @self.q.handler("mark")
        def mark(job: readyq.Job) -> None:
            self.started[job.args["n"]] = time.monotonic()

        self.worker = self.q.worker(poll_interval=poll_interval, **WORKER)
        self._done: Future[Any] | None = None
        self._thread: threading.Thread | None = None
        if mode == "sync":
            self._thread = threading.Thread(
                target=self.worker.run, kwargs={"handle_signals": False}, daemon=True
            )
            self._thread.start()
        else:
            assert self.loop is not None
            self._done = asyncio.run_coroutine_threadsafe(
                self.worker.run(handle_signals=False), self.loop
            )

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        if self.loop is not None:
            return asyncio.run_coroutine_threadsafe(out, self.loop).result(30)
        return out

    def listener(self, timeout: float = 5.0) -> Listener | None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            lst = self.worker.listener
            if lst is not None and lst.listening.wait(0.05):
                return lst  # type: ignore[no-any-return]
            time.sleep(0.01)
        return self.worker.listener

    def settle(self) -> None:
        """Wait until the worker sits in its poll wait with nothing to do."""
        ticks = -1
        while ticks != self.worker.stats.ticks:
            ticks = self.worker.stats.ticks
            time.sleep(0.15)

    def enqueue(self, n: int) -> tuple[int, float]:
        t0 = time.monotonic()
        return int(self.call(self.q.enqueue, "mark", {"n": n})), t0

    def enqueue_rolled_back(self, n: int) -> None:
        if self.mode == "sync":
            with self.q.engine.connect() as conn:
                self.q.enqueue("mark", {"n": n}, connection=conn)
                conn.rollback()
            return

        async def unit() -> None:
            async with self.engine.connect() as aconn:
                await self.q.enqueue("mark", {"n": n}, connection=aconn)
                await aconn.rollback()

        assert self.loop is not None
        asyncio.run_coroutine_threadsafe(unit(), self.loop).result(30)

    def wait_started(self, n: int, timeout: float) -> float | None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if n in self.started:
                return self.started[n]
            time.sleep(0.005)
        return None

    def close(self) -> None:
        if self.mode == "sync":
            self.worker.stop()
            assert self._thread is not None
            self._thread.join(10)
            self.q.close()
            return
        assert self.loop is not None and self._done is not None
        self.loop.call_soon_threadsafe(self.worker.stop)
        self._done.result(10)
        self.call(self.q.close)
        self.call(self.engine.dispose)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._loop_thread.join(5)
        self.loop.close()


@pytest.fixture
def harness(request: pytest.FixtureRequest, db: str) -> Iterator[Any]:
    made: list[Harness] = []

    def make(mode: str, poll_interval: float) -> Harness:
        h = Harness(db, mode, poll_interval)
        made.append(h)
        return h

    try:
        yield make
    finally:
        for h in made:
            h.close()


def _pg_only(dialect_name: str) -> None:
    if dialect_name != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's; other databases poll")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_idle_listening_worker_starts_a_new_job_at_once(
    harness: Any, dialect_name: str, mode: str
) -> None:
    _pg_only(dialect_name)
    h = harness(mode, 5.0)
    assert h.listener() is not None and h.listener().listening.is_set()
    h.settle()
    for n in range(3):
        _, t0 = h.enqueue(n)
        started = h.wait_started(n, 3.0)
        assert started is not None and started - t0 < 0.5, "woken by NOTIFY, not the 5 s poll"
        h.settle()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_rolled_back_enqueue_wakes_nobody_and_never_runs(
    harness: Any, dialect_name: str, mode: str
) -> None:
    _pg_only(dialect_name)
    h = harness(mode, 5.0)
    assert h.listener() is not None
    h.settle()
    ticks = h.worker.stats.ticks
    h.enqueue_rolled_back(1)
    time.sleep(0.5)
    assert h.worker.stats.ticks == ticks, "a rolled-back NOTIFY is never delivered"
    assert h.call(h.q.counts) == {}
    _, t0 = h.enqueue(2)
    started = h.wait_started(2, 4.0)
    assert started is not None and started - t0 < 2.5  # half the 5 s poll: a notification
    assert 1 not in h.started


def test_a_dependent_made_ready_wakes_an_idle_worker_and_a_partial_release_does_not(
    harness: Any, dialect_name: str
) -> None:
    _pg_only(dialect_name)
    h = harness("sync", 30.0)
    assert h.listener() is not None
    # Two upstream jobs of a type registered after the worker started, so that it does
    # not run them (they are finished by hand below), and one job it runs, waiting for
    # both.
    h.q.handler("up")(lambda job: None)
    first = h.q.enqueue("up")
    second = h.q.enqueue("up")
    h.q.enqueue("mark", {"n": 1}, depends_on=[first, second])
    store = h.q.store

    def finish(job_id: int) -> float:
        _, claimed = store.finish_and_claim([], ClaimOrder(
            owner="other", cap=10, limit=1, lease_ttl=30.0, types=["up"],
            start={"up": StartPolicy(None, True)},
        ))
        assert [c.id for c in claimed] == [job_id]
        t0 = time.monotonic()
        done = store.record_outcomes("other", [Outcome(job=claimed[0], kind=OutcomeKind.DONE)])
        assert done == {(job_id, claimed[0].lease_token): True}
        return t0

    h.settle()
    ticks = h.worker.stats.ticks
    finish(first)
    time.sleep(0.5)
    assert h.worker.stats.ticks == ticks, "no job became ready, so no NOTIFY"
    t0 = finish(second)
    started = h.wait_started(1, 3.0)
    assert started is not None and started - t0 < 2.5, "woken by NOTIFY, not the 30 s poll"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_killed_listener_falls_back_to_polling_and_comes_back(
    harness: Any, db: str, dialect_name: str, mode: str
) -> None:
    _pg_only(dialect_name)
    h = harness(mode, 1.5)
    listener = h.listener()
    assert listener is not None
    old_pid = listener.pid
    admin = sa.create_engine(db, poolclass=sa.NullPool)
    try:
        with admin.connect() as conn:
            assert conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": old_pid}).scalar()
        h.enqueue(1)  # runs by polling, or by the re-scan after the listener returns
        assert h.wait_started(1, 5.0) is not None
        end = time.monotonic() + 5
        while time.monotonic() < end and not (listener.pid and listener.pid != old_pid):
            time.sleep(0.02)
        assert listener.pid is not None and listener.pid != old_pid
        assert listener.connections >= 2
        h.settle()
        _, t0 = h.enqueue(2)
        started = h.wait_started(2, 3.0)
        assert started is not None and started - t0 < 0.75, "listening again"  # half a poll
    finally:
        admin.dispose()


def test_other_databases_poll_without_a_listener(harness: Any, dialect_name: str) -> None:
    if dialect_name == "postgresql":
        pytest.skip("PostgreSQL listens")
    h = harness("sync", 0.05)
    h.enqueue(1)
    assert h.wait_started(1, 5.0) is not None
    assert h.worker.listener is None


def test_listen_false_polls_only(db: str, dialect_name: str) -> None:
    _pg_only(dialect_name)
    q = readyq.Queue(db, listen=False)
    try:
        q.create_schema()
        q.handler("mark")(lambda job: None)
        w = q.worker(poll_interval=0.05)
        stats = w.run(until_idle=True, handle_signals=False)
        assert stats.ticks >= 1 and w.listener is None
        assert q.store.context.notifier is None
    finally:
        q.close()


class _NoListen:
    """A connection whose LISTEN is lost, as behind a transaction-pooling proxy."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.info = conn.info

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.startswith("LISTEN"):
            self._conn.execute(sql)
            return self._conn.execute("UNLISTEN *")
        return self._conn.execute(sql, *args)

    def close(self) -> None:
        self._conn.close()


def test_listen_that_does_not_hold_is_detected(
    db: str, dialect_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    _pg_only(dialect_name)
    import psycopg

    woken: list[int] = []
    lst = Listener(
        conninfo_for(sa.make_url(db)),
        channel_for("readyq_"),
        lambda: woken.append(1),
        connect=lambda info: _NoListen(psycopg.connect(info, autocommit=True)),
    )
    with caplog.at_level("WARNING", logger="readyq.wakeup"):
        lst.start()
        lst.stop(5.0)
    assert lst.unavailable and not lst.listening.is_set() and not woken
    assert "LISTEN on 'readyq_wake' is unavailable" in caplog.text


def test_an_idle_tick_reads_without_waiting_for_the_claim_lock(
    queue: readyq.Queue, dialect_name: str
) -> None:
    """A notification wakes every listening worker, and every worker polls: when nothing
    is runnable, the tick is a lock-free read, so idle workers never queue up behind the
    gate row (or SQLite's write lock) that a claim holds."""
    import threading
    import time

    import sqlalchemy as sa

    @queue.handler("t")
    def handler(job: readyq.Job) -> None:
        return None

    later = queue.enqueue("t", run_after=3600)  # ready, but not runnable yet
    worker = queue.worker(concurrency=4, poll_interval=0.05)
    t = queue.store.tables
    holder = queue.engine.connect()
    try:
        if dialect_name == "sqlite":
            holder.exec_driver_sql("BEGIN IMMEDIATE")  # the write lock every claim needs
        else:
            holder.execute(sa.select(t.gate).with_for_update()).all()
        box: dict[str, object] = {}
        tick = threading.Thread(target=lambda: box.setdefault("tick", worker.run_once()))
        began = time.monotonic()
        tick.start()
        tick.join(10)
        assert not tick.is_alive(), "an idle tick waited for the claim lock"
        assert time.monotonic() - began < 5
        assert box["tick"].claimed == 0  # type: ignore[attr-defined]
    finally:
        holder.rollback()
        holder.close()
    # With the lock free and the job due, the next tick claims it.
    queue.store.clock_offset = 3601.0
    deadline = time.monotonic() + 10
    while queue.get(later).state is not readyq.JobState.DONE:
        assert time.monotonic() < deadline
        worker.run_once()
        time.sleep(0.01)


def test_a_listener_wakes_on_each_notification_and_stop_closes_its_connection(
    db: str, dialect_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listener sleeps until its socket or its stop signal is readable: every
    notification wakes it, on the one selector it built for its connection, and
    ``stop()`` ends its thread, closes that selector and ends its session."""
    _pg_only(dialect_name)
    import selectors

    import readyq.dialects.postgresql_listener as wakeup

    built: list[selectors.BaseSelector] = []

    class Counted(selectors.DefaultSelector):
        def __init__(self) -> None:
            super().__init__()
            built.append(self)

    monkeypatch.setattr(wakeup.selectors, "DefaultSelector", Counted)
    woken = threading.Event()
    lst = Listener(conninfo_for(sa.make_url(db)), "readyq_test_wake", woken.set)
    admin = sa.create_engine(db, poolclass=sa.NullPool)
    try:
        lst.start()
        assert lst.listening.wait(5.0)
        pid = lst.pid
        for _ in range(3):
            woken.clear()
            with admin.begin() as conn:
                conn.execute(sa.text("SELECT pg_notify('readyq_test_wake', '')"))
            assert woken.wait(5.0)
        assert lst.connections == 1 and len(built) == 1  # not one per wake-up
        lst.stop()
        assert not lst._thread.is_alive()
        assert built[0].get_map() is None  # closed
        # The server ends the session once it reads the client's goodbye.
        end = time.monotonic() + 5
        with admin.connect() as conn:
            while True:
                alive = conn.execute(
                    sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = :p"), {"p": pid}
                ).scalar_one()
                if not alive or time.monotonic() > end:
                    break
                time.sleep(0.01)
        assert alive == 0
    finally:
        lst.stop()
        admin.dispose()


def test_a_listener_whose_socket_is_past_descriptor_1024_still_wakes(
    db: str, dialect_name: str
) -> None:
    """A process with many files open gives the listener's connection a descriptor that
    ``select()`` refuses: the listener must still sleep on it, not reconnect forever."""
    _pg_only(dialect_name)
    import os
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1200
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"the descriptor limit ({hard}) is under {wanted}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    woken = threading.Event()
    lst = Listener(conninfo_for(sa.make_url(db)), "readyq_test_fd", woken.set)
    admin = sa.create_engine(db, poolclass=sa.NullPool)
    try:
        lst.start()
        assert lst.listening.wait(5.0)
        for _ in range(2):
            woken.clear()
            with admin.begin() as conn:
                conn.execute(sa.text("SELECT pg_notify('readyq_test_fd', '')"))
            assert woken.wait(5.0)
        assert lst.connections == 1, "the listener reconnected instead of waiting"
    finally:
        lst.stop()
        admin.dispose()
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
