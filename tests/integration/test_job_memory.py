"""What a job's attempts keep: durable steps, saved state, progress, upstream results,
``job.stopping`` and ``retry(fresh=True)``; on every database."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from readyq import JobSpec, JobState, admin
from readyq.claim_order import ClaimOrder
from readyq.store import memory
from readyq_test_support import run_until_idle


def _steps(queue: readyq.Queue, job_id: int) -> dict[str, str]:
    s = queue.store.tables.steps
    with queue.engine.connect() as conn:
        return {r.name: r.result for r in conn.execute(
            sa.select(s.c.name, s.c.result).where(s.c.job_id == job_id))}


def _checkpoint(queue: readyq.Queue, job_id: int) -> Any:
    c = queue.store.tables.checkpoints
    with queue.engine.connect() as conn:
        return conn.execute(sa.select(c).where(c.c.job_id == job_id)).first()


def test_a_stored_step_is_not_run_again_by_a_later_attempt(queue: readyq.Queue) -> None:
    calls: list[str] = []

    def listing(bucket: str) -> list[str]:
        calls.append(bucket)
        return ["a", "b", "c"]

    @queue.handler("ingest", max_attempts=3)
    def ingest(job: readyq.Job) -> dict[str, int]:
        files = job.step("list", listing, job.args["bucket"])
        if job.attempt == 1:
            raise RuntimeError("crash after the step")
        return {"files": len(files)}

    jid = queue.enqueue("ingest", {"bucket": "b1"})
    # Attempt 1 fails after the step; the retry waits its backoff on the database clock.
    run_until_idle(queue)
    queue.store.clock_offset += 10.0
    run_until_idle(queue)
    info = queue.get(jid)
    assert info.state is JobState.DONE and info.result == {"files": 3}
    assert info.attempts == 2
    assert calls == ["b1"]
    assert _steps(queue, jid) == {"list": '["a","b","c"]'}


def test_a_step_that_raises_stores_nothing_and_runs_again(queue: readyq.Queue) -> None:
    calls: list[int] = []

    def flaky() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("first call fails")
        return 7

    @queue.handler("s", max_attempts=2)
    def s(job: readyq.Job) -> int:
        return int(job.step("flaky", flaky))

    jid = queue.enqueue("s", {})
    run_until_idle(queue)
    queue.store.clock_offset += 10.0
    run_until_idle(queue)
    assert queue.get(jid).result == 7 and len(calls) == 2
    assert _steps(queue, jid) == {"flaky": "7"}


def test_bad_step_names_results_and_repeats_raise_and_store_nothing(queue: readyq.Queue) -> None:
    seen: dict[str, str] = {}

    @queue.handler("bad", max_attempts=1)
    def bad(job: readyq.Job) -> None:
        for label, call in [
            ("empty", lambda: job.step("", lambda: 1)),
            ("long", lambda: job.step("x" * 201, lambda: 1)),
            ("not text", lambda: job.step(5, lambda: 1)),  # type: ignore[arg-type]
            ("not json", lambda: job.step("obj", lambda: object())),
            ("surrogate", lambda: job.step("sur", lambda: "\ud800")),
        ]:
            try:
                call()
            except readyq.ReadyqError as exc:
                seen[label] = type(exc).__name__
        job.step("once", lambda: 1)
        try:
            job.step("once", lambda: 2)
        except readyq.InvalidStep:
            seen["twice"] = "InvalidStep"

    jid = queue.enqueue("bad", {})
    run_until_idle(queue)
    assert queue.get(jid).state is JobState.DONE
    assert seen == {"empty": "InvalidStep", "long": "InvalidStep", "not text": "InvalidStep",
                    "not json": "InvalidJobResult", "surrogate": "InvalidJobResult",
                    "twice": "InvalidStep"}
    assert _steps(queue, jid) == {"once": "1"}


def test_saved_state_is_what_the_next_attempt_reads(queue: readyq.Queue) -> None:
    seen: list[Any] = []

    @queue.handler("loop", max_attempts=3)
    def loop(job: readyq.Job) -> int:
        start = job.state or 0
        seen.append(start)
        for i in range(start, 10):
            job.save_state(i + 1)
            if job.attempt == 1 and i == 5:
                raise RuntimeError("crash at 6")
        return int(job.state)

    jid = queue.enqueue("loop", {})
    run_until_idle(queue)
    queue.store.clock_offset += 10.0
    run_until_idle(queue)
    assert seen == [0, 6]
    assert queue.get(jid).result == 10
    row = _checkpoint(queue, jid)
    assert row.state == "10" and row.state_attempt == 2


def test_bad_state_raises_and_stores_nothing(queue: readyq.Queue, tmp_path: Path) -> None:
    seen: list[str] = []
    other = sa.create_engine(f"sqlite:///{tmp_path / 'other.db'}")

    @queue.handler("st", max_attempts=1)
    def st(job: readyq.Job) -> None:
        for value in (object(), {"x": float("nan")}, "y" * 5000):
            try:
                job.save_state(value)
            except readyq.InvalidState as exc:
                seen.append(str(exc))
        with other.begin() as conn:
            try:
                job.save_state(1, connection=conn)
            except readyq.InvalidState as exc:
                seen.append(str(exc))

    small = readyq.Queue(queue.store.engine, max_payload_bytes=1000)
    small.handler("st", max_attempts=1)(st)
    jid = small.enqueue("st", {})
    run_until_idle(small)
    other.dispose()
    assert small.get(jid).state is JobState.DONE
    assert len(seen) == 4, seen
    assert "not JSON" in seen[0] and "over the limit" in seen[2] and "another database" in seen[3]
    assert _checkpoint(queue, jid) is None


def test_state_saved_in_the_callers_transaction_commits_or_rolls_back_with_it(
    queue: readyq.Queue,
) -> None:
    @queue.handler("tx", max_attempts=1)
    def tx(job: readyq.Job) -> None:
        with queue.engine.connect() as conn:
            with conn.begin() as t:
                job.save_state("rolled back", connection=conn)
                job.step("in-tx", lambda: 1, connection=conn)
                t.rollback()
            with conn.begin():
                job.save_state("committed", connection=conn)

    jid = queue.enqueue("tx", {})
    run_until_idle(queue)
    assert queue.get(jid).state is JobState.DONE
    assert _checkpoint(queue, jid).state == '"committed"'
    assert _steps(queue, jid) == {}


def test_an_attempt_that_lost_its_lease_cannot_overwrite_a_newer_one(
    queue: readyq.Queue,
) -> None:
    store = queue.store
    jid = queue.enqueue("z", {}, max_attempts=3)
    (a,) = store.claim_jobs(ClaimOrder(owner="A", cap=5, limit=1, lease_ttl=30.0, types=["z"]))
    old = memory.Holder(jid, a.attempt, "A", a.lease_token, 30.0)
    store.save_state(old, '"from A"')
    store.clock_offset += 100.0  # A's lease runs out; the sweep takes it
    store.reclaim_expired()
    store.clock_offset += 100.0  # past the retry's backoff
    (b,) = store.claim_jobs(ClaimOrder(owner="B", cap=5, limit=1, lease_ttl=30.0, types=["z"]))
    new = memory.Holder(jid, b.attempt, "B", b.lease_token, 30.0)
    store.save_state(new, '"from B"')
    for write in (
        lambda: store.save_state(old, '"zombie"'),
        lambda: store.store_step(old, "s", "1"),
        lambda: store.save_progress(old, memory.Progress(1.0, None, None)),
    ):
        with pytest.raises(readyq.LeaseLost):
            write()
    row = _checkpoint(queue, jid)
    assert row.state == '"from B"' and row.state_attempt == b.attempt
    assert row.progress_current is None
    assert _steps(queue, jid) == {}


def test_progress_is_throttled_and_its_last_value_written_by_the_end(
    queue: readyq.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[float] = []
    real = queue.store.save_progress

    def counting(holder: memory.Holder, p: memory.Progress) -> None:
        writes.append(p.current)
        real(holder, p)

    monkeypatch.setattr(queue.store, "save_progress", counting)
    calls = 0

    @queue.handler("p", max_attempts=1)
    def p(job: readyq.Job) -> None:
        nonlocal calls
        end = time.monotonic() + 1.5
        i = 0
        while time.monotonic() < end:
            i += 1
            job.progress(i, None, f"item {i}")
        job.progress(i + 1, i + 1, "done \x00 here")
        calls = i + 1

    jid = queue.enqueue("p", {})
    run_until_idle(queue)
    assert calls > 1000
    # One write at the first call, at most one a second after, and the last at the end.
    assert 2 <= len(writes) <= 4, writes
    row = _checkpoint(queue, jid)
    assert row.progress_current == calls and row.progress_total == calls
    assert row.progress_message == "done \ufffd here"
    progress = queue.get(jid).progress
    assert progress is not None and progress.current == calls and progress.fraction == 1.0


def test_bad_progress_raises(queue: readyq.Queue) -> None:
    seen: list[str] = []

    @queue.handler("bp", max_attempts=1)
    def bp(job: readyq.Job) -> None:
        for args in ((float("inf"),), ("3",), (True,), (1, 0), (1, -2), (1, 2, 3)):
            try:
                job.progress(*args)
            except readyq.InvalidProgress:
                seen.append(repr(args))

    jid = queue.enqueue("bp", {})
    run_until_idle(queue)
    assert queue.get(jid).state is JobState.DONE
    assert len(seen) == 6
    assert _checkpoint(queue, jid) is None


def test_upstream_results_by_id_by_key_inherited_and_with_children(queue: readyq.Queue) -> None:
    got: dict[str, Any] = {}

    @queue.handler("leaf")
    def leaf(job: readyq.Job) -> Any:
        return job.args["v"]

    @queue.handler("report")
    def report(job: readyq.Job) -> None:
        got[job.args["name"]] = {
            "id": job.upstream_results(),
            "key": job.upstream_results(by="key"),
            "kids": job.upstream_results(by="key", include_children=True),
        }

    ids = queue.enqueue_many([
        JobSpec("leaf", {"v": 1}, key="a"),
        JobSpec("leaf", {"v": [2]}, key="b"),
        JobSpec("report", {"name": "r"}, depends_on=["a", "b"]),
        JobSpec("box", container=True, key="box", depends_on=["a"]),
        JobSpec("leaf", {"v": 3}, key="inner", parent="box"),
        # Inherits the box's dependency on "a".
        JobSpec("report", {"name": "child"}, parent="box", depends_on=["inner"]),
    ])
    lone = queue.enqueue("leaf", {"v": "no key"})
    after_box = queue.enqueue("report", {"name": "after"}, depends_on=[ids[3], lone])
    run_until_idle(queue)
    assert queue.get(after_box).state is JobState.DONE
    a, b, inner, child = ids[0], ids[1], ids[4], ids[5]
    assert got["r"]["id"] == {a: 1, b: [2]}
    assert got["r"]["key"] == {"a": 1, "b": [2]}
    assert got["child"]["id"] == {a: 1, inner: 3}
    assert got["child"]["key"] == {"a": 1, "inner": 3}
    assert got["after"]["key"] == {"box": None, lone: "no key"}
    assert got["after"]["kids"] == {"box": None, lone: "no key", "inner": 3, child: None}


def test_memory_outside_an_attempt_raises_not_in_a_job(queue: readyq.Queue) -> None:
    kept: list[readyq.Job] = []

    @queue.handler("k", max_attempts=1)
    def k(job: readyq.Job) -> None:
        job.progress(1)
        kept.append(job)

    queue.enqueue("k", {})
    run_until_idle(queue)
    with pytest.raises(readyq.NotInAJob):
        kept[0].save_state(1)
    with pytest.raises(readyq.NotInAJob):
        kept[0].step("late", lambda: 1)


def test_stopping_lets_a_job_save_and_return_within_the_grace(queue: readyq.Queue) -> None:
    started = threading.Event()

    @queue.handler("long", max_attempts=2)
    def long(job: readyq.Job) -> str:
        i = job.state or 0
        started.set()
        while not job.stopping:
            i += 1
            time.sleep(0.01)
        job.save_state(i)
        raise RuntimeError("stopping: come back later")

    jid = queue.enqueue("long", {})
    worker = queue.worker(concurrency=2, poll_interval=0.02, lease_ttl=10.0,
                          heartbeat_interval=2.0)
    t = threading.Thread(target=worker.run, kwargs={"handle_signals": False})
    t.start()
    assert started.wait(10)
    time.sleep(0.1)
    worker.stop(grace=5.0)
    t.join(10)
    assert not t.is_alive()
    assert int(_checkpoint(queue, jid).state) > 0


def test_retry_keeps_what_attempts_kept_unless_fresh(queue: readyq.Queue) -> None:
    @queue.handler("f", max_attempts=1)
    def f(job: readyq.Job) -> None:
        job.step("s", lambda: 1)
        job.save_state("half")
        raise RuntimeError("fails")

    jid = queue.enqueue("f", {})
    run_until_idle(queue)
    assert queue.get(jid).state is JobState.FAILED
    admin.retry(queue, jid)
    assert _steps(queue, jid) == {"s": "1"} and _checkpoint(queue, jid).state == '"half"'
    run_until_idle(queue)
    admin.retry(queue, jid, fresh=True)
    assert _steps(queue, jid) == {} and _checkpoint(queue, jid) is None
    with pytest.raises(readyq.InvalidArgument):
        admin.retry(queue, jid, fresh="yes")  # type: ignore[arg-type]


def test_prune_deletes_the_memory_with_its_job(queue: readyq.Queue) -> None:
    @queue.handler("m")
    def m(job: readyq.Job) -> None:
        job.step("s", lambda: 1)
        job.save_state(2)

    jid = queue.enqueue("m", {})
    run_until_idle(queue)
    queue.store.clock_offset += 10_000.0
    admin.prune(queue, older_than=60)
    assert _steps(queue, jid) == {} and _checkpoint(queue, jid) is None


@pytest.mark.parametrize("size", [1, 2, 60])
def test_a_batch_key_is_kept_whatever_the_batch_size(queue: readyq.Queue, size: int) -> None:
    # 60 rows take PostgreSQL's bulk path (COPY), 2 its multi-row INSERT, 1 a single one.
    ids = queue.enqueue_many([JobSpec("k", {}, key=f"k{i}") for i in range(size)])
    assert [queue.get(i).key for i in ids] == [f"k{i}" for i in range(size)]
    assert queue.get(queue.enqueue("k", {})).key is None
