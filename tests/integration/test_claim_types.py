"""A worker claims the ready jobs of its own types in claim order, however many types.

A worker of one type reads the index of ready jobs by type; a worker of a few types
(up to ``MERGED_TYPES_MAX``) reads one range of it per type and merges them; a worker
of more types reads the index by group. The claim order must be the same in all three:
per group, higher priority first, then the older job, across the worker's types, and
never a job of another type or one whose ``run_after`` is still ahead.
"""

from __future__ import annotations

import random

import pytest

import readyq
from readyq.claim_order import ClaimOrder
from readyq.sql.ready import MERGED_TYPES_MAX

GROUPS = ("g1", "g2", "g3")


Job = tuple[str, int, str, bool]


def enqueue_mix(queue: readyq.Queue, types: list[str], rng: random.Random) -> dict[int, Job]:
    """Ready jobs of ``types`` and of a type no worker here runs, spread over the groups
    with random priorities, and a few of the worker's types delayed by an hour. Returns
    job id -> (group, priority, type, delayed)."""
    rows = []
    for _ in range(120):
        type_ = rng.choice([*types, "other"])
        delayed = type_ != "other" and rng.random() < 0.1
        rows.append((rng.choice(GROUPS), rng.randrange(4), type_, delayed))
    ids = queue.enqueue_many([
        readyq.JobSpec(type_, {}, group=group, priority=priority,
                       run_after=3600 if delayed else None)
        for group, priority, type_, delayed in rows
    ])
    jobs = dict(zip(ids, rows, strict=True))
    return jobs


@pytest.mark.parametrize("n_types", [1, 2, 3, MERGED_TYPES_MAX + 1])
def test_a_worker_claims_the_heads_of_its_types_in_claim_order(
    queue: readyq.Queue, n_types: int
) -> None:
    rng = random.Random(n_types)
    types = [f"t{i}" for i in range(n_types)]
    jobs = enqueue_mix(queue, types, rng)
    # Per group, the claimable jobs in claim order: the order every claim must follow.
    order = {
        g: sorted(
            (i for i, (group, _, type_, delayed) in jobs.items()
             if group == g and type_ in types and not delayed),
            key=lambda i: (-jobs[i][1], i),
        )
        for g in GROUPS
    }
    taken: dict[str, int] = dict.fromkeys(GROUPS, 0)
    claims = 0
    while True:
        limit = rng.randrange(1, 9)
        claimed = queue.store.claim_jobs(ClaimOrder(
            owner="w", cap=1000, limit=limit, lease_ttl=60, types=types,
        ))
        if not claimed:
            break
        claims += 1
        assert len(claimed) <= limit
        by_group: dict[str, list[int]] = {}
        for c in claimed:
            assert c.type in types
            by_group.setdefault(c.group, []).append(c.id)
        for g, ids in by_group.items():
            # The group's next jobs in claim order, none skipped.
            expected = order[g][taken[g] : taken[g] + len(ids)]
            assert sorted(ids) == sorted(expected), (g, ids, expected)
            taken[g] += len(ids)
    assert claims > 1
    assert taken == {g: len(order[g]) for g in GROUPS}
    counts = queue.counts()
    delayed = sum(1 for *_, d in jobs.values() if d)
    others = sum(1 for _, _, type_, _ in jobs.values() if type_ == "other")
    assert counts.get("ready", 0) == delayed + others
