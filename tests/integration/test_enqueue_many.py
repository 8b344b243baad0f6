"""Bulk enqueue of a whole DAG in one transaction."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

import readyq
from readyq import JobSpec, JobState
from readyq_test_support import run_until_idle


def _rows(queue: readyq.Queue) -> tuple[int, int]:
    t = queue.store.tables
    with queue.engine.connect() as conn:
        jobs = conn.execute(sa.select(sa.func.count()).select_from(t.jobs)).scalar_one()
        deps = conn.execute(sa.select(sa.func.count()).select_from(t.deps)).scalar_one()
    return jobs, deps


def test_a_dag_with_forward_references_runs_in_dependency_order(queue: readyq.Queue) -> None:
    order: list[str] = []
    lock = threading.Lock()

    @queue.handler("step")
    def step(job: readyq.Job) -> str:
        with lock:
            order.append(job.args)
        return job.args

    existing = queue.enqueue("step", "seed")
    ids = queue.enqueue_many(
        [
            JobSpec("step", "report", depends_on=["batch", existing]),
            JobSpec("batch", container=True, key="batch", depends_on=["fetch"]),
            JobSpec("step", "t1", parent="batch", key="t1"),
            JobSpec("step", "t2", parent="batch", depends_on=["t1"]),
            JobSpec("step", "fetch", key="fetch"),
        ]
    )
    assert len(ids) == 5 and len(set(ids)) == 5
    assert queue.get(ids[0]).state is JobState.WAITING
    assert queue.get(ids[1]).state is JobState.ACTIVE
    assert set(queue.get(ids[0]).depends_on) == {existing, ids[1]}
    # The container's dependency holds for its children.
    assert ids[4] in queue.get(ids[2]).depends_on
    run_until_idle(queue)
    assert [queue.get(i).state for i in ids] == [JobState.DONE] * 5
    assert order.index("fetch") < order.index("t1") < order.index("t2") < order.index("report")
    assert order.index("seed") < order.index("report")


@pytest.mark.parametrize(
    ("specs", "error"),
    [
        ([JobSpec("a", key="x", depends_on=["y"]), JobSpec("a", key="y", depends_on=["x"])],
         readyq.DependencyCycle),
        ([JobSpec("a", key="x", depends_on=["x"])], readyq.DependencyCycle),
        ([JobSpec("c", key="c", container=True), JobSpec("a", parent="c", depends_on=["c"])],
         readyq.DependencyCycle),
        ([JobSpec("a", depends_on=["nope"])], readyq.DependencyNotFound),
        ([JobSpec("a", key="k"), JobSpec("a", key="k")], readyq.InvalidJobOption),
        ([JobSpec("a", key="p"), JobSpec("a", parent="p")], readyq.InvalidParent),
        ([JobSpec("a"), JobSpec("a", depends_on=[999_999])], readyq.DependencyNotFound),
        ([JobSpec("a"), JobSpec("a", {"x": float("nan")})], readyq.PayloadNotJSON),
        ([JobSpec("a"), JobSpec("a", weight=0)], readyq.InvalidWeight),
        # Options equal to ones already checked in the batch, but of the wrong type.
        ([JobSpec("a", weight=1), JobSpec("a", weight=True)], readyq.InvalidWeight),
        ([JobSpec("a", priority=1), JobSpec("a", priority=True)], readyq.InvalidJobOption),
        ([JobSpec("a", max_attempts=2), JobSpec("a", max_attempts=2.0)],  # type: ignore[arg-type]
         readyq.InvalidJobOption),
        ([JobSpec("a", timeout=5), JobSpec("a", timeout=[5])],  # type: ignore[arg-type]
         readyq.InvalidJobOption),
        ([JobSpec("a", depends_on=None)], readyq.InvalidJobOption),  # type: ignore[arg-type]
        ([JobSpec("a", depends_on=3.5)], readyq.InvalidJobOption),  # type: ignore[arg-type]
    ],
)
def test_a_bad_batch_raises_its_error_and_writes_nothing(
    queue: readyq.Queue, specs: list[JobSpec], error: type[Exception]
) -> None:
    queue.enqueue("a", {})
    before = _rows(queue)
    with pytest.raises(error):
        queue.enqueue_many(specs)
    assert _rows(queue) == before


def test_a_batch_in_a_rolled_back_transaction_never_exists(queue: readyq.Queue) -> None:
    with queue.engine.connect() as conn:
        conn.begin()
        ids = queue.enqueue_many(
            [JobSpec("a", key="x"), JobSpec("a", depends_on=["x"])], connection=conn
        )
        conn.rollback()
    with pytest.raises(readyq.JobNotFound):
        queue.get(ids[0])
    assert _rows(queue) == (0, 0)


def test_a_batch_depending_on_a_failed_job_is_born_upstream_failed(queue: readyq.Queue) -> None:
    @queue.handler("boom", max_attempts=1)
    def boom(job: readyq.Job) -> None:
        raise RuntimeError("no")

    failed = queue.enqueue("boom")
    run_until_idle(queue)
    ids = queue.enqueue_many(
        [
            JobSpec("c", container=True, key="c"),
            JobSpec("boom", key="x", depends_on=[failed], parent="c"),
            JobSpec("boom", depends_on=["x"]),
        ]
    )
    assert [queue.get(i).state for i in ids] == [
        JobState.FAILED,
        JobState.UPSTREAM_FAILED,
        JobState.UPSTREAM_FAILED,
    ]


def test_a_large_batch_keeps_ids_in_the_given_order(queue: readyq.Queue) -> None:
    specs = [
        JobSpec("a", {"i": i}, key=f"k{i}", depends_on=[f"k{i + 1}"] if (i + 1) % 7 else [])
        for i in range(700)
    ]
    ids = queue.enqueue_many(specs)
    assert [queue.get(i).args for i in ids[:3]] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert queue.get(ids[1]).depends_on == (ids[2],)
    assert queue.get(ids[6]).state is JobState.READY
    assert queue.get(ids[5]).state is JobState.WAITING
    assert _rows(queue) == (700, 600)


def test_a_large_batch_referring_backwards_gets_ascending_ids_and_its_edges(
    queue: readyq.Queue,
) -> None:
    first = queue.enqueue("a", {"seed": True})
    specs = [
        JobSpec(
            "a", {"i": i}, key=f"k{i}",
            # an iterator, keys and an existing job's id mixed
            depends_on=iter([f"k{i - 1}", first]) if i % 10 else [first] if i % 20 else [],
        )
        for i in range(300)
    ]
    ids = queue.enqueue_many(specs)
    assert ids == sorted(ids) and len(set(ids)) == 300 and ids[0] > first
    assert queue.get(ids[0]).state is JobState.READY
    assert queue.get(ids[10]).depends_on == (first,)
    assert queue.get(ids[10]).state is JobState.WAITING
    assert set(queue.get(ids[11]).depends_on) == {ids[10], first}
    assert [queue.get(i).args for i in ids[:2]] == [{"i": 0}, {"i": 1}]
    # 270 jobs with a key and the seed, 15 with the seed alone
    assert _rows(queue) == (301, 270 * 2 + 15)


TRICKY = ["tab\there", "line\nbreak", "cr\r\nlf", "back\\slash", "\\N", "\\.", "\\\\t",
          "é ünïcode ✓", "quote ' and \"", "", "null"]


def test_a_large_batch_stores_every_value_as_given(queue: readyq.Queue) -> None:
    """Large batches take each database's bulk path (PostgreSQL: COPY): text with the
    characters that path escapes, absent and present options, all read back unchanged."""
    specs = [
        JobSpec(
            "a",
            {"text": TRICKY[i % len(TRICKY)], "i": i, "nested": [TRICKY[(i + 1) % len(TRICKY)]]},
            group=f"g\t{i % 3}\\x" if i % 2 else "plain",
            priority=i % 5 - 2,
            weight=1 + i % 3,
            max_attempts=1 + i % 4,
            timeout=None if i % 3 else 1.5 + i,
            run_after=None if i % 4 else 3600.0 + i,
        )
        for i in range(80)
    ]
    ids = queue.enqueue_many(specs)
    t = queue.store.tables.jobs
    with queue.engine.connect() as conn:
        rows = {r.id: r for r in conn.execute(sa.select(t).where(t.c.id.in_(ids)))}
    for i, (job_id, spec) in enumerate(zip(ids, specs, strict=True)):
        info, row = queue.get(job_id), rows[job_id]
        assert info.args == spec.args
        assert (info.group, info.priority, info.max_attempts) == (
            spec.group, spec.priority, spec.max_attempts)
        assert row.weight == spec.weight and row.timeout == spec.timeout
        assert row.created_at == row.updated_at and row.finished_at is None
        assert (row.attempts, row.lease_token, row.pending_deps) == (0, 0, 0)
        if spec.run_after is None:
            assert row.run_after is None and info.state is JobState.READY, i
        else:
            assert row.run_after == pytest.approx(row.created_at + spec.run_after, abs=1e-6)


def test_wait_returns_the_finished_job_or_times_out(queue: readyq.Queue) -> None:
    @queue.handler("step")
    def step(job: readyq.Job) -> int:
        return 7

    job_id = queue.enqueue("step")
    with pytest.raises(TimeoutError, match="still ready"):
        queue.wait(job_id, timeout=0.05)
    worker = queue.worker(concurrency=1, poll_interval=0.02)
    thread = threading.Thread(target=worker.run, kwargs={"until_idle": True})
    thread.start()
    info = queue.wait(job_id, timeout=30)
    thread.join(30)
    assert (info.state, info.result) == (JobState.DONE, 7)
    with pytest.raises(readyq.JobNotFound):
        queue.wait(10**9, timeout=1)
