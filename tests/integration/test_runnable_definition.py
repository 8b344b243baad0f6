"""The indexed runnable set equals the specification's definition at every step.

A seeded random DAG (dependencies, nested containers, delayed jobs) is driven one claim at
a time through the store: claims, starts, done / fail / retry / release outcomes, cancels,
abandoned leases reclaimed after the clock moves on. After every step the ids selected by
``runnable`` (state and run_after only) must equal those of ``runnable_by_definition``
(the NOT EXISTS query), both evaluated at the same instant.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from readyq.claim_order import ClaimOrder, StartPolicy
from readyq.model import ClaimedJob
from readyq.sql.ready import runnable, runnable_by_definition
from readyq.store import Outcome

OWNER = "t"


def build_dag(queue: readyq.Queue, rng: random.Random) -> tuple[list[int], list[int]]:
    jobs: list[int] = []
    outer = queue.enqueue_container("box", {"name": "outer"})
    inner = queue.enqueue_container("box", {"name": "inner"}, parent=outer)
    side = queue.enqueue_container("box", {"name": "side"})
    containers = [outer, inner, side]
    # Every container gets a child first, so none of them stays open forever.
    for box in containers:
        jobs.append(queue.enqueue("work", {"seed": box}, parent=box))
    for n in range(57):
        upstream = rng.sample(jobs, k=min(len(jobs), rng.choice([0, 0, 1, 1, 2, 3])))
        if n > 20 and rng.random() < 0.15:
            upstream.append(rng.choice([outer, side]))  # depend on a whole container
        options: dict[str, Any] = {"depends_on": upstream, "max_attempts": rng.choice([1, 2, 3])}
        if rng.random() < 0.2:
            options["run_after"] = rng.choice([50, 150, 400])
        where = rng.random()
        if where < 0.15:
            parent = inner
        elif where < 0.25:
            parent = side
        else:
            parent = None
        if parent is not None and not set(upstream) & {outer, inner, side}:
            options["parent"] = parent
        jobs.append(queue.enqueue("work", {"n": n}, **options))
    return jobs, containers


def ids_now(queue: readyq.Queue) -> tuple[set[int], set[int]]:
    store = queue.store
    t = store.tables

    def unit(conn: sa.Connection) -> tuple[set[int], set[int]]:
        # One instant for both queries.
        instant = float(conn.execute(sa.select(store.now())).scalar_one())
        now = sa.literal(instant, sa.Double)
        fast = set(conn.execute(sa.select(t.jobs.c.id).where(runnable(t, now))).scalars())
        spec = set(conn.execute(runnable_by_definition(t, now)).scalars())
        return fast, spec

    return store.read(unit)


@pytest.mark.parametrize("seed", [7, 2024])
def test_runnable_matches_the_definition_at_every_step(queue: readyq.Queue, seed: int) -> None:
    rng = random.Random(seed)
    store = queue.store
    jobs, containers = build_dag(queue, rng)
    checks = {"total": 0, "non_empty": 0}

    def check(where: str) -> None:
        fast, spec = ids_now(queue)
        assert fast == spec, (
            f"{where}: runnable {sorted(fast)} != definition {sorted(spec)} "
            f"(only fast: {sorted(fast - spec)}, only spec: {sorted(spec - fast)})"
        )
        checks["total"] += 1
        checks["non_empty"] += bool(fast)

    abandoned: list[ClaimedJob] = []
    check("start")
    for step in range(400):
        roll = rng.random()
        if roll < 0.15:
            victim = rng.choice(jobs + containers)
            store.cancel(victim)
            check(f"step {step}: after cancelling {victim}")
        elif roll < 0.2 and abandoned:
            store.clock_offset += 60  # every abandoned lease (ttl 30) expires
            store.reclaim_expired()
            abandoned.clear()
            check(f"step {step}: after a reclaim")

        claimed = store.claim_jobs(ClaimOrder(
            owner=OWNER, cap=1000, limit=5, lease_ttl=30, types=None,
        ))
        check(f"step {step}: after claiming {[c.id for c in claimed]}")
        if not claimed:
            if not store.has_unfinished():
                break
            # Nothing runnable now: let delays, backoffs and leases pass.
            store.clock_offset += 200
            store.reclaim_expired()
            abandoned.clear()
            check(f"step {step}: after moving the clock")
            continue

        if rng.random() < 0.1:
            abandoned.append(claimed.pop())  # stays leased until its lease expires
        started = store.start_jobs(OWNER, [(c, StartPolicy(None)) for c in claimed])
        assert started == {c.id for c in claimed}
        check(f"step {step}: after starting")

        outcomes = []
        for c in claimed:
            kind = rng.choices(["done", "fail", "retry", "release"], [70, 12, 12, 6])[0]
            if kind == "retry" and c.attempt >= c.max_attempts:
                kind = "fail"
            outcomes.append(
                Outcome(
                    job=c,
                    kind=kind,
                    result_json="null" if kind == "done" else None,
                    error=None if kind == "done" else f"{kind} at step {step}",
                    delay=rng.choice([0.0, 40.0]),
                )
            )
        applied = store.record_outcomes(OWNER, outcomes)
        assert all(applied.values()), applied
        check(f"step {step}: after finishing {[(o.job.id, o.kind) for o in outcomes]}")
    else:
        pytest.fail(f"the graph did not finish: {queue.counts()}")

    states = queue.counts()
    assert set(states) <= {"done", "failed", "cancelled", "upstream_failed"}, states
    assert sum(states.values()) == len(jobs) + len(containers)
    assert checks["total"] > 30
    assert checks["non_empty"] > 10
    # Every state the graph can end in was reached, so the cascades were exercised.
    assert {"done", "failed", "upstream_failed"} <= set(states), states
