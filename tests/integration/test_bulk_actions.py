"""``admin.retry_many``, ``admin.cancel_many`` and ``admin.prune(dry_run=True)``: each
changes exactly what its filter matches and says how many jobs it changed; a dry run
reports the same counts and changes nothing; bad filters are refused before anything
is written. On every database."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from readyq import InvalidFilter, JobFilter, JobState, admin

OPTIONS: dict[str, Any] = {
    "concurrency": 4, "poll_interval": 0.02, "lease_ttl": 10.0, "heartbeat_interval": 2.0,
}


def snapshot(queue: readyq.Queue) -> list[tuple[Any, ...]]:
    """Every row of the jobs table, for 'nothing changed' checks."""
    j = queue.store.tables.jobs
    with queue.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.select(j).order_by(j.c.id))]


@pytest.fixture
def failures(queue: readyq.Queue) -> dict[str, Any]:
    broken = {"on": True}

    @queue.handler("flaky", max_attempts=1)
    def flaky(job: readyq.Job) -> str:
        if broken["on"]:
            raise RuntimeError("down")
        return "ok"

    @queue.handler("other", max_attempts=1)
    def other(job: readyq.Job) -> None:
        raise RuntimeError("always")

    @queue.handler("step")
    def step(job: readyq.Job) -> str:
        return "done"

    f1 = queue.enqueue("flaky", group="g1")
    f2 = queue.enqueue("flaky", group="g2")
    dep = queue.enqueue("step", depends_on=[f1])  # upstream_failed because of f1
    o = queue.enqueue("other")
    ok = queue.enqueue("step")
    queue.run_worker(until_idle=True, **OPTIONS)
    return {"f1": f1, "f2": f2, "dep": dep, "o": o, "ok": ok, "broken": broken}


def test_retry_many_revives_what_matches_and_counts_its_dependents(
    queue: readyq.Queue, failures: dict[str, Any]
) -> None:
    f = failures
    before = snapshot(queue)
    preview = admin.retry_many(queue, type="flaky", dry_run=True)
    assert snapshot(queue) == before  # a dry run changes nothing
    assert (preview.dry_run, preview.matched, preview.changed, preview.skipped) == (
        True, 2, 3, 0)
    assert preview.changed_ids == sorted([f["f1"], f["f2"], f["dep"]])

    result = admin.retry_many(queue, type="flaky")
    assert (result.dry_run, result.matched, result.changed) == (False, 2, 3)
    assert result.changed_ids == preview.changed_ids
    state = lambda i: queue.get(i).state  # noqa: E731
    assert [state(f["f1"]), state(f["f2"]), state(f["dep"])] == [
        JobState.READY, JobState.READY, JobState.WAITING]
    assert state(f["o"]) is JobState.FAILED  # another type: not matched
    f["broken"]["on"] = False
    queue.run_worker(until_idle=True, **OPTIONS)
    assert [state(f["f1"]), state(f["f2"]), state(f["dep"])] == [JobState.DONE] * 3
    # Nothing left to match: nothing changes.
    again = admin.retry_many(queue, type="flaky")
    assert (again.matched, again.changed) == (0, 0)


def test_retry_many_skips_what_retry_refuses_and_says_why(
    queue: readyq.Queue, failures: dict[str, Any]
) -> None:
    f = failures
    result = admin.retry_many(queue, state="upstream_failed")
    assert (result.matched, result.changed, result.skipped) == (1, 0, 1)
    job, reason = result.reasons[0]
    assert job == f["dep"] and f"retry job {f['f1']} instead" in reason
    assert queue.get(f["dep"]).state is JobState.UPSTREAM_FAILED
    # With its failed dependency in the same filter, it is revived once, with it.
    both = admin.retry_many(queue, state=["failed", "upstream_failed"], group="g1")
    assert (both.matched, both.changed, both.skipped) == (1, 2, 0)
    every = admin.retry_many(queue, id=[f["dep"], f["o"]], state=["failed", "upstream_failed"])
    assert (every.matched, every.changed, every.skipped) == (1, 1, 0)  # dep is waiting now


def test_cancel_many_cancels_pending_jobs_and_their_dependents(queue: readyq.Queue) -> None:
    a = [queue.enqueue("t", group="a") for _ in range(3)]
    after = queue.enqueue("u", group="b", depends_on=[a[0]])
    keep = queue.enqueue("t", group="b")
    box = queue.enqueue_container("box", group="c")
    kids = [queue.enqueue("t", group="c", parent=box) for _ in range(2)]
    before = snapshot(queue)
    preview = admin.cancel_many(queue, group="a", dry_run=True)
    assert snapshot(queue) == before
    assert (preview.matched, preview.changed, preview.requested) == (3, 3, 0)

    result = admin.cancel_many(queue, JobFilter(group="a"))
    assert (result.matched, result.changed, result.skipped) == (3, 3, 0)
    assert [queue.get(i).state for i in a] == [JobState.CANCELLED] * 3
    assert queue.get(after).state is JobState.UPSTREAM_FAILED
    assert queue.get(keep).state is JobState.READY
    # A container and its children in one filter: each is counted once.
    boxed = admin.cancel_many(queue, group="c")
    assert (boxed.matched, boxed.changed, boxed.skipped) == (3, 3, 0)
    assert queue.get(box).state.is_terminal
    assert all(queue.get(k).state is JobState.CANCELLED for k in kids)
    # Ended jobs are not matched: a state filter of them is refused.
    with pytest.raises(InvalidFilter, match="cannot change done"):
        admin.cancel_many(queue, state="done")


def test_bad_bulk_filters_change_nothing(
    queue: readyq.Queue, failures: dict[str, Any]
) -> None:
    before = snapshot(queue)
    for call in (
        lambda: admin.retry_many(queue),  # no filter at all: would match every job
        lambda: admin.cancel_many(queue, JobFilter()),
        lambda: admin.retry_many(queue, state="ready"),
        lambda: admin.retry_many(queue, state="failed", type="x y "),
        lambda: admin.cancel_many(queue, state=["failed"]),
        lambda: admin.retry_many(queue, JobFilter(type="flaky"), group="g1"),
    ):
        with pytest.raises(InvalidFilter):
            call()
    with pytest.raises(ValueError):
        admin.retry_many(queue, type="flaky", extra_attempts=0)
    assert snapshot(queue) == before


def test_prune_dry_run_counts_what_prune_then_deletes(queue: readyq.Queue) -> None:
    @queue.handler("t")
    def t(job: readyq.Job) -> None:
        return None

    a = queue.enqueue("t")
    b = queue.enqueue("t", depends_on=[a])
    c = queue.enqueue("t")
    queue.run_worker(until_idle=True, **OPTIONS)
    keep = queue.enqueue("t", depends_on=[c], run_after=3600)  # keeps c
    assert keep
    before = snapshot(queue)
    preview = admin.prune(queue, 0, dry_run=True)
    assert snapshot(queue) == before
    assert (preview.dry_run, preview.candidates, preview.deleted, preview.edges,
            preview.kept) == (True, 3, 2, 1, 1)
    done = admin.prune(queue, 0)
    assert (done.dry_run, done.deleted, done.edges, done.kept) == (False, 2, 1, 1)
    assert [j.id for j in queue.jobs(order="oldest")] == [c, keep]
    assert b not in [j.id for j in queue.jobs()]
