"""Hostile input that test_bad_input.py does not cover: payloads at and over the default
1 MiB limit (args and results, multi-byte, exact round trip on MariaDB's LONGTEXT), NaN
and non-JSON results, nesting at the depth limit, lone surrogates, keys with edge
whitespace, and dependency cycles through containers.

Edge whitespace: MySQL and MariaDB compare strings with PAD SPACE collations, so there
``'work' = 'work '``: a job of type ``"work "`` would be claimed by a worker for ``"work"``
(whose lookup of the handler then failed and stopped the worker), and groups ``"t"`` and
``"t "`` would collide in the fair-share table. SQLite and PostgreSQL keep them apart. A
type or group that starts or ends with whitespace is therefore refused with
InvalidJobOption on every database, rather than behaving differently on one.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from readyq import JobSpec, JobState
from readyq.payload import DEFAULT_MAX_PAYLOAD_BYTES, MAX_DEPTH

LIMIT = DEFAULT_MAX_PAYLOAD_BYTES


def run_bounded(queue: readyq.Queue, timeout: float = 60.0) -> readyq.WorkerStats:
    worker = queue.worker(concurrency=4, poll_interval=0.02, lease_ttl=10.0,
                          heartbeat_interval=2.0)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["stats"] = worker.run(until_idle=True, handle_signals=False)
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
    return box["stats"]  # type: ignore[no-any-return]


def size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def exactly(n: int) -> dict[str, str]:
    """A payload of exactly ``n`` bytes of JSON with 4-, 3-, 2- and 1-byte characters,
    quotes and backslashes (escaped in JSON, so they cost two bytes)."""
    head = {"s": "😀" * 1000 + "日本" * 1000 + "é" * 1000 + '"\\' * 100 + "\n\t"}
    value = {"s": head["s"] + "a" * (n - size(head))}
    assert size(value) == n
    return value


def snapshot(queue: readyq.Queue) -> list[tuple[Any, ...]]:
    j = queue.store.tables.jobs
    with queue.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.select(j).order_by(j.c.id))]


def raw_args(queue: readyq.Queue, job_id: int, column: str = "args") -> str:
    j = queue.store.tables.jobs
    with queue.engine.connect() as conn:
        return str(conn.execute(sa.select(j.c[column]).where(j.c.id == job_id)).scalar_one())


# -- payload size -----------------------------------------------------------------------


def test_args_and_results_of_exactly_one_mebibyte_round_trip_byte_for_byte(
    queue: readyq.Queue,
) -> None:
    at_limit = exactly(LIMIT)

    @queue.handler("echo")
    def echo(job: readyq.Job) -> Any:
        return job.args

    job_id = queue.enqueue("echo", at_limit)
    stored = raw_args(queue, job_id)
    assert len(stored.encode("utf-8")) == LIMIT  # nothing cut, nothing re-encoded
    assert json.loads(stored) == at_limit

    before = snapshot(queue)
    over = exactly(LIMIT + 1)
    with pytest.raises(readyq.PayloadTooLarge, match=f"{LIMIT + 1} bytes"):
        queue.enqueue("echo", over)
    with pytest.raises(readyq.PayloadTooLarge):
        queue.enqueue_many([JobSpec("echo", {"small": 1}), JobSpec("echo", over)])
    assert snapshot(queue) == before

    run_bounded(queue)
    info = queue.get(job_id)
    assert info.state is JobState.DONE, info.error
    assert info.args == at_limit and info.result == at_limit
    assert len(raw_args(queue, job_id, "result").encode("utf-8")) == LIMIT


def test_a_result_over_the_limit_fails_the_attempt_and_stores_nothing_of_it(
    queue: readyq.Queue,
) -> None:
    @queue.handler("big", max_attempts=1)
    def big(job: readyq.Job) -> Any:
        return exactly(LIMIT + 1)

    job_id = queue.enqueue("big")
    run_bounded(queue)
    info = queue.get(job_id)
    assert info.state is JobState.FAILED
    assert info.result is None
    assert f"{LIMIT + 1} bytes" in (info.error or "")


# -- results that are not JSON -------------------------------------------------------------

BAD_RESULTS: dict[str, Callable[[], Any]] = {
    "NaN": lambda: float("nan"),
    "nested infinity": lambda: {"x": [1, -math.inf]},
    "a set": lambda: {1, 2},
    "an object": object,
    "bytes": lambda: b"raw",
    "nested deeper than the limit": lambda: nested(MAX_DEPTH + 1),
    "a lone surrogate": lambda: {"s": "\ud800"},
}


def nested(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels - 1):
        value = [value]
    return [value] if levels else value


def test_results_that_are_not_json_fail_the_attempt_with_a_clear_error(
    queue: readyq.Queue,
) -> None:
    @queue.handler("bad", max_attempts=1)
    def bad(job: readyq.Job) -> Any:
        return BAD_RESULTS[job.args]()

    ids = {name: queue.enqueue("bad", name) for name in BAD_RESULTS}
    stats = run_bounded(queue)
    assert stats.db_errors == 0
    for name, job_id in ids.items():
        info = queue.get(job_id)
        assert info.state is JobState.FAILED, name
        assert info.result is None, name
        # InvalidJobResult (a ValueError): the handler returned, its result was refused.
        assert "InvalidJobResult" in (info.error or ""), (name, info.error)
        assert "returned a result that cannot be stored" in (info.error or ""), name


def test_nesting_at_the_depth_limit_round_trips_and_one_more_level_is_refused(
    queue: readyq.Queue,
) -> None:
    @queue.handler("echo")
    def echo(job: readyq.Job) -> Any:
        return job.args

    deepest = nested(MAX_DEPTH)
    job_id = queue.enqueue("echo", deepest)
    before = snapshot(queue)
    with pytest.raises(readyq.PayloadNotJSON, match="deeper"):
        queue.enqueue("echo", nested(MAX_DEPTH + 1))
    # Far past Python's recursion limit: refused by the iterative check, no RecursionError.
    with pytest.raises(readyq.PayloadNotJSON, match="deeper"):
        queue.enqueue("echo", nested(200_000))
    assert snapshot(queue) == before
    run_bounded(queue)
    assert queue.get(job_id).result == deepest


def test_lone_surrogates_are_refused_as_bad_input(queue: readyq.Queue) -> None:
    """Regression: a lone surrogate used to escape as a bare UnicodeEncodeError from the
    payload encoder or the database driver, not as a readyq InvalidJob."""

    @queue.handler("work")
    def work(job: readyq.Job) -> None:
        return None

    before = snapshot(queue)
    with pytest.raises(readyq.PayloadNotJSON, match="not valid Unicode"):
        queue.enqueue("work", {"s": "x\ud800y"})
    with pytest.raises(readyq.PayloadNotJSON):
        queue.enqueue("work", {"key\udfff": 1})
    with pytest.raises(readyq.InvalidJobOption, match="not valid Unicode"):
        queue.enqueue("work", group="tenant\ud800")
    with pytest.raises(readyq.InvalidJobOption):
        queue.enqueue_many([JobSpec("work", group="\udc80")])
    with pytest.raises(readyq.InvalidJobOption):
        queue.handler("type\ud800")
    assert snapshot(queue) == before


# -- keys -----------------------------------------------------------------------------------

EDGE_WHITESPACE = ["work ", " work", "work\t", "\nwork", "work\u00a0", "\u3000work", "work\r\n"]


def test_types_and_groups_with_edge_whitespace_are_refused_on_every_database(
    queue: readyq.Queue,
) -> None:
    producer = readyq.Queue(queue.engine)  # no handlers: any type may be enqueued
    before = snapshot(queue)
    refused = []
    for key in EDGE_WHITESPACE:
        for call in (
            lambda k: producer.enqueue(k),
            lambda k: producer.enqueue("work", group=k),
            lambda k: producer.enqueue_container(k),
            lambda k: producer.enqueue_many([JobSpec(k)]),
            lambda k: producer.enqueue_many([JobSpec("work", group=k)]),
            lambda k: producer.handler(k),
        ):
            with pytest.raises(readyq.InvalidJobOption, match="whitespace"):
                call(key)
            refused.append(key)
    assert snapshot(queue) == before
    assert len(refused) == 6 * len(EDGE_WHITESPACE)


def test_a_type_with_a_trailing_space_can_no_longer_stop_a_worker(
    queue: readyq.Queue, dialect_name: str
) -> None:
    """Regression (MariaDB): ``"work "`` used to be enqueued, claimed by the worker for
    ``"work"`` (PAD SPACE comparison) and stop it with a KeyError from its handler
    lookup, leaving every job unrun."""
    if dialect_name == "mariadb":
        with queue.engine.connect() as conn:  # the trap this guards against
            assert conn.exec_driver_sql("SELECT 'work' = 'work '").scalar() == 1
    producer = readyq.Queue(queue.engine)
    with pytest.raises(readyq.InvalidJobOption):
        producer.enqueue("work ")
    with pytest.raises(readyq.InvalidJobOption):
        producer.enqueue("work", group="t ")
    done: list[int] = []

    @queue.handler("work")
    def work(job: readyq.Job) -> None:
        done.append(job.id)

    ids = [producer.enqueue("work", group="t"), producer.enqueue("work", group="t\u200b")]
    stats = run_bounded(queue)
    assert sorted(done) == ids and stats.db_errors == 0
    g = queue.store.tables.groups
    with queue.engine.connect() as conn:
        assert sorted(conn.execute(sa.select(g.c.group_key)).scalars()) == ["t", "t\u200b"]


INNER_KEYS = [
    "a b", "tab\tinside", "zero\u200bwidth", "é", "e\u0301", "😀" * 200, "日本語 グループ",
    "'; DELETE FROM readyq_jobs; --", '"quoted" and `ticked`',
]


def test_keys_with_inner_whitespace_and_unicode_stay_distinct_and_round_trip(
    queue: readyq.Queue,
) -> None:
    seen: list[tuple[str, str]] = []
    lock = threading.Lock()

    @queue.handler("work")
    def work(job: readyq.Job) -> str:
        with lock:
            seen.append((job.group, job.type))
        return job.group

    for key in INNER_KEYS:
        # Each key also as a job type, enqueued by a producer without handlers.
        readyq.Queue(queue.engine).enqueue(key)

        @queue.handler(key)
        def other(job: readyq.Job) -> str:
            with lock:
                seen.append((job.group, job.type))
            return job.type

    ids = {queue.enqueue("work", group=key): key for key in INNER_KEYS}
    run_bounded(queue)
    for job_id, key in ids.items():
        info = queue.get(job_id)
        assert (info.state, info.group, info.result) == (JobState.DONE, key, key)
    # "é" and "e" + combining acute are different keys everywhere (binary collation).
    assert sorted(t for g, t in seen if t != "work") == sorted(INNER_KEYS)
    assert sorted(g for g, t in seen if t == "work") == sorted(INNER_KEYS)


# -- dependency cycles -----------------------------------------------------------------------


def test_no_dependency_cycle_can_be_built_through_the_public_api(queue: readyq.Queue) -> None:
    """Why no cycle can exist, and the one route that used to make one.

    Dependency edges are only ever written when their dependent job is inserted, and
    every job a new job depends on must already exist (DependencyNotFound otherwise;
    ``enqueue_many`` refers to its own jobs by key and orders the batch with a cycle
    check). A job's own id does not exist before its insert, so it cannot depend on
    itself, and no API adds an edge to an existing job. So every dependency edge points
    from a newer job to an older one: dependencies alone are acyclic by construction.

    Containers add the other direction: a container waits for its children, which are
    newer than it. So "Y depends on container C" plus "a child of C depends on Y" waited
    for itself, and so did longer loops through other jobs and nested containers, in
    one enqueue or in one batch. Those jobs could never start and ``run_worker(
    until_idle=True)`` never returned. Regression: such a child is now refused with
    DependencyCycle, naming the loop.
    """

    @queue.handler("work")
    def work(job: readyq.Job) -> None:
        return None

    c = queue.enqueue_container("box")
    y = queue.enqueue("work", depends_on=[c])
    nxt = y + 100
    before = snapshot(queue)
    with pytest.raises(readyq.DependencyNotFound):
        queue.enqueue("work", depends_on=[nxt])  # a guess of a future id
    with pytest.raises(readyq.DependencyCycle, match=r"waits for"):
        queue.enqueue("work", parent=c, depends_on=[y])  # C -> child -> Y -> C
    z = queue.enqueue("work", depends_on=[y])
    inner = queue.enqueue_container("inner", parent=c)
    before = snapshot(queue)
    with pytest.raises(readyq.DependencyCycle):
        queue.enqueue("work", parent=inner, depends_on=[z])  # C -> inner -> x -> Z -> Y -> C
    with pytest.raises(readyq.DependencyCycle):
        queue.enqueue_container("box", parent=inner, depends_on=[z])
    with pytest.raises(readyq.DependencyCycle):
        queue.enqueue_many([JobSpec("work", parent=c, depends_on=[z])])
    with pytest.raises(readyq.DependencyCycle):  # the same loop inside one batch
        queue.enqueue_many([
            JobSpec("box", key="b", container=True),
            JobSpec("work", key="y", depends_on=["b"]),
            JobSpec("work", parent="b", depends_on=["y"]),
        ])
    with pytest.raises(readyq.DependencyCycle):  # a dependency on its own container
        queue.enqueue("work", parent=inner, depends_on=[c])
    assert snapshot(queue) == before

    # Legitimate shapes are still accepted, and everything runs to the end.
    a = queue.enqueue("work")
    queue.enqueue("work", parent=inner, depends_on=[a])
    queue.enqueue("work", parent=c)
    queue.enqueue_many([
        JobSpec("box", key="b", container=True),
        JobSpec("work", key="first", parent="b"),
        JobSpec("work", parent="b", depends_on=["first"]),
        JobSpec("work", depends_on=["b"]),
    ])
    run_bounded(queue)
    counts = queue.counts()
    assert set(counts) == {"done"}, counts


def test_waiting_on_a_sibling_is_not_mistaken_for_a_cycle(queue: readyq.Queue) -> None:
    """No false alarm: Y waits for a child of C, not for C, so another child of C may
    depend on Y (C -> k2 -> Y -> k1, and k1 waits for nothing)."""
    order: list[int] = []

    @queue.handler("work")
    def work(job: readyq.Job) -> None:
        order.append(job.id)

    c = queue.enqueue_container("box")
    k1 = queue.enqueue("work", parent=c)
    y = queue.enqueue("work", depends_on=[k1])
    k2 = queue.enqueue("work", parent=c, depends_on=[y])
    after = queue.enqueue("work", depends_on=[c])
    run_bounded(queue)
    assert order == [k1, y, k2, after]
    assert queue.get(c).state is JobState.DONE
