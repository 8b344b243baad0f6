"""The claim that weighs named resources: who starts next by weighted Dominant Resource
Fairness, never past any capacity, with reservations for the jobs that do not fit.

A worker whose queue defines resources claims through this unit instead of
:func:`readyq.store.claim.claim_jobs`. One transaction, under the gate row's lock that
every claim takes (so claimers on every host take turns):

1. record the capacities this worker sees (``<prefix>resources``, for ``status``);
   when the costs cannot change the plan (:func:`_claim_if_plain`: the types' handlers
   agree on one dominant unit, no ready job of the types has costs of its own, no
   reservation stands), claim through :func:`readyq.store.claim.claim_shares`, the plain
   claim, which writes the handlers' costs into the rows it leases; otherwise
2. in one read (:meth:`readyq.dialects.base.Dialect.resource_state`): what is in flight
   per group and resource from the jobs' stored costs, the standing reservations
   (dropped when their job is no longer ready), the groups' fair-share history and the
   first runnable jobs of each ready group with their costs (a job stored without
   costs takes its handler's; one that names a resource this worker does not define is
   left to the workers that do);
3. plan (:func:`readyq.planning.drf.plan_starts`), claim the planned ids, their UPDATE
   writing the handler's costs into the rows that had none (so that every claimer
   counts them), then update the reservations and the fair-share progress.

Rate limits apply as in the plain claim: types whose limit is spent leave the claim,
and planned starts beyond a limit's allowance are dropped, in plan order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from readyq.claim_order import ClaimOrder
from readyq.dialects import ClaimReceipt, ClaimRequest, Progress, ResourceState
from readyq.model import ClaimedJob
from readyq.planning.drf import (
    GLOBAL,
    Candidate,
    DrfPlan,
    GroupState,
    Reserved,
    dominant,
    plan_starts,
    progress_of,
)
from readyq.planning.fair_share import GroupDemand, plan_claims
from readyq.planning.pauses import Standing
from readyq.resources import ResourceView, decode, encode
from readyq.store import pauses as pause_rows
from readyq.store.claim import (
    NOTHING,
    Budget,
    claim_shares,
    lock_gate,
    open_budget,
    open_claim,
    progress_rows,
)
from readyq.store.context import StoreContext

# The most runnable jobs read per group: a group's quota counts its runnable jobs up to
# the global cap, or this many.
HEADS_MAX = 256
# A capacity unchanged for this long is written again, so that status can tell a
# resource that workers still see from one they no longer define.
SEEN_REFRESH = 30.0


class CapacityLog:
    """The capacities this store last wrote to ``<prefix>resources``, so that a claim
    writes one only when it changed (or has not been written for a while).

    A claim stages what it wrote (:meth:`stage`); the store makes it count once the
    transaction committed (:meth:`committed`). A transaction rolled back (a worker's
    rehearsal at start, a deadlock) leaves nothing written, and the next claim writes
    again.
    """

    def __init__(self) -> None:
        self.written: dict[str, tuple[int, float]] = {}
        self.staged: dict[str, int] = {}

    def due(self, capacity: Mapping[str, int]) -> dict[str, int]:
        now = time.monotonic()
        return {
            name: value
            for name, value in capacity.items()
            if (seen := self.written.get(name)) is None
            or seen[0] != value
            or now - seen[1] >= SEEN_REFRESH
        }

    def stage(self, capacity: Mapping[str, int]) -> None:
        self.staged = dict(capacity)

    def committed(self) -> None:
        now = time.monotonic()
        for name, value in self.staged.items():
            self.written[name] = (value, now)
        self.staged = {}


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


def claim_weighed(
    ctx: StoreContext, conn: Connection, order: ClaimOrder, log: CapacityLog
) -> ClaimReceipt:
    """Claim up to ``order.limit`` jobs under the global cap ``order.cap`` and every
    resource's capacity in ``order.resources``, in the open transaction (see the
    module's doc)."""
    view = order.resources
    if view is None:
        raise ValueError("claim_weighed: the order has no resources to weigh")
    t, d = ctx.tables, ctx.dialect
    cap, limit, types, rate_limits = order.cap, order.limit, order.types, order.rate_limits
    log.stage({})  # this transaction's, whatever an earlier one staged
    open_claim(ctx, conn)
    now = ctx.now
    # Where claims lock rows rather than the database, the ready groups are counted
    # before the gate row is locked, as in the plain claim: the counts only shape the
    # plan (how many jobs of each group to read), and every other claim waits while the
    # lock is held. Rate limits narrow the types first, under the lock.
    ready: dict[str, tuple[int, int]] | None = None
    if not rate_limits and d.capabilities.skip_locked:
        ready, _ = d.runnable_counts(conn, t, now, types, cap, costed=True)
        if not ready:
            return NOTHING
    gate = lock_gate(ctx, conn)
    paused = pause_rows.standing(ctx, conn) if gate.pauses else None
    if paused:
        # The counts read before the lock may hold what is paused: read again under it.
        ready = None
        types = pause_rows.claim_types(ctx, conn, paused, types)
        if types is not None and not types:
            return NOTHING
    due = log.due(view.capacity)
    log.stage(due)
    if due:
        record_capacities(ctx, conn, due)
    budget = None
    group_types: dict[str, list[str]] = {}
    if ready is None:
        if rate_limits:
            in_flight = sum(n for n, _ in d.in_flight(conn, t).values())
            budget = open_budget(ctx, conn, rate_limits, types, min(limit, cap - in_flight))
            if budget is not None:
                types = budget.allowed(types or ())
                if not types:
                    return NOTHING
        ready, _ = d.runnable_counts(conn, t, now, types, cap, costed=True)
    if paused:
        ready, group_types = pause_rows.unpaused_counts(
            ctx, conn, paused, ready, types, cap, costed=True
        )
    if budget is None and not (paused and paused.pairs):
        plain = _claim_if_plain(ctx, conn, order, types, ready, view, gate)
        if plain is not None:
            return plain
    weight = {key: max(w, 1) for key, (_, w) in ready.items()}
    most = min(limit, cap)
    # Each group's first jobs, about its weight's part of the claim (the order gives a
    # group about that many starts); a group whose jobs the plan used up, with more to
    # run, is read again in full and the plan made again.
    total = sum(weight.values()) or 1
    want = {
        key: min(n, most, HEADS_MAX, max(2, -(-most * weight[key] // total) + 1))
        for key, (n, _) in ready.items()
    }
    state = d.resource_state(conn, t, now, want, types)
    if paused:
        state = state._replace(
            heads=unpaused_heads(ctx, conn, paused, state.heads, want, group_types)
        )
    held: dict[str, dict[str, int]] = {}
    for group, stored, n, w in state.flight:
        mine = held.setdefault(group, {})
        mine[GLOBAL] = mine.get(GLOBAL, 0) + n
        for name, units in decode(stored).items():
            mine[name] = mine.get(name, 0) + units * n
        weight[group] = max(weight.get(group, 1), w)
    in_flight = sum(h.get(GLOBAL, 0) for h in held.values())
    most = min(limit, cap - in_flight)
    if most <= 0:
        return NOTHING
    known = set(view.capacity)
    # Per stored form (None: the handler's, per type), the cost with the global slot, or
    # None for a resource this worker cannot keep (left to the workers that can).
    costs: dict[tuple[str | None, str], dict[str, int] | None] = {}

    def cost(type_: str, stored: str | None) -> dict[str, int] | None:
        key = (stored, type_ if stored is None else "")
        if key not in costs:
            uses = decode(stored) if stored is not None else view.handler_uses.get(type_, {})
            costs[key] = (
                None if any(name not in known for name in uses) else {GLOBAL: 1, **uses}
            )
        return costs[key]

    # Standing reservations: dropped when their job is no longer ready.
    drop: list[int] = []
    standing: list[Reserved] = []
    next_seq = 1
    for job_id, rseq, held_text, job_state, type_, group, w, is_due in state.reservations:
        next_seq = max(next_seq, rseq + 1)
        if job_state != "ready" or not is_due or (paused and paused.blocks(group, type_)):
            # A reservation of a job that is no longer ready (or is paused) is released.
            drop.append(job_id)
            continue
        held_for = decode(held_text)
        runs_it = types is None or type_ in types
        standing.append(
            Reserved(
                Candidate(job_id, group, {GLOBAL: 1, **held_for}, type_),
                claimable=runs_it and all(name in known for name in held_for),
            )
        )
        weight[group] = max(weight.get(group, 1), int(w or 1))
    history = state.history
    capacity = {GLOBAL: cap, **view.capacity}
    vclock, seq = float(gate.vclock), int(gate.seq)
    run = uniform = None
    if budget is None and not standing:
        run = lone_run(state.heads, cost, ready, held, capacity, most, want)
        if run is None:
            uniform = uniform_plan(
                state.heads, cost, ready, held, capacity, weight, history, limit, vclock
            )
    if run is not None:
        # One group, one cost, and all it may start fits: the plan is its first jobs.
        plan, alone = DrfPlan(picks=tuple(run)), True
    elif uniform is not None:
        plan, states = uniform
        alone = len(states) == 1
    else:
        plan, states = _plan(
            ctx, conn, state, cost, capacity, held, ready, weight, history, standing,
            want, most, limit, types, vclock, paused, group_types,
        )
        alone = len(states) == 1
    picks = list(plan.picks)
    if budget is not None:
        picks = _within_allowance(picks, budget)
    claimed: list[ClaimedJob] = []
    # One group alone (with work, jobs in flight or a reservation) has nothing to share
    # with: as in the plain claim, the fair-share clocks stay as they are (a group that
    # joins later starts level), and its picks never depend on them.
    # The groups whose rows the claim statement itself wrote (the plan's progress).
    written: set[str] | None = None
    if picks:
        request = ClaimRequest(
            order=order, group="", limit=len(picks), types=types, uses=view.handler_text
        )
        ids = [c.id for c in picks]
        recorder = ctx.progress_recorder
        if recorder is not None and budget is None and not alone:
            # The claim also stores the progress the plan expects; corrected below when
            # fewer jobs came back (a row another transaction changed meanwhile).
            expected = progress_of(plan, set(ids), states, capacity, vclock, seq)
            claimed = recorder.claim_ids_recording(
                conn, t, request, ids, now,
                Progress(progress_rows(expected), set(history), expected.vclock, expected.seq),
            ).read()
            written = set(expected.vfinish)
        else:
            claimed = d.claim_ids(conn, t, request, ids, now)
    if budget is not None and claimed:
        budget.spend(conn, claimed)
    got = {c.id for c in claimed}
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
    if not alone and (written is None or len(claimed) != len(picks)) and (claimed or written):
        progress = progress_of(plan, got, states, capacity, vclock, seq)
        rows = progress_rows(progress)
        # A group whose row the claim wrote but that got nothing: as it was before.
        rows += [
            (k, *history.get(k, (vclock, 0)))
            for k in sorted(written or ()) if k not in progress.vfinish
        ]
        d.record_progress(
            conn, t, Progress(rows, set(history) | (written or set()), progress.vclock,
                              progress.seq),
        )
    return ClaimReceipt(len(claimed), lambda: claimed)


def handlers_cost(view: ResourceView, types: Sequence[str] | None) -> dict[str, int] | None:
    """The cost (with the global slot) that the handler of every type in ``types`` gives
    its jobs, or None when the types' costs differ (``types`` None: every type, and a
    type without a handler takes none) or name a resource this worker does not keep."""
    texts = view.handler_text or {}
    stored = (set(texts.values()) | {None}) if types is None else {texts.get(ty) for ty in types}
    if len(stored) != 1:
        return None
    uses = decode(stored.pop())
    if any(name not in view.capacity for name in uses):
        return None
    return {GLOBAL: 1, **uses}


def _claim_if_plain(
    ctx: StoreContext,
    conn: Connection,
    order: ClaimOrder,
    types: Sequence[str] | None,
    ready: Mapping[str, tuple[int, int]],
    view: ResourceView,
    gate: Any,
) -> ClaimReceipt | None:
    """The claim through the plain claim statement when the costs cannot change it, else
    None (the claim then weighs job by job).

    That is so when every job the claim may start costs the same (its handler's: the
    types' handlers agree, and no ready job of the types carries costs of its own), that
    cost is one dominant unit, no reservation stands and each group's dominant share of
    what it holds is its count of jobs in flight (what is free of each resource then
    covers the starts the cap leaves room for). Then the weighed plan is the plain fair
    share's on the counts (:func:`uniform_plan`), and the plain claim statement, which
    writes the handlers' costs into the rows it leases, claims it without reading the
    groups' first jobs. ``types`` are the order's, as pauses left them."""
    cap = order.cap
    cost = handlers_cost(view, types)
    if cost is None:
        return None
    capacity = {GLOBAL: cap, **view.capacity}
    if dominant(cost, capacity) != 1.0:
        return None
    state = ctx.dialect.resource_flight(conn, ctx.tables, sorted(ready), types)
    if state.reserved or state.costed:
        return None
    held: dict[str, dict[str, int]] = {}
    flight: dict[str, tuple[int, int]] = {}
    for group, stored, n, w in state.flight:
        mine = held.setdefault(group, {})
        mine[GLOBAL] = mine.get(GLOBAL, 0) + n
        for name, units in decode(stored).items():
            mine[name] = mine.get(name, 0) + units * n
        count, most = flight.get(group, (0, 0))
        flight[group] = (count + n, max(most, w))
    if any(dominant(holds, capacity) != holds[GLOBAL] for holds in held.values()):
        return None
    # What is free of each resource then covers every start the cap leaves room for: a
    # job to start takes at most capacity / cap of each (one dominant unit), and the jobs
    # in flight of each group hold no more than that on average.
    return claim_shares(
        ctx, conn, order, types, ready, flight, state.history, gate, None,
        uses=view.handler_text,
    )


def _plan(
    ctx: StoreContext,
    conn: Connection,
    state: ResourceState,
    cost: Callable[[str, str | None], dict[str, int] | None],
    capacity: Mapping[str, int],
    held: Mapping[str, Mapping[str, int]],
    ready: Mapping[str, tuple[int, int]],
    weight: Mapping[str, int],
    history: Mapping[str, tuple[float, int]],
    standing: Sequence[Reserved],
    want: dict[str, int],
    most: int,
    limit: int,
    types: Sequence[str] | None,
    vclock: float,
    paused: Standing | None,
    group_types: Mapping[str, Sequence[str]],
) -> tuple[DrfPlan, list[GroupState]]:
    """The plan over every group's first jobs; a group whose first jobs the plan used
    up, with more to run, is read again in full and the plan made again."""
    heads = candidates(state.heads, cost)
    # A reserved job read among a group's heads is planned as a reservation, not as a
    # head: the group's window is wider by the reservations it holds.
    reserved_in: dict[str, int] = {}
    for r in standing:
        reserved_in[r.job.group] = reserved_in.get(r.job.group, 0) + 1
    reserved_ids = {r.job.id for r in standing}
    for again in (True, False):
        states = group_states(heads, held, ready, weight, history, standing)
        plan = plan_starts(capacity, states, vclock, reservations=standing, max_claims=limit)
        taken = plan.claims
        short = {}
        for key, (n, _) in ready.items():
            window = heads_window(n, most, reserved_in.get(key, 0))
            unreserved = sum(1 for c in heads.get(key, ()) if c.id not in reserved_ids)
            if taken.get(key, 0) >= unreserved and want[key] < window:
                short[key] = window
        if not again or not short or len(plan.picks) >= most:
            break
        want.update(short)
        more = ctx.dialect.resource_heads(conn, ctx.tables, ctx.now, short, types)
        if paused:
            more = unpaused_heads(ctx, conn, paused, more, short, group_types)
        heads.update(candidates(more, cost))
    return plan, states


def unpaused_heads(
    ctx: StoreContext,
    conn: Connection,
    paused: Standing,
    heads: list[tuple[Any, ...]],
    want: Mapping[str, int],
    group_types: Mapping[str, Sequence[str]],
) -> list[tuple[Any, ...]]:
    """The heads rows (id, group, type, ...) that no pause holds back; the first jobs
    of a group in which some types are paused are read again, of its other types."""
    out = [row for row in heads if row[1] not in group_types and not paused.blocks(*row[1:3])]
    for group, mine in sorted(group_types.items()):
        if group in want and mine:
            out += ctx.dialect.resource_heads(
                conn, ctx.tables, ctx.now, {group: want[group]}, mine
            )
    return out


def heads_window(runnable: int, most: int, reserved: int) -> int:
    """How many of a group's first jobs a claim of at most ``most`` starts may need:
    a group whose read fell short of this, and was used up, is read again."""
    return min(runnable, most + reserved, HEADS_MAX)


def lone_run(
    rows: Sequence[Any],
    cost: Callable[[str, str | None], dict[str, int] | None],
    ready: Mapping[str, tuple[int, int]],
    held: Mapping[str, Mapping[str, int]],
    capacity: Mapping[str, int],
    most: int,
    want: Mapping[str, int],
) -> list[Candidate] | None:
    """The starts of a group alone, without planning job by job, or None when they need
    the plan.

    With no reservation standing, one group that has work (and nothing in flight of any
    other group) is given its runnable jobs in claim order while they fit: the plan's
    order and quotas only arbitrate between groups. When its first jobs (``rows``, as
    :class:`~readyq.dialects.records.ResourceState` holds them) all cost the same and every
    start it may make fits, those starts are its first ``n`` jobs. Otherwise (costs that
    differ, a job that does not fit and would be reserved, first jobs the starts would
    use up with more to read) the plan decides."""
    if not rows or len(ready) > 1:
        return None
    key = rows[0][1]
    if any(group != key for group in held) or (ready and key not in ready):
        return None
    first: dict[str, int] | None = None
    for _, group, type_, stored, _, _ in rows:
        c = cost(type_, stored)
        if c is None or group != key:
            return None
        if first is None:
            first = c
        elif c is not first and c != first:
            return None
    assert first is not None
    runnable = ready[key][0] if ready else len(rows)
    n = min(most, len(rows), runnable)
    mine = held.get(key, {})
    for name, units in first.items():
        if units > 0 and (capacity.get(name, 0) - mine.get(name, 0)) // units < n:
            return None
    if n == len(rows) and want.get(key, n) < heads_window(runnable, most, 0):
        return None
    ordered = sorted(rows, key=_claim_order)[:n]
    return [Candidate(int(r[0]), key, first, r[2]) for r in ordered]


def uniform_plan(
    rows: Sequence[Any],
    cost: Callable[[str, str | None], dict[str, int] | None],
    ready: Mapping[str, tuple[int, int]],
    held: Mapping[str, Mapping[str, int]],
    capacity: Mapping[str, int],
    weight: Mapping[str, int],
    history: Mapping[str, tuple[float, int]],
    limit: int,
    vclock: float,
) -> tuple[DrfPlan, list[GroupState]] | None:
    """The plan when resources cannot change it, from the counts alone; None when they
    might (the planner then decides job by job).

    That is so when every job read costs the same, one dominant unit (no resource
    fuller, per job, than the global cap: a job's share of each is at most its share of
    the cap), each group's dominant share of what it holds is its count of jobs in
    flight, and what is free of each resource covers the starts the cap leaves room
    for. Then no start can fail to fit, every quota and tag in dominant units is the
    plain fair share's in jobs, and the plan is
    :func:`readyq.planning.fair_share.plan_claims` on the counts: the same starts, the
    same fair-share clocks. (A group whose read first jobs the plan would use up is left
    to the planner, which reads more of them.)"""
    if not rows:
        return None
    first: dict[str, int] | None = None
    heads: dict[str, list[Any]] = {}
    # Most rows share their type and stored costs with the row before: looked up once.
    last: tuple[str, str | None] | None = None
    for row in rows:
        if last is None or last[0] != row[2] or last[1] != row[3]:
            last = (row[2], row[3])
            c = cost(row[2], row[3])
            if c is None:
                return None
            if first is None:
                first = c
            elif c is not first and c != first:
                return None
        mine = heads.get(row[1])
        if mine is None:
            mine = heads[row[1]] = []
        mine.append(row)
    assert first is not None
    if dominant(first, capacity) != 1.0:
        return None
    free = dict(capacity)
    for holds in held.values():
        if dominant(holds, capacity) != holds.get(GLOBAL, 0):
            return None
        for name, units in holds.items():
            free[name] = free.get(name, 0) - units
    starts = min(limit, free[GLOBAL])
    for name, units in first.items():
        if name != GLOBAL and free.get(name, 0) < units * starts:
            return None
    # (The first jobs read are of ready groups: their heads are not needed here.)
    states = group_states({}, held, ready, weight, history, [])
    demands = [
        GroupDemand(g.key, g.weight, g.held.get(GLOBAL, 0), g.runnable, g.vfinish, g.served_seq)
        for g in states
    ]
    counts = plan_claims(capacity[GLOBAL], demands, vclock, max_claims=limit)
    for key, n in counts.claims.items():
        if n > len(heads.get(key, ())):
            return None
    queues = {key: iter(sorted(mine, key=_claim_order)) for key, mine in heads.items()}
    picks = []
    for key in counts.picks:
        row = next(queues[key])
        picks.append(Candidate(int(row[0]), key, first, row[2]))
    plan = DrfPlan(
        picks=tuple(picks), vclock=counts.vclock, vfinish=dict(counts.vfinish),
        last=dict(counts.last),
    )
    return plan, states


def candidates(
    rows: Sequence[Any],
    cost: Callable[[str, str | None], dict[str, int] | None],
) -> dict[str, list[Candidate]]:
    """Rows (id, group, type, stored costs, weight, priority) as each group's
    candidates in claim order, with their costs (a job whose costs name a resource this
    worker does not keep is left out)."""
    heads: dict[str, list[Candidate]] = {}
    # Most rows share their type and stored costs with the row before: looked up once.
    last: tuple[str, str | None] | None = None
    c: dict[str, int] | None = None
    for job_id, group, type_, stored, _, _ in sorted(rows, key=_claim_order):
        if last is None or last[0] != type_ or last[1] != stored:
            last, c = (type_, stored), cost(type_, stored)
        if c is not None:
            mine = heads.get(group)
            if mine is None:
                mine = heads[group] = []
            mine.append(Candidate(int(job_id), group, c, type_))
    return heads


def _claim_order(row: Sequence[Any]) -> tuple[int, int]:
    """Higher priority first, then the oldest id."""
    return (-int(row[5]), int(row[0]))


def group_states(
    heads: Mapping[str, Sequence[Candidate]],
    held: Mapping[str, Mapping[str, int]],
    ready: Mapping[str, tuple[int, int]],
    weight: Mapping[str, int],
    history: Mapping[str, tuple[float, int]],
    standing: Sequence[Reserved],
) -> list[GroupState]:
    """What the planner knows of each group that has work, holds some, or a reservation."""
    keys = sorted(set(ready) | set(heads) | set(held) | {r.job.group for r in standing})
    states = []
    for key in keys:
        hist = history.get(key)
        states.append(
            GroupState(
                key=key,
                weight=weight.get(key, 1),
                held=held.get(key, {}),
                runnable=ready.get(key, (len(heads.get(key, ())), 0))[0],
                heads=heads.get(key, ()),
                vfinish=None if hist is None else hist[0],
                served_seq=0 if hist is None else hist[1],
            )
        )
    return states


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


def _drop_reservations(ctx: StoreContext, conn: Connection, ids: Sequence[int]) -> None:
    if ids:
        r = ctx.tables.reservations
        conn.execute(sa.delete(r).where(r.c.job_id.in_(sorted(set(ids)))))

