"""Job.spawn: jobs added by a running job, inserted with its done or never."""

from __future__ import annotations

import asyncio
import threading

import pytest
import sqlalchemy as sa

import readyq
from async_support import async_engine
from readyq import JobSpec, JobState
from readyq.claim_order import ClaimOrder, StartPolicy
from readyq.store import Outcome, OutcomeKind, Recorded
from readyq_test_support import run_until_idle


def _count(queue: readyq.Queue) -> int:
    t = queue.store.tables
    with queue.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(t.jobs)).scalar_one())


def _by(queue: readyq.Queue, spawner: int) -> list[int]:
    t = queue.store.tables
    with queue.engine.connect() as conn:
        return [int(x) for x in conn.execute(
            sa.select(t.jobs.c.id).where(t.jobs.c.spawned_by == spawner).order_by(t.jobs.c.id)
        ).scalars()]


def test_joined_dependent_runs_after_every_spawned_job(queue: readyq.Queue) -> None:
    order: list[str] = []
    lock = threading.Lock()

    @queue.handler("split")
    def split(job: readyq.Job) -> int:
        job.spawn([JobSpec("part", {"p": p}, key=f"p{p}") for p in range(3)]
                  + [JobSpec("merge", {}, depends_on=["p0", "p1", "p2"])])
        with lock:
            order.append("split")
        return 3

    @queue.handler("part")
    def part(job: readyq.Job) -> None:
        with lock:
            order.append(f"part{job.args['p']}")

    @queue.handler("merge")
    def merge(job: readyq.Job) -> None:
        with lock:
            order.append("merge")

    @queue.handler("report")
    def report(job: readyq.Job) -> None:
        with lock:
            order.append("report")

    spawner = queue.enqueue("split", {})
    after = queue.enqueue("report", {}, depends_on=[spawner])
    run_until_idle(queue)
    kids = _by(queue, spawner)
    assert len(kids) == 4
    assert all(queue.get(k).state is JobState.DONE for k in kids)
    assert queue.get(kids[0]).spawned_by == spawner
    assert set(queue.get(after).depends_on) == {spawner, *kids}
    assert queue.get(after).state is JobState.DONE
    assert order[0] == "split" and order[-1] == "report"
    assert order.index("merge") > max(order.index(f"part{p}") for p in range(3))


def test_dependent_waits_while_spawned_jobs_run_and_fails_with_them(
    queue: readyq.Queue,
) -> None:
    @queue.handler("split")
    def split(job: readyq.Job) -> None:
        job.spawn([JobSpec("bad", {})])

    @queue.handler("bad", max_attempts=1)
    def bad(job: readyq.Job) -> None:
        raise RuntimeError("no")

    @queue.handler("report")
    def report(job: readyq.Job) -> None:
        return None

    spawner = queue.enqueue("split", {})
    after = queue.enqueue("report", {}, depends_on=[spawner])
    run_until_idle(queue, types=["split"])
    assert queue.get(spawner).state is JobState.DONE
    # The spawner is done, but the dependent still waits for what it spawned.
    assert queue.get(after).state is JobState.WAITING
    run_until_idle(queue)
    (kid,) = _by(queue, spawner)
    assert queue.get(kid).state is JobState.FAILED
    info = queue.get(after)
    assert info.state is JobState.UPSTREAM_FAILED and str(kid) in (info.error or "")


def test_join_false_releases_the_dependent_at_the_spawners_end(queue: readyq.Queue) -> None:
    @queue.handler("split")
    def split(job: readyq.Job) -> None:
        job.spawn([JobSpec("slow", {})], join=False)

    @queue.handler("slow")
    def slow(job: readyq.Job) -> None:
        return None

    @queue.handler("report")
    def report(job: readyq.Job) -> None:
        return None

    spawner = queue.enqueue("split", {})
    after = queue.enqueue("report", {}, depends_on=[spawner])
    run_until_idle(queue, types=["split", "report"])
    assert queue.get(after).state is JobState.DONE
    (kid,) = _by(queue, spawner)
    assert queue.get(kid).state is JobState.READY
    assert queue.get(after).depends_on == (spawner,)


def test_spawned_jobs_join_the_spawners_container_which_ends_after_them(
    queue: readyq.Queue,
) -> None:
    @queue.handler("split")
    def split(job: readyq.Job) -> None:
        job.spawn([JobSpec("part", {}), JobSpec("part", {})])

    @queue.handler("part")
    def part(job: readyq.Job) -> None:
        return None

    box = queue.enqueue_container("box")
    spawner = queue.enqueue("split", {}, parent=box)
    run_until_idle(queue, types=["split"])
    kids = _by(queue, spawner)
    assert [queue.get(k).parent_id for k in kids] == [box, box]
    assert queue.get(box).state is JobState.ACTIVE
    run_until_idle(queue)
    assert queue.get(box).state is JobState.DONE


def test_parent_names_another_container(queue: readyq.Queue) -> None:
    other = queue.enqueue_container("box")

    @queue.handler("split")
    def split(job: readyq.Job) -> None:
        job.spawn([JobSpec("part", {})], join=False, parent=other)

    @queue.handler("part")
    def part(job: readyq.Job) -> None:
        return None

    box = queue.enqueue_container("box")
    spawner = queue.enqueue("split", {}, parent=box)
    run_until_idle(queue)
    (kid,) = _by(queue, spawner)
    assert queue.get(kid).parent_id == other
    assert queue.get(box).state is JobState.DONE
    assert queue.get(other).state is JobState.DONE


@pytest.mark.parametrize(
    ("specs", "error"),
    [
        ([JobSpec("part", {}, key="x", depends_on=["y"]),
          JobSpec("part", {}, key="y", depends_on=["x"])], readyq.DependencyCycle),
        ([JobSpec("part", {}, depends_on=["nowhere"])], readyq.DependencyNotFound),
        ([JobSpec("part", {}, key="a"), JobSpec("part", {}, key="a")], readyq.InvalidJobOption),
        ([JobSpec("part", {"x": object()})], readyq.PayloadNotJSON),
        ([JobSpec("part", {}, uses={"gpu": 1})], readyq.UnknownResource),
        ([JobSpec("part", {}, unique_key="k"), JobSpec("part", {}, unique_key="k")],
         readyq.InvalidUniqueKey),
    ],
)
def test_bad_specs_raise_in_the_handler_and_write_nothing(
    queue: readyq.Queue, specs: list[JobSpec], error: type[Exception]
) -> None:
    seen: list[BaseException] = []

    @queue.handler("split", max_attempts=1)
    def split(job: readyq.Job) -> None:
        try:
            job.spawn(specs)
        except readyq.ReadyqError as exc:
            seen.append(exc)
            raise

    @queue.handler("part")
    def part(job: readyq.Job) -> None:
        return None

    spawner = queue.enqueue("split", {})
    run_until_idle(queue)
    assert len(seen) == 1 and isinstance(seen[0], error)
    assert queue.get(spawner).state is JobState.FAILED
    assert _count(queue) == 1


def test_a_failed_attempt_spawns_nothing_and_its_retry_spawns_once(
    queue: readyq.Queue,
) -> None:
    @queue.handler("split", max_attempts=3, retry_backoff=0.0)
    def split(job: readyq.Job) -> None:
        job.spawn([JobSpec("part", {"attempt": job.attempt})])
        if job.attempt < 3:
            raise RuntimeError("again")

    @queue.handler("part")
    def part(job: readyq.Job) -> None:
        return None

    spawner = queue.enqueue("split", {})
    run_until_idle(queue, types=["split"])
    assert queue.get(spawner).state is JobState.DONE
    (kid,) = _by(queue, spawner)
    assert queue.get(kid).args == {"attempt": 3}
    assert _count(queue) == 2


def test_a_fenced_out_done_spawns_nothing(queue: readyq.Queue) -> None:
    queue.handler("split")(lambda job: None)
    queue.handler("part")(lambda job: None)
    spawner = queue.enqueue("split", {})
    store = queue.store
    (stale,) = store.claim_jobs(ClaimOrder(
        owner="w1", cap=5, limit=5, lease_ttl=5.0, types=["split"],
    ))
    store.start_jobs("w1", [(stale, StartPolicy(None))])
    spawn = queue.spawn_of([JobSpec("part", {})])
    store.clock_offset = 60.0
    store.reclaim_expired()
    store.clock_offset = 3600.0  # past the retry's backoff
    (fresh,) = store.claim_jobs(ClaimOrder(
        owner="w2", cap=5, limit=5, lease_ttl=30.0, types=["split"],
    ))
    assert fresh.lease_token != stale.lease_token
    applied = store.record_outcomes(
        "w1", [Outcome(stale, OutcomeKind.DONE, "null", spawns=(spawn,))]
    )
    assert applied[stale.id, stale.lease_token] is Recorded.FENCED
    assert _count(queue) == 1
    store.start_jobs("w2", [(fresh, StartPolicy(None))])
    applied = store.record_outcomes(
        "w2", [Outcome(fresh, OutcomeKind.DONE, "null", spawns=(spawn,))]
    )
    assert applied[fresh.id, fresh.lease_token] is Recorded.RECORDED
    assert len(_by(queue, spawner)) == 1


def test_a_spawn_refused_at_the_end_fails_the_spawner_and_writes_nothing(
    queue: readyq.Queue,
) -> None:
    box = queue.enqueue_container("box")
    spawner = queue.enqueue("split", {})
    after = queue.enqueue("report", {}, depends_on=[spawner])
    store = queue.store
    (c,) = store.claim_jobs(ClaimOrder(owner="w", cap=5, limit=5, lease_ttl=30.0, types=["split"]))
    store.start_jobs("w", [(c, StartPolicy(None))])
    spawn = queue.spawn_of([JobSpec("part", {})], parent=box)
    queue.close_container(box)  # ended since the handler staged its spawn
    store.record_outcomes("w", [Outcome(c, OutcomeKind.DONE, "null", spawns=(spawn,))])
    info = queue.get(spawner)
    assert info.state is JobState.FAILED and "refused" in (info.error or "")
    assert queue.get(after).state is JobState.UPSTREAM_FAILED
    assert _by(queue, spawner) == []


def test_async_handlers_spawn(queue: readyq.Queue, db: str) -> None:
    async def main() -> tuple[int, int]:
        engine = async_engine(db)
        try:
            q = readyq.AsyncQueue(engine)
            @q.handler("split")
            async def split(job: readyq.Job) -> None:
                job.spawn([JobSpec("part", {})])

            @q.handler("part")
            async def part(job: readyq.Job) -> None:
                return None

            spawner = await q.enqueue("split", {})
            after = await q.enqueue("part", {}, depends_on=[spawner])
            await q.run_worker(until_idle=True, poll_interval=0.02)
            return spawner, after
        finally:
            await engine.dispose()

    spawner, after = asyncio.run(main())
    kids = _by(queue, spawner)
    assert len(kids) == 1 and queue.get(kids[0]).state is JobState.DONE
    assert kids[0] in queue.get(after).depends_on
    assert queue.get(after).state is JobState.DONE
