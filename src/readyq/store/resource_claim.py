"""The claim that weighs named resources: who starts next by weighted Dominant Resource
Fairness, never past any capacity, with reservations for the jobs that do not fit.

A worker whose queue defines resources claims through this unit instead of
:func:`readyq.store.claim.claim_jobs`. One transaction, under the gate row's lock that
every claim takes (so claimers on every host take turns):

1. record the capacities this worker sees (``<prefix>resources``, for ``status``);
2. sum what is in flight per group and resource from the jobs' stored costs;
3. read the standing reservations, dropping those whose job is no longer ready;
4. read the first runnable jobs of each ready group, with their costs (a job stored
   without costs takes its handler's; one that names a resource this worker does not
   define is left to the workers that do);
5. plan (:func:`readyq.planning.drf.plan_starts`), claim the planned ids, write the
   handler's costs into the rows that had none (so that every claimer counts them),
   update the reservations and the fair-share progress.

Rate limits apply as in the plain claim: types whose limit is spent leave the claim,
and planned starts beyond a limit's allowance are dropped, in plan order.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from readyq.dialects import ClaimReceipt, ClaimRequest, Progress
from readyq.model import ClaimedJob
from readyq.planning.drf import (
    GLOBAL,
    Candidate,
    GroupState,
    Reserved,
    plan_starts,
    progress_of,
)
from readyq.rate_limits import RateLimit
from readyq.resources import decode, encode
from readyq.store.claim import NOTHING, Budget, lock_gate, open_budget
from readyq.store.context import StoreContext
from readyq.store.records import ResourceView

# The most runnable jobs read per group: a group's quota counts its runnable jobs up to
# the global cap, or this many.
HEADS_MAX = 256
# A capacity unchanged for this long is written again, so that status can tell a
# resource that workers still see from one they no longer define.
SEEN_REFRESH = 30.0


class CapacityLog:
    """The capacities this store last wrote to ``<prefix>resources``, so that a claim
    writes one only when it changed (or has not been written for a while)."""

    def __init__(self) -> None:
        self.written: dict[str, tuple[int, float]] = {}

    def due(self, capacity: Mapping[str, int]) -> dict[str, int]:
        now = time.monotonic()
        return {
            name: value
            for name, value in capacity.items()
            if (seen := self.written.get(name)) is None
            or seen[0] != value
            or now - seen[1] >= SEEN_REFRESH
        }

    def wrote(self, capacity: Mapping[str, int]) -> None:
        now = time.monotonic()
        for name, value in capacity.items():
            self.written[name] = (value, now)


def record_capacities(
    ctx: StoreContext, conn: Connection, capacity: Mapping[str, int]
) -> None:
    """Store each resource's capacity as seen now (an UPDATE, else an INSERT: the gate
    row's lock, held by the caller, orders the claims that write them)."""
    r = ctx.tables.resources
    for name, value in sorted(capacity.items()):
        updated = conn.execute(
            sa.update(r).where(r.c.name == name).values(capacity=value, seen_at=ctx.now)
        ).rowcount
        if not updated:
            conn.execute(sa.insert(r).values(name=name, capacity=value, seen_at=ctx.now))


def reservation_rows(ctx: StoreContext, conn: Connection) -> list[Any]:
    """Every reservation, oldest first, with what is now true of its job (NULLs for a
    job that is gone)."""
    t = ctx.tables
    r, j = t.reservations, t.jobs
    due = sa.or_(j.c.run_after.is_(None), j.c.run_after <= ctx.now)
    return list(
        conn.execute(
            sa.select(
                r.c.job_id, r.c.seq, r.c.uses, j.c.state, j.c.type, j.c.group_key,
                j.c.weight, sa.case((due, True), else_=False).label("due"),
            )
            .select_from(r.outerjoin(j, j.c.id == r.c.job_id))
            .order_by(r.c.seq, r.c.job_id)
        ).all()
    )


def claim_weighed(
    ctx: StoreContext,
    conn: Connection,
    owner: str,
    cap: int,
    limit: int,
    ttl: float,
    types: Sequence[str] | None,
    start: Mapping[str, tuple[Any, ...]] | None,
    rate_limits: Mapping[str, RateLimit] | None,
    view: ResourceView,
    log: CapacityLog,
) -> ClaimReceipt:
    """Claim up to ``limit`` jobs under the global ``cap`` and every resource's
    capacity in ``view``, in the open transaction (see the module's doc)."""
    t, d = ctx.tables, ctx.dialect
    if ctx.hooks.on_claim_transaction is not None:
        ctx.hooks.on_claim_transaction(conn)
    d.pin_index_order(conn)
    now = ctx.now
    gate = lock_gate(ctx, conn)
    due = log.due(view.capacity)
    if due:
        record_capacities(ctx, conn, due)
        log.wrote(due)
    held: dict[str, dict[str, int]] = {}
    weight: dict[str, int] = {}
    for group, stored, n, w in d.in_flight_uses(conn, t):
        mine = held.setdefault(group, {})
        mine[GLOBAL] = mine.get(GLOBAL, 0) + n
        for name, units in decode(stored).items():
            mine[name] = mine.get(name, 0) + units * n
        weight[group] = max(weight.get(group, 1), w)
    in_flight = sum(h.get(GLOBAL, 0) for h in held.values())
    if cap - in_flight <= 0:
        return NOTHING
    budget = open_budget(ctx, conn, rate_limits, types, min(limit, cap - in_flight))
    if budget is not None:
        types = budget.allowed(types or ())
        if not types:
            return NOTHING
    known = set(view.capacity)

    def cost(type_: str, stored: str | None) -> dict[str, int] | None:
        uses = decode(stored) if stored is not None else view.handler_uses.get(type_, {})
        if any(name not in known for name in uses):
            return None  # a resource this worker cannot keep: left to those that can
        return {GLOBAL: 1, **uses}

    # Standing reservations: dropped when their job is no longer ready.
    drop: list[int] = []
    standing: list[Reserved] = []
    next_seq = 1
    for row in reservation_rows(ctx, conn):
        next_seq = max(next_seq, int(row.seq) + 1)
        if row.state != "ready" or not row.due:
            drop.append(int(row.job_id))
            continue
        held_for = decode(row.uses)
        runs_it = types is None or row.type in types
        standing.append(
            Reserved(
                Candidate(int(row.job_id), row.group_key, {GLOBAL: 1, **held_for}, row.type),
                claimable=runs_it and all(name in known for name in held_for),
            )
        )
        weight[row.group_key] = max(weight.get(row.group_key, 1), int(row.weight))

    groups = d.ready_groups(conn, t, types)
    heads: dict[str, list[Candidate]] = {}
    order: dict[int, tuple[int, int]] = {}
    from_handler: dict[int, str] = {}
    if groups:
        n = min(max(cap, 1), HEADS_MAX)
        for row in d.resource_heads(conn, t, now, groups, types, n):
            c = cost(row.type, row.uses)
            if c is None:
                continue
            job_id = int(row.id)
            heads.setdefault(row.group_key, []).append(
                Candidate(job_id, row.group_key, c, row.type)
            )
            order[job_id] = (-int(row.priority), job_id)
            weight[row.group_key] = max(weight.get(row.group_key, 1), int(row.weight))
            if row.uses is None and len(c) > 1:
                text = encode({k: v for k, v in c.items() if k != GLOBAL})
                assert text is not None
                from_handler[job_id] = text
    if not heads and not standing:
        _drop_reservations(ctx, conn, drop)
        return NOTHING
    keys = sorted(set(heads) | set(held) | {r.job.group for r in standing})
    history = d.group_history(conn, t, keys)
    states = []
    for key in keys:
        mine_heads = sorted(heads.get(key, ()), key=lambda c: order[c.id])
        hist = history.get(key)
        states.append(
            GroupState(
                key=key,
                weight=weight.get(key, 1),
                held=held.get(key, {}),
                runnable=len(mine_heads),
                heads=mine_heads,
                vfinish=None if hist is None else hist[0],
                served_seq=0 if hist is None else hist[1],
            )
        )
    capacity = {GLOBAL: cap, **view.capacity}
    vclock, seq = float(gate.vclock), int(gate.seq)
    plan = plan_starts(capacity, states, vclock, reservations=standing, max_claims=limit)
    picks = list(plan.picks)
    if budget is not None:
        picks = _within_allowance(picks, budget)
    claimed: list[ClaimedJob] = []
    if picks:
        request = ClaimRequest(
            owner=owner, group="", limit=len(picks), ttl=ttl, types=types, start=start
        )
        claimed = d.claim_ids(conn, t, request, [c.id for c in picks], now)
    if budget is not None and claimed:
        budget.spend(conn, claimed)
    got = {c.id for c in claimed}
    _write_handler_costs(ctx, conn, {i: u for i, u in from_handler.items() if i in got})
    # A served reservation is done with, claimed or not (a job it could not claim was
    # changed by another transaction: the next claim looks again).
    drop += plan.served_reservations
    _drop_reservations(ctx, conn, drop)
    if plan.reserve:
        conn.execute(
            sa.insert(t.reservations),
            [
                {
                    "job_id": c.id,
                    "seq": next_seq + i,
                    "uses": encode({k: v for k, v in c.cost.items() if k != GLOBAL}),
                }
                for i, c in enumerate(plan.reserve)
            ],
        )
    if claimed:
        progress = progress_of(plan, got, states, capacity, vclock, seq)
        rows = [(k, v, progress.served_seq[k]) for k, v in progress.vfinish.items()]
        d.record_progress(conn, t, Progress(rows, set(history), progress.vclock, progress.seq))
    return ClaimReceipt(len(claimed), lambda: claimed)


def _within_allowance(picks: Sequence[Candidate], budget: Budget) -> list[Candidate]:
    """The picks, in order, without those past their rate limit's allowance."""
    used: dict[str, int] = {}
    kept = []
    for c in picks:
        name = budget.limit_of(c.type)
        if name is not None:
            if used.get(name, 0) >= (budget.allowance(c.type) or 0):
                continue
            used[name] = used.get(name, 0) + 1
        kept.append(c)
    return kept


def _write_handler_costs(ctx: StoreContext, conn: Connection, costs: Mapping[int, str]) -> None:
    """Store the handler's costs in claimed rows that had none of their own."""
    j = ctx.tables.jobs
    by_text: dict[str, list[int]] = {}
    for job_id, text in costs.items():
        by_text.setdefault(text, []).append(job_id)
    for text, ids in sorted(by_text.items()):
        conn.execute(sa.update(j).where(j.c.id.in_(sorted(ids))).values(uses=text))


def _drop_reservations(ctx: StoreContext, conn: Connection, ids: Sequence[int]) -> None:
    if ids:
        r = ctx.tables.reservations
        conn.execute(sa.delete(r).where(r.c.job_id.in_(sorted(set(ids)))))

