"""Pauses across worker processes, checked from the jobs' rows: no job of a paused group
starts after the pause commits, the other group's jobs go on, and a pause with ``until``
ends by itself on the database clock, with no call."""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa
from harness import Workers, enqueue_many, wait_for

import readyq

pytestmark = pytest.mark.slow


def db_now(queue: readyq.Queue) -> float:
    with queue.engine.connect() as conn:
        return float(conn.execute(sa.select(queue.store.now())).scalar_one())


def starts(queue: readyq.Queue, group: str) -> list[float]:
    j = queue.store.tables.jobs
    with queue.engine.connect() as conn:
        rows = conn.execute(
            sa.select(j.c.started_at).where(j.c.group_key == group, j.c.started_at.is_not(None))
        ).scalars().all()
    return [float(r) for r in rows]


def done(queue: readyq.Queue, group: str) -> int:
    j = queue.store.tables.jobs
    with queue.engine.connect() as conn:
        return int(conn.execute(
            sa.select(sa.func.count()).where(j.c.group_key == group, j.c.state == "done")
        ).scalar_one())


def test_no_claim_of_a_paused_group_after_the_commit_and_until_lifts_it(
    queue: readyq.Queue, history_engine: sa.Engine, workers: Workers
) -> None:
    a = enqueue_many(queue, [({"sleep": 0.01}, "a", 1)] * 300)
    b = enqueue_many(queue, [({"sleep": 0.01}, "b", 1)] * 150)
    for n in range(3):
        workers.start(f"w{n}", concurrency=2, poll=0.02, until_idle=False)
    wait_for(lambda: len(starts(queue, "a")) >= 10, what="group a's first starts", timeout=60)
    queue.pause(group="a")
    paused_at = db_now(queue)  # the pause has committed by now
    wait_for(lambda: done(queue, "b") == len(b), what="group b's jobs, not paused", timeout=60)
    time.sleep(0.3)  # several claims of every process, with only paused jobs ready
    late = [s for s in starts(queue, "a") if s > paused_at]
    assert late == [], f"{len(late)} job(s) of the paused group started after the pause"
    held = len(a) - len(starts(queue, "a"))
    assert held > 0, "the pause came too late to hold any job back"

    # Replaced by a pause that ends by itself: nothing is called when it ends.
    queue.pause(group="a", until=1.0)
    (p,) = queue.pauses()
    assert p.until is not None
    until = p.until.timestamp()
    wait_for(lambda: done(queue, "a") == len(a), what="group a's jobs after until", timeout=60)
    resumed = sorted(s for s in starts(queue, "a") if s > paused_at)
    assert len(resumed) == held
    assert resumed[0] >= until, (resumed[0], until)
    print(f"held {held} jobs; first start {resumed[0] - until:.3f}s after until")
