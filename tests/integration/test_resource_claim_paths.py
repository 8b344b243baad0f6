"""The claim that weighs resources goes through the plain claim statement when the costs
cannot change its plan. On random states, that claim leases the same jobs, writes the
same costs into them and leaves the same fair-share clocks as the claim that weighs job
by job.

Each state is built twice, in two schemas of one database. The second also holds a
reservation whose job is gone: a claim drops such a reservation and plans as if it were
not there, but a standing reservation keeps the claim off the plain path, so the second
schema's claims always weigh job by job. The statements each claim runs tell which path
it took: the claim that weighs reads each group's first jobs (``rq_head``), the plain
one reads none.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from readyq.claim_order import ClaimOrder
from readyq.store import ResourceView

GONE = 10**9  # the id of the reserved job that no longer exists
CASES = 80
ROUNDS = 3


class Side:
    """One schema of the pair, and the statements its claims ran."""

    def __init__(self, db: str, prefix: str) -> None:
        self.queue = readyq.Queue(db, prefix=prefix)
        self.queue.create_schema()
        self.queue.resource("gpu", capacity=1000)
        self.t = self.queue.store.tables
        self.statements: list[str] = []
        self.recording = False
        sa.event.listen(self.queue.engine, "before_cursor_execute", self._record)

    def _record(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if self.recording:
            self.statements.append(statement)

    @contextmanager
    def recorded(self) -> Iterator[list[str]]:
        self.statements = []
        self.recording = True
        try:
            yield self.statements
        finally:
            self.recording = False

    def write(self, stmt: Any, rows: Any = None) -> None:
        with self.queue.engine.begin() as conn:
            conn.execute(stmt, rows) if rows is not None else conn.execute(stmt)

    def rows(self) -> dict[str, Any]:
        t = self.t
        j = t.jobs
        with self.queue.engine.connect() as conn:
            jobs = conn.execute(
                sa.select(j.c.id, j.c.state, j.c.uses, j.c.lease_owner).order_by(j.c.id)
            ).all()
            groups = conn.execute(
                sa.select(t.groups.c.group_key, t.groups.c.vfinish, t.groups.c.served_seq)
                .order_by(t.groups.c.group_key)
            ).all()
            gate = conn.execute(sa.select(t.gate.c.vclock, t.gate.c.seq)).all()
            r = t.reservations
            reserved = conn.execute(
                sa.select(r.c.job_id, r.c.seq, r.c.uses).where(r.c.job_id != GONE)
                .order_by(r.c.job_id)
            ).all()
        return {
            "jobs": [tuple(r) for r in jobs],
            "groups": [(r[0], round(float(r[1]), 9), int(r[2])) for r in groups],
            "gate": [(round(float(r[0]), 9), int(r[1])) for r in gate],
            "reservations": [tuple(r) for r in reserved],
        }

    def close(self) -> None:
        self.queue.close()


def build(side: Side, rnd: random.Random, case: dict[str, Any]) -> None:
    """Enqueue the case's jobs, put some in flight and store its fair-share history."""
    ids = []
    for group, weight, priority, type_, uses in case["jobs"]:
        ids.append(side.queue.enqueue(type_, group=group, weight=weight, priority=priority,
                                      uses=uses))
    j = side.t.jobs
    for job_id, stored in case["flight"]:
        side.write(
            sa.update(j).where(j.c.id == ids[job_id]).values(
                state="running", lease_owner="other", lease_expires=time.time() + 3600,
                heartbeat_at=time.time(), started_at=time.time(), uses=stored,
            )
        )
    if case["history"]:
        side.write(sa.insert(side.t.groups), case["history"])
    side.write(sa.update(side.t.gate).values(vclock=case["vclock"], seq=case["seq"]))


def random_case(rnd: random.Random) -> dict[str, Any]:
    cap = rnd.randint(1, 10)
    one = '{"gpu":1}'
    shape = rnd.random()
    if shape < 0.6:  # what the plain path takes: every type costs 1 gpu
        handler = {"t": {"gpu": 1}, "u": {"gpu": 1}}
    elif shape < 0.8:  # types whose costs differ
        handler = {"t": {"gpu": 1}, "u": {"gpu": 2}}
    else:  # 2 gpus a job: one dominant unit only while the gpus are plenty
        handler = {"t": {"gpu": 2}, "u": {"gpu": 2}}
    gpus = rnd.choice([cap * 3, cap * 2, cap, max(1, cap // 2), 40])
    types = rnd.choice([["t"], ["t", "u"], None, ["t"]])
    if handler["t"] != handler["u"]:
        types = ["t", "u"]  # (None would take no plain path at all here)
    groups = [f"g{i}" for i in range(rnd.randint(1, 4))]
    weights = {g: rnd.randint(1, 3) for g in groups}
    jobs = []
    for g in groups:
        for _ in range(rnd.randint(0, 8)):
            type_ = "t" if types == ["t"] or rnd.random() < 0.6 else "u"
            # Now and then a job with costs of its own: the claim must weigh.
            uses = {"gpu": 1} if rnd.random() < 0.04 else None
            jobs.append((g, weights[g], rnd.choice([0, 0, 1]), type_, uses))
    flight = []
    in_flight = rnd.randint(0, min(cap, len(jobs)))
    for index in rnd.sample(range(len(jobs)), in_flight):
        if jobs[index][4] is not None:
            continue
        kind = rnd.random()
        # Mostly the handler's cost; some without costs (claimed by a worker that keeps
        # no resources) and some that hold more than one dominant unit.
        stored = one if kind < 0.6 else None if kind < 0.75 else rnd.choice(
            ['{"gpu":3}', '{"gpu":5}'])
        flight.append((index, stored))
    history = [
        {"group_key": g, "vfinish": round(rnd.uniform(0, 3), 3), "served_seq": rnd.randint(0, 9)}
        for g in groups if rnd.random() < 0.5
    ]
    return {
        "cap": cap, "gpus": gpus, "handler": handler, "types": types, "jobs": jobs,
        "flight": flight, "history": history, "vclock": round(rnd.uniform(0, 2), 3),
        "seq": rnd.randint(0, 20), "limit": rnd.randint(1, 6),
    }


@pytest.fixture
def pair(db: str) -> Iterator[tuple[Side, Side]]:
    plain, weighed = Side(db, "pa_"), Side(db, "pb_")
    try:
        yield plain, weighed
    finally:
        plain.close()
        weighed.close()


def test_the_plain_path_claims_what_weighing_job_by_job_claims(
    pair: tuple[Side, Side],
) -> None:
    plain, weighed = pair
    rnd = random.Random(20261204)
    took_plain = claims = 0
    for case_no in range(CASES):
        case = random_case(rnd)
        for side in pair:
            side.write(sa.delete(side.t.reservations))
            side.write(sa.delete(side.t.jobs))
            side.write(sa.delete(side.t.groups))
            build(side, rnd, case)
        assert plain.rows() == weighed.rows()
        view = ResourceView({"gpu": case["gpus"]}, case["handler"])
        for round_no in range(ROUNDS):
            # (A claim that found nothing to claim returned before dropping it.) Its seq
            # is below every other's, so the reservations made next are numbered alike.
            r = weighed.t.reservations
            weighed.write(sa.delete(r).where(r.c.job_id == GONE))
            weighed.write(sa.insert(r).values(job_id=GONE, seq=0, uses=json.dumps({"gpu": 1})))
            got = []
            for side in pair:
                with side.recorded() as statements:
                    claimed = side.queue.store.claim_jobs(ClaimOrder(
                        owner="w", cap=case["cap"], limit=case["limit"], lease_ttl=60.0,
                        types=case["types"], resources=view,
                    ))
                got.append(sorted(c.id for c in claimed))
                weighs = any("rq_head" in s for s in statements)
                if side is plain:
                    took_plain += not weighs and bool(claimed)
                    claims += bool(claimed)
                elif claimed:
                    assert weighs, "the schema with a reservation must weigh job by job"
            where = f"case {case_no}, round {round_no}: {case}"
            assert got[0] == got[1], where
            assert plain.rows() == weighed.rows(), where
            # Some of the jobs in flight end, the same ones on both sides.
            j = plain.t.jobs
            with plain.queue.engine.connect() as conn:
                running = conn.execute(
                    sa.select(j.c.id).where(j.c.state.in_(["leased", "running"]))
                    .order_by(j.c.id)
                ).scalars().all()
            done = [i for i in running if rnd.random() < 0.5]
            for side in pair:
                side.write(sa.update(side.t.jobs).where(side.t.jobs.c.id.in_(done))
                           .values(state="done", lease_owner=None))
    # Both paths were compared: most claims took the plain path, not all.
    assert claims > 20
    assert claims // 4 < took_plain < claims
