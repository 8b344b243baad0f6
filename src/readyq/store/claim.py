"""The claim: lease runnable jobs under the global cap, shared between groups fairly.

One transaction: lock the gate row (claims that decide the cap and the fair-share clock
take turns), count what is in flight across every worker, plan per group
(:mod:`readyq.planning.fair_share`), claim each group's share through the dialect, and
record the fair-share progress. Rate limits hook in twice: after the gate lock, the
claim reads what each limit still allows (types whose limit is spent leave the claim),
and each group's claim goes through :class:`Budget`, which claims a type whose
allowance is smaller than the request separately, up to its allowance, and stamps the
limit's slots after the claim statement. Pauses hook in after the gate lock too: the
gate row counts them, and only a claim that sees a count reads them
(:mod:`readyq.store.pauses`), leaving out the paused groups and types. Every instant is
the database's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from readyq.claim_order import ClaimOrder
from readyq.dialects import ClaimReceipt, ClaimRequest, Progress
from readyq.errors import SchemaNotFound
from readyq.model import ClaimedJob
from readyq.planning.fair_share import (
    GroupDemand,
    account,
    plan_claims,
    planned_progress,
)
from readyq.planning.fair_share import Progress as FairShareProgress
from readyq.rate_limits import RateLimit
from readyq.schema import GATE_ID, Tables
from readyq.store import pauses as pause_rows
from readyq.store.context import StoreContext

# Rate-limit slots are created and removed this many rows per statement.
SLOT_CHUNK = 1000

NOTHING = ClaimReceipt(0, list)


def _receipt(jobs: list[ClaimedJob]) -> ClaimReceipt:
    return ClaimReceipt(len(jobs), lambda: jobs)


def open_claim(ctx: StoreContext, conn: Connection) -> None:
    """What every claim transaction does first: the tests' hook, then the dialect's
    pinning of the index order."""
    if ctx.hooks.on_claim_transaction is not None:
        ctx.hooks.on_claim_transaction(conn)
    ctx.dialect.pin_index_order(conn)


def lock_gate(ctx: StoreContext, conn: Connection) -> Any:
    """Lock the gate row (claims take turns on it) and return its (vclock, seq, pauses)."""
    t, d = ctx.tables, ctx.dialect
    gate = d.execute(
        conn,
        d.cached(
            ("gate", t.gate.name),
            lambda: sa.select(t.gate.c.vclock, t.gate.c.seq, t.gate.c.pauses)
            .where(t.gate.c.id == GATE_ID)
            .with_for_update(),
        ),
    ).first()
    if gate is None:
        raise SchemaNotFound("the readyq gate row is missing: call Queue.create_schema()")
    return gate


def progress_rows(progress: FairShareProgress) -> list[tuple[str, float, int]]:
    """(group, vfinish, served_seq) for each group a claim served."""
    return [(key, v, progress.served_seq[key]) for key, v in progress.vfinish.items()]


def counts_before_gate(ctx: StoreContext, order: ClaimOrder) -> bool:
    """Whether the claim of ``order`` reads the runnable counts before it locks the gate
    row, and ends there when nothing is runnable: on a database whose claims lock rows
    (not the whole database), without rate limits, which narrow the types under the
    lock, and without resources, which :mod:`readyq.store.resource_claim` claims."""
    return (
        not order.rate_limits
        and order.resources is None
        and ctx.dialect.capabilities.skip_locked
    )


def claim_jobs(ctx: StoreContext, conn: Connection, order: ClaimOrder) -> ClaimReceipt:
    """Claim up to ``order.limit`` jobs under the global cap ``order.cap``, in the open
    transaction (the order's resources are left to :mod:`readyq.store.resource_claim`).

    ``order.start`` starts the jobs as they are claimed. ``order.rate_limits`` maps job
    types to the limits on their starts; ``order.types`` must then be given. The
    receipt's rows may be read after the commit, which releases the gate row sooner.
    """
    t, d = ctx.tables, ctx.dialect
    cap, limit, types, rate_limits = order.cap, order.limit, order.types, order.rate_limits
    open_claim(ctx, conn)
    now = ctx.now
    # On a database whose claims lock rows rather than the whole database, the runnable
    # counts are read before the gate row is locked: they only shape the plan, and every
    # other claim waits while the lock is held. (Rate limits may narrow the types after
    # the in-flight count: those claims read step by step.)
    early: dict[str, tuple[int, int]] | None = None
    if counts_before_gate(ctx, order):
        early, _ = d.runnable_counts(conn, t, now, types, cap)
        if not early:
            return NOTHING
    gate = lock_gate(ctx, conn)
    paused = pause_rows.standing(ctx, conn) if gate.pauses else None
    if paused:
        # The counts read before the lock may hold what is paused: read again under it.
        early = None
        types = pause_rows.claim_types(ctx, conn, paused, types)
        if types is not None and not types:
            return NOTHING
    history: dict[str, tuple[float, int]]
    if early is not None:
        ready = early
        flight, history = d.in_flight_and_history(conn, t, sorted(ready))
    else:
        flight = d.in_flight(conn, t)
    total_in_flight = sum(n for n, _ in flight.values())
    if cap - total_in_flight <= 0:
        return NOTHING
    budget = open_budget(ctx, conn, rate_limits, types, min(limit, cap - total_in_flight))
    if budget is not None:
        types = budget.allowed(types or ())
        if not types:
            return NOTHING
    if early is None:
        groups = d.ready_groups(conn, t, types)
        if not paused and len(groups) == 1 and flight.keys() <= set(groups):
            # One group alone needs no count to plan its claim: it takes what is free.
            return claim_alone(ctx, conn, order, groups[0], types, total_in_flight, budget)
        ready, history = d.runnable_counts(
            conn, t, now, types, cap, with_history=True, groups=groups
        )
    group_types = None
    if paused:
        ready, group_types = pause_rows.unpaused_counts(ctx, conn, paused, ready, types, cap)
    if not ready:
        return NOTHING
    return claim_shares(
        ctx, conn, order, types, ready, flight, history, gate, budget, group_types=group_types
    )


def claim_shares(
    ctx: StoreContext,
    conn: Connection,
    order: ClaimOrder,
    types: Sequence[str] | None,
    ready: Mapping[str, tuple[int, int]],
    flight: Mapping[str, tuple[int, int]],
    history: Mapping[str, tuple[float, int]],
    gate: Any,
    budget: Budget | None,
    uses: Mapping[str, str] | None = None,
    group_types: Mapping[str, Sequence[str]] | None = None,
) -> ClaimReceipt:
    """With the gate row locked and the counts read (``ready`` and ``flight``: group ->
    (jobs, largest weight); ``history``: group -> (vfinish, served_seq)), plan each
    group's share of the free slots, claim them and record the fair-share progress.
    ``types`` are the order's, as rate limits and pauses left them.

    ``uses`` (job type -> stored costs) is written into the claimed rows that have none
    (:class:`~readyq.dialects.ClaimRequest`): a claim that weighs resources comes here
    when the costs cannot change its plan (:mod:`readyq.store.resource_claim`).
    ``group_types`` narrows the types of the groups in which some types are paused."""
    t, d = ctx.tables, ctx.dialect
    now = ctx.now
    cap, limit = order.cap, order.limit
    total_in_flight = sum(n for n, _ in flight.values())
    if not ready or cap - total_in_flight <= 0:
        return NOTHING

    def claim(requests: Sequence[ClaimRequest]) -> list[ClaimedJob]:
        if budget is not None:
            return [c for req in requests for c in budget.claim(conn, t, req, now)]
        if group_types:
            # One statement claims groups of the same types: one per set of types.
            alike: dict[tuple[str, ...] | None, list[ClaimRequest]] = {}
            for req in requests:
                key = None if req.types is None else tuple(req.types)
                alike.setdefault(key, []).append(req)
            return [c for same in alike.values() for c in d.claim_jobs(conn, t, same, now)]
        return d.claim_jobs(conn, t, requests, now)

    def types_of(key: str) -> Sequence[str] | None:
        return types if group_types is None else group_types.get(key, types)

    if len(set(ready) | set(flight)) == 1:
        (key,) = ready
        return claim_alone(ctx, conn, order, key, types_of(key), total_in_flight, budget, uses)
    demands = []
    for key in sorted(set(ready) | set(flight)):
        n_ready, w_ready = ready.get(key, (0, 0))
        n_flight, w_flight = flight.get(key, (0, 0))
        hist = history.get(key)
        demands.append(
            GroupDemand(
                key=key,
                weight=max(w_ready, w_flight, 1),
                in_flight=n_flight,
                runnable=n_ready,
                vfinish=None if hist is None else hist[0],
                served_seq=0 if hist is None else hist[1],
            )
        )
    vclock, seq = float(gate.vclock), int(gate.seq)
    plan = plan_claims(cap, demands, vclock, max_claims=limit)
    requests = [
        ClaimRequest(
            order=order, group=key, limit=plan.claims[key], types=types_of(key), uses=uses
        )
        for key in dict.fromkeys(plan.picks)
    ]
    known = set(history)
    expected: FairShareProgress | None = None
    if budget is None:
        expected = planned_progress(plan, seq)
        recorder = ctx.progress_recorder
        if recorder is not None and not group_types:
            # The claim also stores the progress the plan expects; it is corrected below
            # in the rare case that fewer jobs came back (rows locked by another
            # transaction are skipped).
            receipt = recorder.claim_jobs_recording(
                conn, t, requests, now,
                Progress(progress_rows(expected), known, expected.vclock, expected.seq),
            )
            if receipt.claimed == sum(plan.claims.values()):
                # Each group got at most what was planned for it, so every group got
                # all of it: the rows can wait for the commit.
                return receipt
            claimed = receipt.read()
            # Undo what was recorded for the plan, then record what happened: a planned
            # group that got nothing goes back to its stored history (a group that had
            # none, to the clock it would have started from).
            progress = account(plan, Counter(c.group for c in claimed), demands, vclock, seq)
            rows = progress_rows(progress)
            served = set(progress.vfinish)
            for key in expected.vfinish:
                if key not in served:
                    rows.append((key, *history.get(key, (vclock, 0))))
            d.record_progress(
                conn, t,
                Progress(rows, known | set(expected.vfinish), progress.vclock, progress.seq),
            )
            return _receipt(claimed)
    claimed = claim(requests)
    if not claimed:
        return NOTHING
    counts: dict[str, int] = Counter(c.group for c in claimed)
    progress = (
        expected  # every planned job was claimed: the plan's own progress
        if expected is not None and counts == plan.claims
        else account(plan, counts, demands, vclock, seq)
    )
    d.record_progress(
        conn, t, Progress(progress_rows(progress), known, progress.vclock, progress.seq)
    )
    return _receipt(claimed)


def claim_alone(
    ctx: StoreContext,
    conn: Connection,
    order: ClaimOrder,
    key: str,
    types: Sequence[str] | None,
    in_flight: int,
    budget: Budget | None,
    uses: Mapping[str, str] | None = None,
) -> ClaimReceipt:
    """Claim for group ``key`` when no other group has jobs ready or in flight: one
    group alone has nothing to share with, so it takes what the cap leaves free, and the
    fair-share clocks stay as they are (a group that joins later starts level)."""
    limit = min(order.limit, order.cap - in_flight)
    request = ClaimRequest(order=order, group=key, limit=limit, types=types, uses=uses)
    if budget is not None:
        return _receipt(budget.claim(conn, ctx.tables, request, ctx.now))
    return _receipt(ctx.dialect.claim_jobs(conn, ctx.tables, [request], ctx.now))


# -- rate limits ---------------------------------------------------------------------------


class Budget:
    """What the rate limits still allow within one claim transaction.

    A limit's ``<prefix>rate_slots`` rows are a ring of ``limit`` slots, each the
    database-clock instant of one of the latest starts (0 when unused). A start is
    allowed while some slot is at least ``per`` seconds old, and takes the oldest one: no
    window of ``per`` seconds ever holds more than ``limit`` starts.
    """

    def __init__(
        self, ctx: StoreContext, by_type: Mapping[str, RateLimit], left: dict[str, int]
    ) -> None:
        self.ctx = ctx
        self.by_type = by_type
        self.limits = {lim.name: lim for lim in by_type.values()}
        # limit name -> starts still allowed now (counted up to what the claim may take)
        self.left = left

    def allowance(self, type_: str) -> int | None:
        """Starts still allowed now for jobs of ``type_`` (None: no limit covers it)."""
        lim = self.by_type.get(type_)
        return None if lim is None else self.left[lim.name]

    def limit_of(self, type_: str) -> str | None:
        """The name of the limit that covers ``type_``, if any."""
        lim = self.by_type.get(type_)
        return None if lim is None else lim.name

    def allowed(self, types: Sequence[str]) -> list[str]:
        """``types`` without those whose limit is spent."""
        return [
            ty for ty in types if (lim := self.by_type.get(ty)) is None or self.left[lim.name] > 0
        ]

    def claim(
        self,
        conn: Connection,
        t: Tables,
        req: ClaimRequest,
        now: sa.ColumnElement[float],
    ) -> list[ClaimedJob]:
        """Claim one group's request, never past any limit's allowance."""
        assert req.types is not None
        dialect = self.ctx.dialect
        loose: list[str] = []
        tight: dict[str, list[str]] = {}
        for ty in self.allowed(req.types):
            lim = self.by_type.get(ty)
            # A type whose allowance covers the whole request cannot go past it.
            if lim is None or self.left[lim.name] >= req.limit:
                loose.append(ty)
            else:
                tight.setdefault(lim.name, []).append(ty)
        claimed: list[ClaimedJob] = []
        if loose:
            got = dialect.claim_jobs(conn, t, [replace(req, types=loose)], now)
            claimed += self.spend(conn, got)
        for name, types in sorted(tight.items()):
            n = min(req.limit - len(claimed), self.left[name])
            if n > 0:
                got = dialect.claim_jobs(conn, t, [replace(req, types=types, limit=n)], now)
                claimed += self.spend(conn, got)
        return claimed

    def spend(self, conn: Connection, claimed: list[ClaimedJob]) -> list[ClaimedJob]:
        """Record the starts of ``claimed`` in their limits' oldest free slots."""
        spent: dict[str, int] = {}
        for c in claimed:
            lim = self.by_type.get(c.type)
            if lim is not None:
                spent[lim.name] = spent.get(lim.name, 0) + 1
        s = self.ctx.tables.rate_slots
        now = self.ctx.now
        for name, n in sorted(spent.items()):
            lim = self.limits[name]
            free = conn.execute(
                sa.select(s.c.slot)
                .where(s.c.name == name, s.c.started_at <= now - lim.per)
                .order_by(s.c.started_at, s.c.slot)
                .limit(n)
            ).scalars().all()
            if len(free) != n:  # the rows are locked by this transaction: cannot happen
                raise RuntimeError(f"rate limit {name!r}: {n} starts but {len(free)} free slots")
            # Stamped after the claim statement, so never earlier than the jobs' start.
            conn.execute(
                sa.update(s)
                .where(s.c.name == name, s.c.slot.in_(list(free)))
                .values(started_at=now)
            )
            self.left[name] -= n
        return claimed


def open_budget(
    ctx: StoreContext,
    conn: Connection,
    by_type: Mapping[str, RateLimit] | None,
    types: Sequence[str] | None,
    want: int,
) -> Budget | None:
    """Lock and read the limits that cover ``types``; None when none does.

    ``want`` is the most jobs the claim may take: allowances are counted up to it, so
    the cost follows the claim, not the size of the limit.
    """
    if not by_type:
        return None
    if types is None:
        raise ValueError("a claim under rate limits must name its job types")
    used = {lim.name: lim for ty, lim in by_type.items() if ty in types}
    if not used:
        return None
    t = ctx.tables
    rl, s = t.rate_limits, t.rate_slots
    stored = {
        r.name: r
        for r in conn.execute(
            sa.select(rl.c.name, rl.c.capacity, rl.c.period)
            .where(rl.c.name.in_(sorted(used)))
            .order_by(rl.c.name)
            .with_for_update()
        )
    }
    left: dict[str, int] = {}
    for name, lim in sorted(used.items()):
        _store_definition(conn, t, lim, stored.get(name))
        free = (
            sa.select(s.c.slot)
            .where(s.c.name == name, s.c.started_at <= ctx.now - lim.per)
            .limit(want)
            .subquery()
        )
        left[name] = int(conn.execute(sa.select(sa.func.count()).select_from(free)).scalar_one())
    return Budget(ctx, {ty: lim for ty, lim in by_type.items() if lim.name in used}, left)


def _store_definition(
    conn: Connection, t: Tables, lim: RateLimit, row: Any
) -> None:
    """Create the limit and its slots, or bring them in line with ``lim``.

    A smaller limit drops the oldest slots and keeps the latest starts, so the starts
    already made still count against the new limit.
    """
    rl, s = t.rate_limits, t.rate_slots
    if row is None:
        conn.execute(sa.insert(rl).values(name=lim.name, capacity=lim.limit, period=lim.per))
        _add_slots(conn, t, lim.name, 0, lim.limit)
        return
    if row.capacity == lim.limit and row.period == lim.per:
        return
    conn.execute(
        sa.update(rl).where(rl.c.name == lim.name).values(capacity=lim.limit, period=lim.per)
    )
    slots = conn.execute(
        sa.select(s.c.slot).where(s.c.name == lim.name).order_by(s.c.started_at, s.c.slot)
    ).scalars().all()
    if len(slots) < lim.limit:
        _add_slots(conn, t, lim.name, max(slots, default=-1) + 1, lim.limit - len(slots))
    extra = list(slots[: len(slots) - lim.limit])
    for i in range(0, len(extra), SLOT_CHUNK):
        conn.execute(
            sa.delete(s).where(s.c.name == lim.name, s.c.slot.in_(extra[i : i + SLOT_CHUNK]))
        )


def _add_slots(conn: Connection, t: Tables, name: str, first: int, n: int) -> None:
    for i in range(first, first + n, SLOT_CHUNK):
        conn.execute(
            sa.insert(t.rate_slots),
            [
                {"name": name, "slot": k, "started_at": 0.0}
                for k in range(i, min(i + SLOT_CHUNK, first + n))
            ],
        )
