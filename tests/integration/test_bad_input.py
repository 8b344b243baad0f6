"""Bad input raises its own InvalidJob subclass and leaves the database exactly as it was;
odd but valid keys and payloads are stored through bound parameters and come back intact.

The tables are snapshotted (every row, every column) before and after each bad call. The
cases run in a loop inside one test per dialect, so the database is set up once.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from readyq import JobFilter, JobSpec, JobState, admin
from readyq.listing import encode_cursor

WORKER_OPTIONS: dict[str, Any] = {
    "concurrency": 4,
    "poll_interval": 0.02,
    "lease_ttl": 10.0,
    "heartbeat_interval": 2.0,
}


def run_bounded(queue: readyq.Queue, timeout: float = 60.0) -> readyq.WorkerStats:
    worker = queue.worker(**WORKER_OPTIONS)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["stats"] = worker.run(until_idle=True)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        worker.stop()
        thread.join(30)
        pytest.fail(f"the worker did not become idle within {timeout}s: {queue.counts()}")
    if "error" in box:
        raise box["error"]
    return box["stats"]


def snapshot(queue: readyq.Queue) -> dict[str, list[tuple[Any, ...]]]:
    t = queue.store.tables
    out: dict[str, list[tuple[Any, ...]]] = {}
    with queue.engine.connect() as conn:
        for table in (t.jobs, t.deps, t.groups, t.gate):
            rows = conn.execute(sa.select(table).order_by(*table.primary_key.columns)).all()
            out[table.name] = [tuple(r) for r in rows]
    return out


def encoded_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


class Ctx:
    """Ids of existing rows the bad calls refer to."""

    plain: int
    container: int
    inner: int
    finished_container: int
    missing: int


@pytest.fixture
def ctx(queue: readyq.Queue) -> Ctx:
    @queue.handler("work")
    def work(job: readyq.Job) -> Any:
        return job.args

    c = Ctx()
    c.finished_container = queue.enqueue_container("batch", group="g1")
    queue.enqueue("work", {"n": 0}, parent=c.finished_container, group="g1")
    run_bounded(queue)  # also writes a fair-share row in the groups table
    assert queue.get(c.finished_container).state is JobState.DONE
    c.plain = queue.enqueue("work", {"n": 1}, group="g2", run_after=3600)
    c.container = queue.enqueue_container("batch", depends_on=[c.plain])
    c.inner = queue.enqueue_container("batch", parent=c.container)
    queue.enqueue("work", {"n": 2}, parent=c.inner, depends_on=[c.plain])
    c.missing = c.plain + 10_000
    return c


Case = tuple[str, Callable[[readyq.Queue, Ctx], object], type[Exception]]


def _with_weight(weight: Any) -> Callable[[readyq.Queue, Ctx], object]:
    return lambda q, c: q.enqueue("work", weight=weight)

CASES: list[Case] = [
    # type
    ("unknown handler type", lambda q, c: q.enqueue("no-such-type"), readyq.UnknownJobType),
    ("unknown type by case", lambda q, c: q.enqueue("Work"), readyq.UnknownJobType),
    ("empty type", lambda q, c: q.enqueue(""), readyq.InvalidJobOption),
    ("type with NUL", lambda q, c: q.enqueue("wo\x00rk"), readyq.InvalidJobOption),
    # args
    ("args object()", lambda q, c: q.enqueue("work", object()), readyq.PayloadNotJSON),
    ("args set", lambda q, c: q.enqueue("work", {1, 2, 3}), readyq.PayloadNotJSON),
    ("args NaN", lambda q, c: q.enqueue("work", float("nan")), readyq.PayloadNotJSON),
    ("args nested NaN", lambda q, c: q.enqueue("work", {"a": [1, math.nan]}),
     readyq.PayloadNotJSON),
    ("args infinity", lambda q, c: q.enqueue("work", [math.inf]), readyq.PayloadNotJSON),
    ("args bytes", lambda q, c: q.enqueue("work", b"raw"), readyq.PayloadNotJSON),
    ("args tuple keys", lambda q, c: q.enqueue("work", {(1, 2): 3}), readyq.PayloadNotJSON),
    ("args too deep", lambda q, c: q.enqueue("work", _deep(150)), readyq.PayloadNotJSON),
    ("container args set", lambda q, c: q.enqueue_container("batch", {1}),
     readyq.PayloadNotJSON),
    # dependencies
    ("dependency missing", lambda q, c: q.enqueue("work", depends_on=[c.missing]),
     readyq.DependencyNotFound),
    ("one of two dependencies missing",
     lambda q, c: q.enqueue("work", depends_on=[c.plain, c.missing]), readyq.DependencyNotFound),
    ("container dependency missing",
     lambda q, c: q.enqueue_container("batch", depends_on=[c.missing]),
     readyq.DependencyNotFound),
    ("dependency missing, valid parent",
     lambda q, c: q.enqueue("work", parent=c.container, depends_on=[c.missing]),
     readyq.DependencyNotFound),
    ("depends_on as a string", lambda q, c: q.enqueue("work", depends_on="1"),
     readyq.InvalidJobOption),
    ("depends_on as an int", lambda q, c: q.enqueue("work", depends_on=c.plain),
     readyq.InvalidJobOption),
    ("depends_on None", lambda q, c: q.enqueue("work", depends_on=None),
     readyq.InvalidJobOption),
    ("depends_on not iterable", lambda q, c: q.enqueue("work", depends_on=2.5),
     readyq.InvalidJobOption),
    ("container depends_on None",
     lambda q, c: q.enqueue_container("batch", depends_on=None), readyq.InvalidJobOption),
    ("dependency id zero", lambda q, c: q.enqueue("work", depends_on=[0]),
     readyq.InvalidJobOption),
    ("dependency id True", lambda q, c: q.enqueue("work", depends_on=[True]),
     readyq.InvalidJobOption),
    ("depending on your own container",
     lambda q, c: q.enqueue("work", parent=c.inner, depends_on=[c.container]),
     readyq.DependencyCycle),
    # parents
    ("parent not a container", lambda q, c: q.enqueue("work", parent=c.plain),
     readyq.InvalidParent),
    ("parent missing", lambda q, c: q.enqueue("work", parent=c.missing), readyq.InvalidParent),
    ("parent finished", lambda q, c: q.enqueue("work", parent=c.finished_container),
     readyq.InvalidParent),
    ("container parent not a container",
     lambda q, c: q.enqueue_container("batch", parent=c.plain), readyq.InvalidParent),
    ("container parent missing",
     lambda q, c: q.enqueue_container("batch", parent=c.missing), readyq.InvalidParent),
    ("parent id negative", lambda q, c: q.enqueue("work", parent=-1), readyq.InvalidJobOption),
    # weights
    *[
        (f"weight {w!r}", _with_weight(w), readyq.InvalidWeight)
        for w in (0, -1, 1.5, True, False, "2", None, 1_000_001)
    ],
    ("container weight 0", lambda q, c: q.enqueue_container("batch", weight=0),
     readyq.InvalidWeight),
    # other options
    ("empty group", lambda q, c: q.enqueue("work", group=""), readyq.InvalidJobOption),
    ("group too long", lambda q, c: q.enqueue("work", group="g" * 201), readyq.InvalidJobOption),
    ("group not a string", lambda q, c: q.enqueue("work", group=5), readyq.InvalidJobOption),
    ("group with NUL", lambda q, c: q.enqueue("work", group="a\x00b"), readyq.InvalidJobOption),
    ("priority float", lambda q, c: q.enqueue("work", priority=1.5), readyq.InvalidJobOption),
    ("priority bool", lambda q, c: q.enqueue("work", priority=True), readyq.InvalidJobOption),
    ("max_attempts 0", lambda q, c: q.enqueue("work", max_attempts=0), readyq.InvalidJobOption),
    ("timeout negative", lambda q, c: q.enqueue("work", timeout=-1), readyq.InvalidJobOption),
    ("timeout NaN", lambda q, c: q.enqueue("work", timeout=math.nan), readyq.InvalidJobOption),
    ("run_after NaN", lambda q, c: q.enqueue("work", run_after=math.nan),
     readyq.InvalidJobOption),
    ("run_after string", lambda q, c: q.enqueue("work", run_after="soon"),
     readyq.InvalidJobOption),
    ("connection of the wrong kind", lambda q, c: q.enqueue("work", connection="conn"),
     readyq.InvalidJobOption),
]


def _deep(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


def test_every_bad_input_raises_its_error_and_writes_nothing(
    queue: readyq.Queue, ctx: Ctx
) -> None:
    failures: list[str] = []
    for name, call, expected in CASES:
        before = snapshot(queue)
        try:
            call(queue, ctx)
        except expected as exc:
            assert isinstance(exc, readyq.InvalidJob), name
            assert isinstance(exc, ValueError), name
        except Exception as exc:
            failures.append(f"{name}: raised {type(exc).__name__}: {exc}")
        else:
            failures.append(f"{name}: did not raise {expected.__name__}")
        after = snapshot(queue)
        if after != before:
            failures.append(f"{name}: the database changed")
    assert not failures, "\n".join(failures)
    # The queue still works afterwards.
    job_id = queue.enqueue("work", {"ok": True})
    assert queue.get(job_id).state is JobState.READY


NOT_IDS: list[Any] = [2**63, 2**64, -1, 0, "1", 1.0, True]
ID_CALLS: list[tuple[str, Callable[[readyq.Queue, Ctx, Any], object]]] = [
    ("get", lambda q, c, x: q.get(x)),
    ("cancel", lambda q, c, x: q.cancel(x)),
    ("wait", lambda q, c, x: q.wait(x, timeout=0)),
    ("admin.show", lambda q, c, x: admin.show(q, x)),
    ("admin.retry", lambda q, c, x: admin.retry(q, x)),
    ("admin.cancel", lambda q, c, x: admin.cancel(q, x)),
    ("admin.dag", lambda q, c, x: admin.dag(q, x)),
    ("depends_on", lambda q, c, x: q.enqueue("work", depends_on=[c.plain, x])),
    ("parent", lambda q, c, x: q.enqueue("work", parent=x)),
    ("unique depends_on", lambda q, c, x: q.enqueue_unique("work", unique_key="u",
                                                          depends_on=[x])),
    ("container parent", lambda q, c, x: q.enqueue_container("batch", parent=x)),
    ("batch depends_on", lambda q, c, x: q.enqueue_many([JobSpec("work", depends_on=[x])])),
    ("batch parent", lambda q, c, x: q.enqueue_many([JobSpec("work", parent=x)])),
]
WHEN_BAD = [
    timedelta.max,
    timedelta(days=36525 * 2),
    datetime.max.replace(tzinfo=timezone(timedelta(hours=-12))),
    datetime.min.replace(tzinfo=timezone(timedelta(hours=12))),
]
BIG = 2**31  # past every INTEGER column: PostgreSQL and MariaDB refuse it, SQLite stores it

RANGE_CASES: list[tuple[str, Callable[[readyq.Queue, Ctx], object], type[Exception]]] = [
    *[
        (f"{name} {x!r}", lambda q, c, f=f, x=x: f(q, c, x), readyq.InvalidJobId)
        for name, f in ID_CALLS
        for x in NOT_IDS
        if not (name.startswith("batch") and isinstance(x, str))  # a batch's key, not an id
    ],
    ("listing parent 2**63", lambda q, c: q.jobs(parent=2**63), readyq.InvalidFilter),
    ("listing id 2**63", lambda q, c: q.jobs(id=[1, 2**63]), readyq.InvalidFilter),
    ("bulk id 2**63", lambda q, c: admin.cancel_many(q, id=2**63), readyq.InvalidFilter),
    # integers past their columns
    ("max_attempts 2**31", lambda q, c: q.enqueue("work", max_attempts=BIG),
     readyq.InvalidJobOption),
    ("max_attempts 1,000,001", lambda q, c: q.enqueue("work", max_attempts=1_000_001),
     readyq.InvalidJobOption),
    ("batch max_attempts 2**40",
     lambda q, c: q.enqueue_many([JobSpec("work", max_attempts=2**40)]), readyq.InvalidJobOption),
    ("priority 2**31", lambda q, c: q.enqueue("work", priority=BIG), readyq.InvalidJobOption),
    ("weight 2**31", lambda q, c: q.enqueue("work", weight=BIG), readyq.InvalidWeight),
    ("handler max_attempts 2**31",
     lambda q, c: q.handler("other", max_attempts=BIG), readyq.ConfigurationError),
    ("default_max_attempts 2**31",
     lambda q, c: readyq.Queue(q.engine, default_max_attempts=BIG), readyq.ConfigurationError),
    ("retry extra_attempts 2**31",
     lambda q, c: admin.retry(q, c.plain, extra_attempts=BIG), readyq.InvalidArgument),
    ("retry_many extra_attempts 2**31",
     lambda q, c: admin.retry_many(q, state="failed", extra_attempts=BIG),
     readyq.InvalidArgument),
    ("concurrency 2**40", lambda q, c: q.worker(concurrency=2**40), readyq.ConfigurationError),
    ("resource capacity 2**40", lambda q, c: q.resource("big", capacity=2**40),
     readyq.InvalidResource),
    # durations and instants past what an instant can be
    ("timeout 1e300", lambda q, c: q.enqueue("work", timeout=1e300), readyq.InvalidJobOption),
    ("timeout timedelta.max", lambda q, c: q.enqueue("work", timeout=timedelta.max),
     readyq.InvalidJobOption),
    ("run_after 1e300", lambda q, c: q.enqueue("work", run_after=1e300), readyq.InvalidJobOption),
    ("run_after timedelta.max", lambda q, c: q.enqueue("work", run_after=timedelta.max),
     readyq.InvalidJobOption),
    *[
        (f"run_after {when!r}", lambda q, c, w=when: q.enqueue("work", run_after=w),
         readyq.InvalidJobOption)
        for when in WHEN_BAD[2:]
    ],
    ("handler retry_backoff 1e300",
     lambda q, c: q.handler("other", retry_backoff_max=1e300), readyq.InvalidJobOption),
    ("lease_ttl 1e300", lambda q, c: q.worker(lease_ttl=1e300), readyq.ConfigurationError),
    ("shutdown_grace 1e300", lambda q, c: q.worker(shutdown_grace=1e300),
     readyq.ConfigurationError),
    ("idle_transaction_timeout 1e300",
     lambda q, c: readyq.Queue(q.engine, idle_transaction_timeout=1e300),
     readyq.ConfigurationError),
    # listings and bulk actions bounded beyond what an instant can be
    *[
        (f"{field} {when!r}", lambda q, c, f=field, w=when: q.jobs(**{f: w}),
         readyq.InvalidFilter)
        for when in WHEN_BAD
        for field in ("created_after", "finished_before")
    ],
    *[
        (f"cancel_many created_after {when!r}",
         lambda q, c, w=when: admin.cancel_many(q, created_after=w), readyq.InvalidFilter)
        for when in WHEN_BAD
    ],
    ("a cursor past the ids",
     lambda q, c: q.jobs(cursor=encode_cursor(JobFilter(), "newest", 2**63)),
     readyq.InvalidCursor),
    ("a cursor before the ids",
     lambda q, c: q.jobs(cursor=encode_cursor(JobFilter(), "newest", 0)), readyq.InvalidCursor),
    # operator arguments
    *[
        (f"prune {age!r}", lambda q, c, a=age: admin.prune(q, a), readyq.InvalidArgument)
        for age in (-1, -0.5, math.inf, math.nan, 1e300, "7d", None, True)
    ],
    ("prune batch_size 0", lambda q, c: admin.prune(q, 10, batch_size=0),
     readyq.InvalidArgument),
    ("prune batch_size 2**63", lambda q, c: admin.prune(q, 10, batch_size=2**63),
     readyq.InvalidArgument),
    ("prune dry run -1", lambda q, c: admin.prune(q, -1, dry_run=True), readyq.InvalidArgument),
    ("dag max_nodes 0", lambda q, c: admin.dag(q, c.plain, max_nodes=0), readyq.InvalidArgument),
    ("status unclaimed_after -1", lambda q, c: admin.status(q, unclaimed_after=-1),
     readyq.InvalidArgument),
]


def test_values_out_of_range_raise_their_error_and_write_nothing(
    queue: readyq.Queue, ctx: Ctx
) -> None:
    """Ids, integers, durations and instants beyond what the columns hold are refused
    before any database sees them: PostgreSQL and MariaDB raised their own errors (or
    took 2**63 for a missing job), SQLite stored what they refused."""
    cancelled_ok = queue.enqueue("work", run_after=3600)
    failures: list[str] = []
    for name, call, expected in RANGE_CASES:
        before = snapshot(queue)
        try:
            call(queue, ctx)
        except expected as exc:
            assert isinstance(exc, readyq.ReadyqError), name
            assert isinstance(exc, ValueError), name
        except Exception as exc:
            failures.append(f"{name}: raised {type(exc).__name__}: {str(exc)[:150]}")
        else:
            failures.append(f"{name}: did not raise {expected.__name__}")
        if snapshot(queue) != before:
            failures.append(f"{name}: the database changed")
    assert not failures, "\n".join(failures)
    assert queue.get(cancelled_ok).state is JobState.READY
    # Within range: accepted and shown.
    edge = datetime(9999, 12, 30, tzinfo=timezone.utc)
    job = queue.enqueue("work", max_attempts=1_000_000, timeout=timedelta(days=36524),
                        run_after=edge, priority=1_000_000)
    info = queue.get(job)
    assert info.max_attempts == 1_000_000 and info.run_after == edge
    assert queue.jobs(created_after=timedelta(days=36524), id=job).jobs[0].id == job


def test_a_cap_or_capacity_past_the_columns_counts_as_the_most_there_is(
    queue: readyq.Queue,
) -> None:
    """A callable cap or capacity may say "no limit" with a huge number: it counts as
    the largest one (PostgreSQL and MariaDB refused it in the claim, and the worker
    retried that claim for ever)."""
    queue.resource("gpu", capacity=lambda: 2**40)
    queue.handler("work")(lambda job: job.args)
    queue.handler("gpu", uses={"gpu": 1})(lambda job: job.args)
    ids = [queue.enqueue("work", {"n": 1}), queue.enqueue("gpu", {"n": 2})]
    worker = queue.worker(**{**WORKER_OPTIONS, "concurrency": lambda: 2**40})
    box: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: box.update(stats=worker.run(until_idle=True)),
                              daemon=True)
    thread.start()
    thread.join(60)
    if thread.is_alive():
        worker.stop()
        thread.join(30)
        pytest.fail(f"the worker did not become idle: {queue.counts()}")
    assert [queue.get(i).state for i in ids] == [JobState.DONE, JobState.DONE]
    assert box["stats"].db_errors == 0


def test_an_idle_transaction_timeout_past_the_servers_range_is_its_longest(db: str) -> None:
    """PostgreSQL takes the timeout in milliseconds as an INTEGER: 10 million seconds
    was refused at every connection (MariaDB caps its own at a year)."""
    q = readyq.Queue(db, idle_transaction_timeout=10_000_000)
    try:
        q.create_schema()
        assert q.get(q.enqueue("t")).state is JobState.READY
    finally:
        q.close()


def test_payload_size_limit(db: str) -> None:
    small = readyq.Queue(db, max_payload_bytes=1000)
    try:
        small.create_schema()

        @small.handler("echo")
        def echo(job: readyq.Job) -> Any:
            return job.args

        existing = small.enqueue("echo", {"before": True})
        # Multi-byte characters and escapes: the limit counts UTF-8 bytes of the JSON.
        head = {"s": "😀" * 10 + "é" * 50 + 'quote " back \\ nl \n tab \t ' + "日本"}
        fill = 1000 - encoded_size(head)
        at_limit = {"s": head["s"] + "a" * fill}
        over = {"s": head["s"] + "a" * (fill + 1)}
        assert encoded_size(at_limit) == 1000
        assert encoded_size(over) == 1001

        before = snapshot(small)
        with pytest.raises(readyq.PayloadTooLarge, match="1001 bytes"):
            small.enqueue("echo", over)
        with pytest.raises(readyq.PayloadTooLarge):
            small.enqueue_container("echo", over)
        with pytest.raises(readyq.PayloadTooLarge):
            small.enqueue("echo", "x" * 2000)
        assert snapshot(small) == before

        job_id = small.enqueue("echo", at_limit)
        assert small.get(job_id).args == at_limit
        stored = snapshot(small)[small.store.tables.jobs.name]
        raw = next(row for row in stored if row[0] == job_id)[2]
        assert len(raw.encode("utf-8")) == 1000
        run_bounded(small)
        info = small.get(job_id)
        assert info.state is JobState.DONE
        assert info.args == at_limit
        assert info.result == at_limit  # a result at the limit is accepted too
        assert small.get(existing).state is JobState.DONE
    finally:
        small.close()


BAD_PREFIXES = [
    "",
    "1abc",
    "a;drop",
    "a;DROP TABLE readyq_jobs;--",
    "a-b",
    'x"y',
    "x'y",
    "a b",
    " a",
    "a\n",
    "a" * 32,
    "p" * 40,
    "ü",
    "jobs_é",
    "日本",
    "a.b",
    None,
    7,
]


def test_invalid_table_prefixes_are_refused_and_create_nothing(db: str) -> None:
    engine = sa.create_engine(db, poolclass=sa.NullPool)
    try:
        names_before = set(sa.inspect(engine).get_table_names())
        accepted = []
        for prefix in BAD_PREFIXES:
            for target in (db, engine):
                try:
                    readyq.Queue(target, prefix=prefix).close()
                except readyq.InvalidTablePrefix:
                    continue
                accepted.append((prefix, type(target).__name__))
        assert not accepted, f"accepted invalid prefixes: {accepted}"
        assert set(sa.inspect(engine).get_table_names()) == names_before
    finally:
        engine.dispose()


@pytest.mark.parametrize("prefix", ["a" * 31, "_", "app_v2_"])
def test_valid_prefix_edge_cases_work(db: str, prefix: str) -> None:
    q = readyq.Queue(db, prefix=prefix)
    try:
        q.create_schema()

        @q.handler("echo")
        def echo(job: readyq.Job) -> Any:
            return job.args

        job_id = q.enqueue("echo", [prefix])
        run_bounded(q)
        assert q.get(job_id).result == [prefix]
        names = set(sa.inspect(q.engine).get_table_names())
        assert {f"{prefix}{t}" for t in ("jobs", "job_deps", "groups", "gate")} <= names
    finally:
        q.close()


ODD_KEYS = [
    "it's",
    'say "hi"',
    "a;DROP TABLE readyq_jobs;--",
    "Robert'); DROP TABLE students;--",
    "back\\slash\\",
    "percent %s %(name)s %%",
    "new\nline\ttab",
    "日本語のグループ",
    "emoji 😀🎉",
    "Ünïcödé",
    "Tenant",
    "tenant",
    "TENANT",
    "café",
    "cafe",
    "g" * 200,
]


def test_odd_group_keys_round_trip(queue: readyq.Queue) -> None:
    seen: list[tuple[int, str]] = []
    lock = threading.Lock()

    @queue.handler("work")
    def work(job: readyq.Job) -> Any:
        with lock:
            seen.append((job.id, job.group))
        return job.group

    ids = {queue.enqueue("work", {"key": key}, group=key): key for key in ODD_KEYS}
    for job_id, key in ids.items():
        info = queue.get(job_id)
        assert info.group == key
        assert info.args == {"key": key}

    run_bounded(queue)

    for job_id, key in ids.items():
        info = queue.get(job_id)
        assert info.state is JobState.DONE, (key, info.state, info.error)
        assert info.result == key
    assert sorted(seen) == sorted(ids.items())
    # Every key is its own fair-share group, stored as given.
    g = queue.store.tables.groups
    with queue.engine.connect() as conn:
        stored = list(conn.execute(sa.select(g.c.group_key)).scalars())
    assert sorted(stored) == sorted(ODD_KEYS)


def test_odd_job_types_run_only_under_their_exact_handler(queue: readyq.Queue) -> None:
    """A producer without handlers may enqueue any type; a worker claims only its own."""
    producer = readyq.Queue(queue.engine)
    seen: list[str] = []

    @queue.handler("resize")
    def resize(job: readyq.Job) -> Any:
        seen.append(job.type)
        return job.type

    @queue.handler('quote"type;--')
    def quoted(job: readyq.Job) -> Any:
        seen.append(job.type)
        return job.type

    mine = [producer.enqueue("resize"), producer.enqueue('quote"type;--')]
    others = [producer.enqueue(t) for t in ("Resize", "RESIZE", "résize", "Quote\"type;--")]

    stats = run_bounded(queue)

    assert sorted(seen) == sorted(["resize", 'quote"type;--'])
    assert stats.claimed == 2 and stats.db_errors == 0
    for job_id in mine:
        assert queue.get(job_id).state is JobState.DONE
    for job_id in others:
        info = queue.get(job_id)
        assert info.state is JobState.READY and info.attempts == 0
