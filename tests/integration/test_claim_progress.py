"""The fair-share progress a claim stores matches the jobs it really claimed.

PostgreSQL stores the progress the plan expects in the claim's own statement and
corrects it when fewer jobs come back. Rows another transaction holds are skipped
(SKIP LOCKED), so a planned group can get fewer jobs than planned, or none: the stored
clocks must then be those of the jobs claimed, as if the plan had asked for exactly
those, on every database.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from readyq.claim_order import ClaimOrder
from readyq.dialects.base import PER_GROUP_PARAMS
from readyq.store import NewJob


def progress(queue: readyq.Queue) -> tuple[tuple[float, int], dict[str, tuple[float, int]]]:
    t = queue.store.tables
    with queue.engine.connect() as conn:
        gate = conn.execute(sa.select(t.gate.c.vclock, t.gate.c.seq)).one()
        groups = {
            r.group_key: (float(r.vfinish), int(r.served_seq))
            for r in conn.execute(sa.select(t.groups))
        }
    return (float(gate.vclock), int(gate.seq)), groups


def enqueue(queue: readyq.Queue, group: str, n: int) -> list[int]:
    return [
        queue.store.enqueue(NewJob(type="t", args_json="null", group=group))
        for _ in range(n)
    ]


@pytest.mark.parametrize("locked", [1, 2])
def test_a_group_whose_rows_are_locked_elsewhere_keeps_its_clock(
    queue: readyq.Queue, dialect_name: str, locked: int
) -> None:
    if dialect_name == "sqlite":
        pytest.skip("SQLite has no row locks: a claim never skips a row")
    store = queue.store
    a = enqueue(queue, "a", 2)
    enqueue(queue, "b", 2)
    (vclock0, seq0), before = progress(queue)
    assert before == {}

    j = store.tables.jobs
    holder = queue.engine.connect()
    try:
        # Another transaction holds some of group a's rows: the claim skips them. (One
        # row per statement, by primary key: on a table this small MariaDB may scan a
        # whole index for an IN list and keep every row it read locked.)
        for job_id in a[:locked]:
            holder.execute(sa.select(j.c.id).where(j.c.id == job_id).with_for_update()).one()
        claimed = store.claim_jobs(ClaimOrder(
            owner="W", cap=10, limit=4, lease_ttl=30.0, types=["t"],
        ))
    finally:
        holder.rollback()
        holder.close()

    got: dict[str, int] = {}
    for c in claimed:
        got[c.group] = got.get(c.group, 0) + 1
    assert got == ({"a": 1, "b": 2} if locked == 1 else {"b": 2})
    (vclock, seq), after = progress(queue)
    # One sequence number per job claimed, none for the skipped ones.
    assert seq == seq0 + len(claimed)
    assert after["b"][1] > seq0
    if locked == 2:
        # Group a got nothing: it is not marked served, and its clock lets it start at
        # once, as a group with no history would.
        va, sa_ = after.get("a", (vclock0, 0))
        assert sa_ == 0 and va <= vclock
    else:
        assert after["a"][1] > seq0


def test_claims_record_one_sequence_number_per_job(queue: readyq.Queue) -> None:
    store = queue.store
    for g in ("a", "b", "c"):
        enqueue(queue, g, 3)
    seen: list[Any] = []
    for _ in range(3):
        (_, seq0), _ = progress(queue)
        claimed = store.claim_jobs(ClaimOrder(
            owner="W", cap=20, limit=4, lease_ttl=30.0, types=["t"],
        ))
        (_, seq), groups = progress(queue)
        assert seq == seq0 + len(claimed)
        seen.extend(claimed)
    assert len(seen) == 9
    (_, seq), groups = progress(queue)
    assert max(s for _, s in groups.values()) == seq


def test_progress_of_more_groups_than_one_statement_binds(queue: readyq.Queue) -> None:
    """40 groups: the in-flight/history read binds the keys as one list and MySQL's
    upsert of the progress is split into statements of PER_GROUP_PARAMS rows. Every
    group's clock is stored, and read back by the next claims."""
    store = queue.store
    keys = [f"g{i:02d}" for i in range(40)]
    assert len(keys) > PER_GROUP_PARAMS * 2
    for g in keys:
        enqueue(queue, g, 2)
    first = store.claim_jobs(ClaimOrder(owner="W", cap=200, limit=40, lease_ttl=30.0, types=["t"]))
    assert sorted(c.group for c in first) == keys  # one job of each group, equal weights
    (_, seq), groups = progress(queue)
    assert set(groups) == set(keys)
    assert seq == 40
    assert sorted(s for _, s in groups.values()) == list(range(1, 41))
    second = store.claim_jobs(ClaimOrder(
        owner="W", cap=200, limit=40, lease_ttl=30.0, types=["t"],
    ))
    assert sorted(c.group for c in second) == keys
    (_, seq), groups = progress(queue)
    assert seq == 80
    assert sorted(s for _, s in groups.values()) == list(range(41, 81))
