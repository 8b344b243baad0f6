"""Named resources with per-job costs: bad input, stored costs, which workers claim what,
capacities that change while jobs run, reservations for jobs that do not fit, and the
figures of ``resource_stats()``.

Every test runs on SQLite, PostgreSQL and MariaDB. Handlers record the units in flight
under a lock as they start and end (:class:`Tracker`), so the capacity is checked at the
instant each job starts; jobs that should stay put are held by gates the test opens.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from readyq import JobState, admin
from readyq.claim_order import ClaimOrder
from readyq.store import ResourceView
from readyq_test_support import wait_for

POLL = 0.02
# Long enough for several worker ticks (each one a claim) to pass.
SETTLE = 0.2


# -- helpers ----------------------------------------------------------------------------------


def job_count(queue: readyq.Queue) -> int:
    j = queue.store.tables.jobs
    with queue.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(j)).scalar_one())


def stored_uses(queue: readyq.Queue) -> dict[int, str | None]:
    j = queue.store.tables.jobs
    with queue.engine.connect() as conn:
        return {int(r.id): r.uses for r in conn.execute(sa.select(j.c.id, j.c.uses))}


def reserved_ids(queue: readyq.Queue) -> list[int]:
    r = queue.store.tables.reservations
    with queue.engine.connect() as conn:
        rows = conn.execute(sa.select(r.c.job_id).order_by(r.c.seq, r.c.job_id)).all()
    return [int(row.job_id) for row in rows]


def wait_state(queue: readyq.Queue, job_id: int, state: JobState) -> None:
    wait_for(lambda: queue.get(job_id).state is state, f"job {job_id} to be {state.value}")


def tick_until(worker: readyq.Worker, condition: Callable[[], bool], what: str) -> None:
    """Run the worker's ticks (outcomes are recorded by the next one) until ``condition``."""

    def ticked() -> bool:
        worker.run_once()
        time.sleep(0.01)
        return condition()

    wait_for(ticked, what)


def stop_ticked(worker: readyq.Worker) -> None:
    """Stop a worker driven by ``run_once`` and tick it until its jobs are recorded."""
    worker.stop()
    for _ in range(100):
        worker.run_once()
        if worker.running == 0:
            break
        time.sleep(0.02)


@dataclass
class Start:
    at: float
    job_id: int
    group: str
    units: int
    use_after: int
    capacity: int


@dataclass
class Tracker:
    """Units of one resource in flight, as the handlers see them, with every start.

    ``capacity`` is read at each start: a start that takes the use past it is a
    violation. Handlers block on their job's gate unless ``hold`` is off for it."""

    capacity: Callable[[], int]
    use: int = 0
    peak: int = 0
    starts: list[Start] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    hold: bool = True
    lock: threading.Lock = field(default_factory=threading.Lock)
    gates: dict[int, threading.Event] = field(default_factory=dict)

    def gate(self, job_id: int) -> threading.Event:
        with self.lock:
            return self.gates.setdefault(job_id, threading.Event())

    def release(self, *job_ids: int) -> None:
        for job_id in job_ids:
            self.gate(job_id).set()

    def release_all(self) -> None:
        with self.lock:
            self.hold = False
            gates = list(self.gates.values())
        for g in gates:
            g.set()

    def run(self, job: readyq.Job, units: int, seconds: float = 0.0) -> None:
        with self.lock:
            self.use += units
            self.peak = max(self.peak, self.use)
            cap = self.capacity()
            self.starts.append(
                Start(time.monotonic(), job.id, job.group, units, self.use, cap)
            )
            if self.use > cap:
                self.violations.append(
                    f"job {job.id} started with {units} unit(s): {self.use} in use, "
                    f"capacity {cap}"
                )
            hold = self.hold
        try:
            if hold:
                assert self.gate(job.id).wait(30), f"job {job.id} was never released"
            if seconds:
                time.sleep(seconds)
        finally:
            with self.lock:
                self.use -= units

    def started(self) -> list[int]:
        with self.lock:
            return [s.job_id for s in self.starts]


class Background:
    """One worker running in a thread until every job of its types ended."""

    def __init__(self, queue: readyq.Queue, **options: Any) -> None:
        options.setdefault("poll_interval", POLL)
        options.setdefault("lease_ttl", 10.0)
        options.setdefault("heartbeat_interval", 2.0)
        self.worker = queue.worker(**options)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.worker.run(until_idle=True, handle_signals=False)
        except BaseException as exc:
            self.error = exc

    def join(self, timeout: float = 30.0) -> None:
        self.thread.join(timeout)
        if self.thread.is_alive():
            self.worker.stop()
            self.thread.join(10)
            raise AssertionError("the worker did not become idle")
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        self.worker.stop()
        self.thread.join(10)


@pytest.fixture
def tracked() -> Iterator[list[Tracker]]:
    """Trackers made by a test; their gates are opened at the end, whatever happened."""
    made: list[Tracker] = []
    try:
        yield made
    finally:
        for t in made:
            t.release_all()


# -- bad input --------------------------------------------------------------------------------


def test_bad_resource_definitions_are_refused(queue: readyq.Queue) -> None:
    for name in ("", " gpu", "gpu ", "g\x00pu", "x" * 201, 3, None):
        with pytest.raises(readyq.InvalidResource, match="name"):
            queue.resource(name, capacity=4)  # type: ignore[arg-type]
    for capacity in (-1, True, 1.5, "4", None, [], [4, "x"], [4, -2], 1_000_001):
        with pytest.raises(readyq.InvalidResource):
            queue.resource("gpu", capacity=capacity)  # type: ignore[arg-type]
    assert queue.resources == {}
    gpu = queue.resource("gpu", capacity=4)
    assert queue.resource("gpu", capacity=4) == gpu  # the same definition again is fine
    with pytest.raises(readyq.InvalidResource, match="already defined"):
        queue.resource("gpu", capacity=5)
    with pytest.raises(readyq.InvalidResource, match="already defined"):
        queue.resource("gpu", capacity=lambda: 4)
    assert set(queue.resources) == {"gpu"} and queue.resources["gpu"].capacity() == 4
    assert queue.resource("mem", capacity=[8, lambda: 6]).capacity() == 6
    assert issubclass(readyq.InvalidResource, readyq.ConfigurationError)
    assert issubclass(readyq.UnknownResource, readyq.InvalidResourceUse)
    assert issubclass(readyq.InvalidResourceUse, readyq.InvalidJobOption)
    assert job_count(queue) == 0


BAD_USES: list[tuple[Any, type[Exception], str]] = [
    ({"tpu": 1}, readyq.UnknownResource, "not defined"),
    ({"gpu": 1, "tpu": 1}, readyq.UnknownResource, "not defined"),
    ([("gpu", 1)], readyq.InvalidResourceUse, "mapping"),
    ("gpu", readyq.InvalidResourceUse, "mapping"),
    (2, readyq.InvalidResourceUse, "mapping"),
    ({"gpu": 0}, readyq.InvalidResourceUse, "units"),
    ({"gpu": -1}, readyq.InvalidResourceUse, "units"),
    ({"gpu": 1.0}, readyq.InvalidResourceUse, "units"),
    ({"gpu": "1"}, readyq.InvalidResourceUse, "units"),
    ({"gpu": True}, readyq.InvalidResourceUse, "units"),
    ({"gpu": None}, readyq.InvalidResourceUse, "units"),
    ({"gpu": 5}, readyq.InvalidResourceUse, "never fit"),  # over the fixed capacity 4
    ({"mem": 9}, readyq.InvalidResourceUse, "never fit"),  # over the fixed term 8 of [8, f]
    ({"": 1}, readyq.InvalidResourceUse, "name"),
    ({" gpu": 1}, readyq.InvalidResourceUse, "name"),
    ({3: 1}, readyq.InvalidResourceUse, "name"),
    ({f"r{i}": 1 for i in range(17)}, readyq.InvalidResourceUse, "at most"),
]


def define(queue: readyq.Queue) -> None:
    queue.resource("gpu", capacity=4)
    queue.resource("mem", capacity=[8, lambda: 6])
    queue.resource("api", capacity=lambda: 2)  # no fixed term: any cost is allowed

    @queue.handler("train")
    def train(job: readyq.Job) -> None:
        return None


def test_bad_uses_raise_and_write_nothing(queue: readyq.Queue) -> None:
    define(queue)
    good = queue.enqueue("train", uses={"gpu": 4})  # a row to refer to below
    container = queue.enqueue_container("batch")
    before = job_count(queue)
    calls: list[tuple[str, Callable[[Any], Any]]] = [
        ("enqueue", lambda u: queue.enqueue("train", uses=u)),
        ("enqueue in a container", lambda u: queue.enqueue("train", parent=container, uses=u)),
        ("enqueue_unique", lambda u: queue.enqueue_unique("train", unique_key="k", uses=u)),
        (
            "enqueue_many (last)",
            lambda u: queue.enqueue_many(
                [readyq.JobSpec("train", key="a"), readyq.JobSpec("train", depends_on=["a"]),
                 readyq.JobSpec("train", uses=u)]
            ),
        ),
        (
            "enqueue_many (first)",
            lambda u: queue.enqueue_many(
                [readyq.JobSpec("train", uses=u), readyq.JobSpec("train", depends_on=[good])]
            ),
        ),
        (
            "enqueue_many (middle, forward refs)",
            lambda u: queue.enqueue_many(
                [readyq.JobSpec("train", depends_on=["b"], uses={"gpu": 1}),
                 readyq.JobSpec("train", key="b", uses=u),
                 readyq.JobSpec("batch", container=True, key="c"),
                 readyq.JobSpec("train", parent="c", uses={"api": 50})]
            ),
        ),
    ]
    for uses, error, message in BAD_USES:
        for what, call in calls:
            with pytest.raises(error, match=message):
                call(uses)
            assert job_count(queue) == before, f"{what} with uses={uses!r} wrote rows"
    # A handler registered with bad costs raises the same and is not registered.
    for uses, error, message in BAD_USES:
        with pytest.raises(error, match=message):
            queue.handler("other", uses=uses)
    assert set(queue.handlers) == {"train"}
    assert job_count(queue) == before
    # The good rows as they were: costs stored as canonical JSON.
    assert stored_uses(queue) == {good: '{"gpu":4}', container: None}


def test_uses_on_containers_are_refused(queue: readyq.Queue) -> None:
    define(queue)
    with pytest.raises(readyq.InvalidResourceUse, match="container"):
        queue.enqueue_many([readyq.JobSpec("batch", container=True, uses={"gpu": 1})])
    with pytest.raises(readyq.InvalidResourceUse, match="container"):
        queue.enqueue_many(
            [readyq.JobSpec("train", uses={"gpu": 1}),
             readyq.JobSpec("batch", key="c", container=True, uses={"gpu": 1}),
             readyq.JobSpec("train", parent="c")]
        )
    with pytest.raises(TypeError):
        queue.enqueue_container("batch", uses={"gpu": 1})  # type: ignore[call-arg]
    assert job_count(queue) == 0
    # A container without uses, with children that take resources, is fine.
    ids = queue.enqueue_many(
        [readyq.JobSpec("batch", key="c", container=True),
         readyq.JobSpec("train", parent="c", uses={"mem": 2, "gpu": 1})]
    )
    assert stored_uses(queue) == {ids[0]: None, ids[1]: '{"gpu":1,"mem":2}'}


def test_good_uses_are_stored_canonically(queue: readyq.Queue) -> None:
    define(queue)
    a = queue.enqueue("train", uses={"mem": 2, "gpu": 1})
    b = queue.enqueue("train", uses={"api": 1_000})  # a callable capacity fixes no bound
    c = queue.enqueue("train")
    d = queue.enqueue("train", uses={})  # no costs: NULL, the handler's
    e = queue.enqueue_unique("train", unique_key="u", uses={"gpu": 4}).id
    f, g = queue.enqueue_many(
        [readyq.JobSpec("train", uses={"gpu": 2, "api": 1}), readyq.JobSpec("train")]
    )
    assert stored_uses(queue) == {
        a: '{"gpu":1,"mem":2}', b: '{"api":1000}', c: None, d: None, e: '{"gpu":4}',
        f: '{"api":1,"gpu":2}', g: None,
    }


# -- which worker claims what -----------------------------------------------------------------


def test_a_resource_only_a_worker_recorded_is_accepted_by_any_queue(db: str) -> None:
    producer = readyq.Queue(db)
    producer.create_schema()
    consumer = readyq.Queue(db)
    try:
        with pytest.raises(readyq.UnknownResource, match="not defined"):
            producer.enqueue("train", uses={"gpu": 1})
        assert job_count(producer) == 0
        # A worker whose queue defines gpu claims once, and so records it.
        consumer.resource("gpu", capacity=2)
        ran: list[int] = []

        @consumer.handler("train")
        def train(job: readyq.Job) -> None:
            ran.append(job.id)

        producer.enqueue("train")
        consumer.run_worker(until_idle=True, poll_interval=POLL)
        assert producer.store.known_resources() == {"gpu": 2}
        # The producer defines no resource and no handler, yet knows the name now.
        job = producer.enqueue("train", uses={"gpu": 2})
        with pytest.raises(readyq.UnknownResource):
            producer.enqueue("train", uses={"gpu": 1, "tpu": 1})
        with pytest.raises(readyq.InvalidResourceUse):
            producer.enqueue("train", uses={"gpu": 0})
        assert stored_uses(producer)[job] == '{"gpu":2}'
        assert job_count(producer) == 2
        consumer.run_worker(until_idle=True, poll_interval=POLL)
        assert consumer.get(job).state is JobState.DONE and job in ran
    finally:
        producer.close()
        consumer.close()


def test_handler_costs_are_written_into_the_row_at_claim(queue: readyq.Queue) -> None:
    queue.resource("gpu", capacity=4)
    queue.resource("mem", capacity=16)
    seen: dict[int, Any] = {}

    @queue.handler("train", uses={"gpu": 2, "mem": 4})
    def train(job: readyq.Job) -> None:
        # While it runs, every reader counts the handler's costs as in use.
        seen[job.id] = queue.resource_stats()["gpu"].in_use

    @queue.handler("plain")
    def plain(job: readyq.Job) -> None:
        return None

    own = queue.enqueue("train", uses={"gpu": 1})
    taken = queue.enqueue("train")
    free = queue.enqueue("plain")
    assert stored_uses(queue) == {own: '{"gpu":1}', taken: None, free: None}
    queue.run_worker(until_idle=True, concurrency=1, poll_interval=POLL)
    assert stored_uses(queue) == {own: '{"gpu":1}', taken: '{"gpu":2,"mem":4}', free: None}
    assert seen == {own: 1, taken: 2}
    assert queue.counts() == {"done": 3}


def test_a_worker_without_resources_leaves_jobs_that_use_them_alone(db: str) -> None:
    with_res = readyq.Queue(db)
    with_res.create_schema()
    plain_q = readyq.Queue(db)
    try:
        with_res.resource("gpu", capacity=2)
        ran: list[tuple[str, int]] = []

        @with_res.handler("train", uses={"gpu": 1})
        def train(job: readyq.Job) -> None:
            ran.append(("with", job.id))

        @plain_q.handler("train")
        def train_plain(job: readyq.Job) -> None:
            ran.append(("plain", job.id))

        costed = with_res.enqueue("train", uses={"gpu": 1}, group="a")
        costed2 = with_res.enqueue("train", uses={"gpu": 2}, group="b", priority=5)
        # No stored costs: whoever claims it decides (this worker defines no resource).
        bare = with_res.enqueue("train", group="a")
        worker = plain_q.worker(concurrency=4, poll_interval=POLL)
        tick_until(worker, lambda: plain_q.get(bare).state is JobState.DONE, "the bare job")
        for _ in range(3):
            worker.run_once()
        assert ran == [("plain", bare)]
        for job_id in (costed, costed2):
            info = plain_q.get(job_id)
            assert info.state is JobState.READY and info.attempts == 0, info
            assert info.started_at is None
        assert stored_uses(plain_q)[bare] is None  # nothing written by a worker without
        assert worker.running == 0
        # The worker that defines gpu runs them.
        with_res.run_worker(until_idle=True, poll_interval=POLL)
        assert sorted(ran) == sorted([("plain", bare), ("with", costed), ("with", costed2)])
    finally:
        with_res.close()
        plain_q.close()


def test_a_worker_leaves_jobs_that_use_a_resource_it_does_not_define(db: str) -> None:
    gpu_q = readyq.Queue(db)
    gpu_q.create_schema()
    tpu_q = readyq.Queue(db)
    try:
        gpu_q.resource("gpu", capacity=2)
        tpu_q.resource("tpu", capacity=2)
        ran: list[tuple[str, int]] = []
        for q, name in ((gpu_q, "gpu"), (tpu_q, "tpu")):
            def make(name: str) -> Callable[[readyq.Job], None]:
                return lambda job: ran.append((name, job.id))

            q.handler("train")(make(name))
        # Both names recorded by a claim of each worker.
        gpu_q.enqueue("train")
        gpu_q.run_worker(until_idle=True, poll_interval=POLL)
        tpu_q.enqueue("train")
        tpu_q.run_worker(until_idle=True, poll_interval=POLL)
        ran.clear()
        on_tpu = gpu_q.enqueue("train", uses={"tpu": 1})  # known through tpu_q's worker
        on_gpu = tpu_q.enqueue("train", uses={"gpu": 1})
        worker = gpu_q.worker(concurrency=4, poll_interval=POLL)
        tick_until(worker, lambda: gpu_q.get(on_gpu).state is JobState.DONE, "the gpu job")
        for _ in range(3):
            worker.run_once()
        assert ran == [("gpu", on_gpu)]
        assert gpu_q.get(on_tpu).state is JobState.READY
        tpu_q.run_worker(until_idle=True, poll_interval=POLL)
        assert ran == [("gpu", on_gpu), ("tpu", on_tpu)]
    finally:
        gpu_q.close()
        tpu_q.close()


# -- capacity over time -----------------------------------------------------------------------


def test_a_capacity_that_goes_down_and_up_while_jobs_run(
    queue: readyq.Queue, tracked: list[Tracker]
) -> None:
    level = {"gpu": 3}
    queue.resource("gpu", capacity=lambda: level["gpu"])
    tracker = Tracker(lambda: level["gpu"])
    tracked.append(tracker)

    @queue.handler("hold", uses={"gpu": 1})
    def hold(job: readyq.Job) -> None:
        tracker.run(job, 1)

    ids = queue.enqueue_many([readyq.JobSpec("hold", group=f"g{i % 2}") for i in range(8)])
    bg = Background(queue, concurrency=8)
    try:
        wait_for(lambda: len(tracker.started()) == 3, "3 starts")
        time.sleep(SETTLE)
        assert len(tracker.started()) == 3, "a start past the capacity of 3"
        first = tracker.started()
        # Down to 1 while 3 are in use: nothing new starts until the use is under 1.
        level["gpu"] = 1
        for n, job_id in enumerate(first):
            tracker.release(job_id)
            wait_state(queue, job_id, JobState.DONE)
            time.sleep(SETTLE)
            expected = 3 if n < 2 else 4
            assert len(tracker.started()) == expected, (n, tracker.starts)
        assert tracker.use == 1
        # Up to 4: three more start at once, the last of the 8 waits.
        level["gpu"] = 4
        wait_for(lambda: len(tracker.started()) == 7, "7 starts")
        time.sleep(SETTLE)
        assert len(tracker.started()) == 7 and tracker.use == 4
        assert queue.resource_stats()["gpu"].capacity == 4
        tracker.release_all()
        bg.join()
    finally:
        tracker.release_all()
        bg.stop()
    assert not tracker.violations, tracker.violations
    assert sorted(tracker.started()) == sorted(ids)
    assert [s.capacity for s in tracker.starts] == [3, 3, 3, 1, 4, 4, 4, 4]
    assert tracker.starts[3].use_after == 1
    assert tracker.peak == 4
    assert queue.counts() == {"done": 8}


def test_fixed_capacity_holds_under_churn(queue: readyq.Queue, tracked: list[Tracker]) -> None:
    """Jobs of 1, 2 and 3 units of a capacity of 4, in three groups, with a global cap
    of 6 and jobs that take no resource running next to them."""
    queue.resource("gpu", capacity=4)
    tracker = Tracker(lambda: 4, hold=False)
    tracked.append(tracker)
    plain_at_once = {"now": 0, "peak": 0}
    lock = threading.Lock()

    @queue.handler("gpu", uses={"gpu": 1})
    def gpu(job: readyq.Job) -> None:
        tracker.run(job, int(job.args["units"]), seconds=0.01)

    @queue.handler("cpu")
    def cpu(job: readyq.Job) -> None:
        with lock:
            plain_at_once["now"] += 1
            plain_at_once["peak"] = max(plain_at_once["peak"], plain_at_once["now"])
        time.sleep(0.01)
        with lock:
            plain_at_once["now"] -= 1

    specs = []
    for i in range(45):
        units = 1 + i % 3
        specs.append(readyq.JobSpec("gpu", {"units": units}, group=f"g{i % 3}",
                                    uses=None if units == 1 else {"gpu": units}))
        if i % 3 == 0:
            specs.append(readyq.JobSpec("cpu", group=f"g{i % 2}"))
    queue.enqueue_many(specs)
    queue.run_worker(until_idle=True, concurrency=6, poll_interval=POLL)
    assert queue.counts() == {"done": len(specs)}
    assert not tracker.violations, tracker.violations
    assert 3 <= tracker.peak <= 4, tracker.peak
    assert plain_at_once["peak"] >= 1


# -- reservations -----------------------------------------------------------------------------


def test_a_big_job_is_reserved_and_starts_before_new_small_ones(
    queue: readyq.Queue, tracked: list[Tracker]
) -> None:
    queue.resource("gpu", capacity=4)
    tracker = Tracker(lambda: 4)
    tracked.append(tracker)

    @queue.handler("small", uses={"gpu": 1})
    def small(job: readyq.Job) -> None:
        tracker.run(job, 1)

    @queue.handler("big", uses={"gpu": 4})
    def big(job: readyq.Job) -> None:
        tracker.run(job, 4)

    smalls = queue.enqueue_many(
        [readyq.JobSpec("small", group=f"s{i % 2}") for i in range(12)]
    )
    bg = Background(queue, concurrency=8)
    try:
        wait_for(lambda: len(tracker.started()) == 4, "4 small starts")
        busy = tracker.started()
        big_id = queue.enqueue("big", group="big")
        # Next in fair-share order (its group holds nothing) and it does not fit.
        wait_for(lambda: big_id in reserved_ids(queue), "the big job's reservation")
        stats = queue.resource_stats()["gpu"]
        assert stats.reserved == 1 and stats.in_use == 4 and stats.largest == 4, stats
        # Each unit freed is held for it: no small job starts meanwhile.
        for n, job_id in enumerate(busy):
            tracker.release(job_id)
            wait_state(queue, job_id, JobState.DONE)
            if n < 3:
                time.sleep(SETTLE)
                assert tracker.started() == busy, tracker.starts
        wait_for(lambda: big_id in tracker.started(), "the big job's start")
        assert tracker.started() == [*busy, big_id]
        assert reserved_ids(queue) == [] or big_id not in reserved_ids(queue)
        time.sleep(SETTLE)
        assert tracker.started() == [*busy, big_id], "a small job started next to it"
        tracker.release_all()
        bg.join()
    finally:
        tracker.release_all()
        bg.stop()
    assert not tracker.violations, tracker.violations
    assert queue.counts() == {"done": 13}
    assert sorted(tracker.started()) == sorted([*smalls, big_id])
    assert reserved_ids(queue) == []
    assert queue.resource_stats()["gpu"].reserved == 0
    # The database's start instants agree: every small job not already running when the
    # big one was reserved started after it.
    big_at = queue.get(big_id).started_at
    assert big_at is not None
    later = [queue.get(s).started_at for s in smalls if s not in busy]
    assert all(at is not None and at >= big_at for at in later), (big_at, later)


def test_a_reservation_whose_job_is_cancelled_is_dropped(
    queue: readyq.Queue, tracked: list[Tracker]
) -> None:
    queue.resource("gpu", capacity=2)
    tracker = Tracker(lambda: 2)
    tracked.append(tracker)

    @queue.handler("work", uses={"gpu": 1})
    def work(job: readyq.Job) -> None:
        tracker.run(job, (job.args or {}).get("units", 1))

    first = queue.enqueue("work", group="a")
    worker = queue.worker(concurrency=4, poll_interval=POLL)
    try:
        tick_until(worker, lambda: tracker.started() == [first], "the first start")
        big = queue.enqueue("work", {"units": 2}, uses={"gpu": 2}, group="big")
        tick_until(worker, lambda: reserved_ids(queue) == [big], "the reservation")
        small = queue.enqueue("work", group="b")
        for _ in range(3):
            worker.run_once()
        # The big job holds the free unit: the small one waits (reserved behind it).
        assert reserved_ids(queue)[0] == big and tracker.started() == [first]
        assert queue.cancel(big)
        tick_until(worker, lambda: small in tracker.started(), "the small job's start")
        assert reserved_ids(queue) == []
        assert queue.get(big).state is JobState.CANCELLED
    finally:
        tracker.release_all()
        stop_ticked(worker)
    assert not tracker.violations, tracker.violations


def test_a_big_job_is_not_starved_by_a_stream_of_small_ones(
    queue: readyq.Queue, tracked: list[Tracker]
) -> None:
    """Two groups of short 1-unit jobs keep all 4 units busy; a 4-unit job enqueued then
    starts long before they are through, and once it is reserved at most the small jobs
    already claimed start before it (the units in flight then: at most 4)."""
    queue.resource("gpu", capacity=4)
    tracker = Tracker(lambda: 4, hold=False)
    tracked.append(tracker)
    seen_reserved: list[float] = []

    @queue.handler("small", uses={"gpu": 1})
    def small(job: readyq.Job) -> None:
        tracker.run(job, 1, seconds=0.03)

    @queue.handler("big", uses={"gpu": 4})
    def big(job: readyq.Job) -> None:
        tracker.run(job, 4, seconds=0.03)

    smalls = queue.enqueue_many(
        [readyq.JobSpec("small", group=f"s{i % 2}") for i in range(60)]
    )
    bg = Background(queue, concurrency=8)
    try:
        wait_for(lambda: len(tracker.started()) >= 6, "small jobs under way")
        big_id = queue.enqueue("big", group="big")
        wait_for(lambda: big_id in reserved_ids(queue) or big_id in tracker.started(),
                 "the big job's reservation or start", timeout=10)
        seen_reserved.append(time.monotonic())
        bg.join()
    finally:
        bg.stop()
    assert not tracker.violations, tracker.violations
    assert queue.counts() == {"done": 61}
    order = tracker.started()
    rank = order.index(big_id)
    big_start = tracker.starts[rank]
    assert big_start.use_after == 4  # nothing else held a unit as it started
    after = [s for s in tracker.starts if s.at > big_start.at]
    between = [s for s in tracker.starts[:rank] if s.at >= seen_reserved[0]]
    print(f"big job start #{rank + 1} of {len(order)}, {len(between)} small start(s) "
          f"after its reservation was seen, {len(after)} after it")
    assert len(between) <= 4, between
    assert len(after) >= 20, "the big job waited for the small backlog"
    assert len(smalls) == 60


# -- figures ----------------------------------------------------------------------------------


def test_resource_stats_on_a_staged_state(queue: readyq.Queue, tracked: list[Tracker]) -> None:
    queue.resource("gpu", capacity=4)
    queue.resource("mem", capacity=10)
    queue.resource("idle", capacity=lambda: 3)
    tracker = Tracker(lambda: 4)
    tracked.append(tracker)

    @queue.handler("train", uses={"gpu": 2})
    def train(job: readyq.Job) -> None:
        tracker.run(job, (job.args or {}).get("units", 2))

    @queue.handler("plain")
    def plain(job: readyq.Job) -> None:
        return None

    assert queue.resource_stats() == {
        name: readyq.ResourceStats(name, None, None, 0, 0, 0, 0, 0)
        for name in ("gpu", "idle", "mem")
    }
    running = queue.enqueue("train", group="hot")
    worker = queue.worker(concurrency=8, poll_interval=POLL)
    try:
        assert worker.run_once().claimed == 1
        wait_for(lambda: tracker.started() == [running], "the first job's start")
        # Runnable: two taking the handler's 2, one taking 3, one taking 1 and 5 of mem,
        # one taking nothing; not runnable: a waiting one and a delayed one.
        queue.enqueue("train", group="a")
        queue.enqueue("train", group="b")
        queue.enqueue("train", {"units": 3}, uses={"gpu": 3}, group="a")
        queue.enqueue("train", {"units": 1}, uses={"gpu": 1, "mem": 5}, group="c")
        queue.enqueue("plain", group="c")
        queue.enqueue("train", uses={"gpu": 4}, depends_on=[running])
        queue.enqueue("train", uses={"mem": 10, "gpu": 4}, run_after=timedelta(hours=1))
        stats = queue.resource_stats()
        assert set(stats) == {"gpu", "idle", "mem"}
        gpu, mem, idle = stats["gpu"], stats["mem"], stats["idle"]
        assert (gpu.capacity, gpu.in_use, gpu.waiting, gpu.wanted, gpu.largest,
                gpu.reserved) == (4, 2, 4, 8, 3, 0), gpu
        assert (mem.capacity, mem.in_use, mem.waiting, mem.wanted, mem.largest,
                mem.reserved) == (10, 0, 1, 5, 5, 0), mem
        assert (idle.capacity, idle.in_use, idle.waiting, idle.wanted, idle.largest,
                idle.reserved) == (3, 0, 0, 0, 0, 0), idle
        assert gpu.seen_age is not None and 0 <= gpu.seen_age < 30
        groups = queue.group_stats()
        assert groups["hot"].uses == {"gpu": 2} and groups["hot"].in_flight == 1
        assert groups["a"].uses == {} and groups["a"].ready == 2
        # A producer without handlers sees the stored costs only (the handler's are
        # unknown to it), and the capacities the worker recorded.
        other = readyq.Queue(queue.engine.url.render_as_string(hide_password=False))
        try:
            seen = other.resource_stats()
            assert (seen["gpu"].capacity, seen["gpu"].in_use, seen["gpu"].waiting,
                    seen["gpu"].wanted) == (4, 2, 2, 4), seen["gpu"]
        finally:
            other.close()
        # One more claim: what fits starts, the next job that does not is reserved.
        worker.run_once()
        wait_for(lambda: len(tracker.started()) >= 2, "a second start")
        time.sleep(0.05)
        stats = queue.resource_stats()
        gpu = stats["gpu"]
        assert 2 < gpu.in_use <= 4, gpu
        assert gpu.in_use + gpu.wanted == 2 + 8  # moved from waiting to in use, not lost
        assert gpu.reserved == len(reserved_ids(queue))
        assert stats["mem"].in_use + stats["mem"].wanted == 5
    finally:
        tracker.release_all()
        stop_ticked(worker)
    assert not tracker.violations, tracker.violations


def test_a_job_without_costs_starts_next_to_its_groups_big_job(
    queue: readyq.Queue, tracked: list[Tracker]
) -> None:
    """Work conservation: a group whose running job holds its whole quota in dominant
    units (3 of 4 gpus) still starts a job that takes no gpu while slots are free."""
    queue.resource("gpu", capacity=4)
    tracker = Tracker(lambda: 4)
    tracked.append(tracker)
    ran: list[int] = []

    @queue.handler("train", uses={"gpu": 3})
    def train(job: readyq.Job) -> None:
        tracker.run(job, 3)

    @queue.handler("plain")
    def plain(job: readyq.Job) -> None:
        ran.append(job.id)

    big = queue.enqueue("train", group="g")
    bg = Background(queue, concurrency=4)
    try:
        wait_for(lambda: tracker.started() == [big], "the big job's start")
        # 3 of 4 slots of the global cap are free, no other group wants anything, and
        # the job takes no gpu.
        small = queue.enqueue("plain", group="g")
        wait_for(lambda: small in ran, "the job without costs to run", timeout=5)
    finally:
        tracker.release_all()
        bg.stop()


def test_a_job_larger_than_the_capacity_holds_nothing_and_waits(db: str) -> None:
    """A job asking for more than the whole capacity (accepted by a producer that knows
    the resource only from what workers recorded) waits, shown by show, and holds no
    unit for itself: the others run."""
    consumer = readyq.Queue(db)
    consumer.create_schema()
    producer = readyq.Queue(db)
    try:
        consumer.resource("gpu", capacity=2)
        ran: list[int] = []

        @consumer.handler("train")
        def train(job: readyq.Job) -> None:
            ran.append(job.id)

        consumer.enqueue("train")
        consumer.run_worker(until_idle=True, poll_interval=POLL)  # records gpu: 2
        with contextlib.suppress(readyq.InvalidResourceUse):  # refusing it is a fix too
            producer.enqueue("train", uses={"gpu": 5}, group="huge")
        smalls = [producer.enqueue("train", uses={"gpu": 1}, group="s") for _ in range(3)]
        worker = consumer.worker(concurrency=4, poll_interval=POLL)
        deadline = time.monotonic() + 1.5
        while not all(consumer.get(s).state is JobState.DONE for s in smalls):
            assert time.monotonic() < deadline, (
                f"small jobs {[consumer.get(s).state.value for s in smalls]}, reserved: "
                f"{reserved_ids(consumer)}"
            )
            worker.run_once()
            time.sleep(0.01)
        huge = [j.id for j in consumer.jobs(state="ready").jobs]
        assert len(huge) == 1 and reserved_ids(consumer) == []
        waits = admin.show(consumer, huge[0]).waits_for
        assert waits == [
            "gpu: needs 5, more than its whole capacity of 2: it waits for the capacity "
            "to grow"
        ]
    finally:
        consumer.close()
        producer.close()


def test_a_reserved_head_does_not_hide_the_jobs_behind_it(queue: readyq.Queue) -> None:
    """A claim for one job reads a window of each group's first jobs. A reserved job
    there is planned as a reservation: the window widens past it, and a job behind it
    that fits starts. Here the reservation outgrew a capacity that shrank, so it holds
    nothing; before this was fixed the claim came back empty."""
    queue.resource("gpu", capacity=2)
    store = queue.store

    def claim(gpus: int) -> list[int]:
        view = ResourceView({"gpu": gpus}, {})
        got = store.claim_jobs(ClaimOrder(
            owner="w", cap=3, limit=1, lease_ttl=60.0, types=None, resources=view,
        ))
        return [c.id for c in got]

    running = queue.enqueue("t", uses={"gpu": 1})
    assert claim(2) == [running]
    big = queue.enqueue("t", uses={"gpu": 2})
    small = queue.enqueue("t")
    # The big job is next and does not fit: reserved; its group is done for this claim.
    assert claim(2) == []
    assert reserved_ids(queue) == [big]
    assert claim(1) == [small]
    assert queue.get(big).state is JobState.READY
