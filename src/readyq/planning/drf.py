"""Weighted Dominant Resource Fairness over named resources, with reservations.

:mod:`readyq.planning.fair_share` shares one capacity, the global cap, in which every
job costs 1. Here a job costs a vector: 1 of the global cap (:data:`GLOBAL`) and its
``uses`` of named resources. Costs are measured in *dominant units*: a vector's largest
share of any resource's capacity, scaled by the global cap, so that a job that takes
one slot of the global cap and nothing else costs exactly 1. With that one measure the
two mechanisms of fair share carry over unchanged:

* Quotas: the global cap, in dominant units, is divided between the groups by weighted
  max-min water-filling of what each group wants (in flight plus its runnable jobs). A
  group may start another job while what it holds, in dominant units, is below its
  quota (a group that holds nothing always may).
* Order: the next start goes to the eligible group with the smallest start tag
  ``S = max(V, F_g)``; the start sets ``F_g = S + d/w_g`` where ``d`` is the job's
  dominant cost. Over time each group's starts weigh, in dominant shares, in
  proportion to its weight.

With the global cap as the only resource every cost is 1 and this is
:func:`readyq.planning.fair_share.plan_claims` step for step (a test checks it).

Reservations. When the group picked next has a first job that does not fit in what is
free, that job is *reserved*: the free units of every resource it needs (the global
cap included) are held for it, up to what it needs, and it stays reserved across
claims until it starts. Jobs behind it, of any group, may only take units it does not
need, so it waits no longer than the jobs holding its units when it was reserved take to
finish (and than a capacity shrink lasts). Reservations are served oldest first. A job
that needs more than a resource's whole capacity as it is now is neither reserved nor
held for: it waits for the capacity to grow, and its group's later jobs wait behind it.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from readyq.planning.fair_share import Progress, water_fill

# The global concurrency cap, as a resource name no user resource can have.
GLOBAL = ""


class Candidate(NamedTuple):
    """A runnable job the planner may start: its id, group, cost (with 1 of
    :data:`GLOBAL`) and type. (A tuple: a claim makes one per job it reads.)"""

    id: int
    group: str
    cost: Mapping[str, int]
    type: str = ""


@dataclass(frozen=True)
class GroupState:
    """One group: weight, what it holds in flight (per resource, :data:`GLOBAL`
    included), its runnable jobs counted up to the global cap, the first of them in
    claim order, and its fair-share history."""

    key: str
    weight: int
    held: Mapping[str, int]
    runnable: int
    heads: Sequence[Candidate] = ()
    vfinish: float | None = None
    served_seq: int = 0


@dataclass(frozen=True)
class Reserved:
    """A standing reservation, oldest first; ``claimable``: this claimer may start the
    job (it runs its type and knows its resources)."""

    job: Candidate
    claimable: bool = True


@dataclass(frozen=True)
class DrfPlan:
    """The jobs to start, in order, and the reservations to add.

    ``served_reservations`` are the reserved jobs among ``picks`` (their rows are
    dropped when claimed). ``vclock``, ``vfinish`` and ``last`` are the fair-share state
    once every pick is claimed, as in :class:`readyq.planning.fair_share.Plan`.
    """

    picks: tuple[Candidate, ...]
    reserve: tuple[Candidate, ...] = ()
    served_reservations: frozenset[int] = frozenset()
    vclock: float = 0.0
    vfinish: dict[str, float] = field(default_factory=dict)
    last: dict[str, int] = field(default_factory=dict)

    @property
    def claims(self) -> dict[str, int]:
        """Jobs to start per group."""
        out: dict[str, int] = {}
        for c in self.picks:
            out[c.group] = out.get(c.group, 0) + 1
        return out


def dominant(use: Mapping[str, int], capacity: Mapping[str, int]) -> float:
    """``use``'s largest share of any resource's capacity, in units of the global cap.

    A resource whose capacity is 0 (or unknown) counts as full for any use of it."""
    scale = max(capacity.get(GLOBAL, 0), 1)
    best = 0.0
    for name, units in use.items():
        if units <= 0:
            continue
        cap = capacity.get(name, 0)
        # The product first: a use of the global cap alone comes out exact.
        best = max(best, float(scale) if cap <= 0 else units * scale / cap)
    return best


def _possible(cost: Mapping[str, int], capacity: Mapping[str, int]) -> bool:
    """Whether ``cost`` fits in the whole capacity, were nothing else in flight."""
    return all(units <= capacity.get(name, 0) for name, units in cost.items())


def _take(cost: Mapping[str, int], free: dict[str, int], *, at_most: bool = False) -> None:
    """Take ``cost`` from ``free`` (with ``at_most``, only what is free of it)."""
    for name, units in cost.items():
        have = free.get(name, 0)
        free[name] = have - (min(units, max(have, 0)) if at_most else units)


def plan_starts(
    capacity: Mapping[str, int],
    groups: Sequence[GroupState],
    vclock: float,
    *,
    reservations: Sequence[Reserved] = (),
    max_claims: int | None = None,
) -> DrfPlan:
    """Decide which runnable jobs to start now, and which to reserve.

    ``capacity`` holds every resource's capacity now, :data:`GLOBAL` included; what is
    in use is the sum of the groups' ``held``. ``max_claims`` bounds the starts (the
    claimer's free slots); the quotas still divide the whole cap.
    """
    free: dict[str, int] = dict(capacity)
    for g in groups:
        for name, units in g.held.items():
            free[name] = free.get(name, 0) - units
    budget = max_claims if max_claims is not None else math.inf
    by_key = {g.key: g for g in groups}
    held = {g.key: dict(g.held) for g in groups}
    picks: list[Candidate] = []
    served: set[int] = set()
    vfinish: dict[str, float] = {}
    last: dict[str, int] = {}
    clock = vclock
    # Jobs of one kind share one cost mapping: its items and dominant cost are worked
    # out once per plan.
    known_costs: dict[int, tuple[tuple[tuple[str, int], ...], float]] = {}

    def kind_of(job: Candidate) -> tuple[tuple[tuple[str, int], ...], float]:
        found = known_costs.get(id(job.cost))
        if found is None:
            found = known_costs[id(job.cost)] = (
                tuple(job.cost.items()), dominant(job.cost, capacity)
            )
        return found

    def cost_of(job: Candidate) -> float:
        return kind_of(job)[1]

    def fits(items: tuple[tuple[str, int], ...]) -> bool:
        # A loop, not all() over a generator: this runs once per job planned.
        for name, units in items:  # noqa: SIM110
            if units > free.get(name, 0):
                return False
        return True

    # Each group's dominant share of what it holds, kept up to date as jobs are served:
    # what a group holds only grows here, so only the resources a job takes can raise it.
    dom_held = {g.key: dominant(g.held, capacity) for g in groups}
    scale = max(capacity.get(GLOBAL, 0), 1)

    def serve(job: Candidate, items: tuple[tuple[str, int], ...]) -> None:
        picks.append(job)
        group = job.group
        mine = held.get(group)
        if mine is None:
            mine = held[group] = {}
        best = dom_held.get(group, 0.0)
        for name, units in items:
            free[name] = free.get(name, 0) - units
            total = mine[name] = mine.get(name, 0) + units
            if units > 0:
                cap = capacity.get(name, 0)
                share = float(scale) if cap <= 0 else total * scale / cap
                if share > best:
                    best = share
        dom_held[group] = best
        last[group] = len(picks)

    # Standing reservations first, oldest first: each starts if it fits, else keeps
    # (or grows) its hold on the free units it needs.
    reserved_ids = {r.job.id for r in reservations}
    for r in reservations:
        job = r.job
        items = kind_of(job)[0]
        if fits(items) and r.claimable and len(picks) < budget:
            owner = by_key.get(job.group)
            w = owner.weight if owner is not None else 1
            before = vfinish.get(job.group, owner.vfinish if owner is not None else None)
            start = clock if before is None else max(clock, before)
            vfinish[job.group] = start + cost_of(job) / w
            serve(job, items)
            served.add(job.id)
        elif _possible(job.cost, capacity):
            _take(job.cost, free, at_most=True)
        # A job larger than a capacity as it is now holds nothing until the capacity
        # grows: holding units for it would stop every other job and gain it nothing.

    # Quotas in dominant units. What a group wants of each resource: what it holds,
    # plus its runnable jobs at the mean cost of the first of them.
    weight = {g.key: g.weight for g in groups}
    want: dict[str, float] = {}
    unreserved: dict[str, list[Candidate]] = {}
    for g in groups:
        vector: dict[str, float] = {k: float(v) for k, v in held[g.key].items()}
        heads = unreserved[g.key] = (
            [c for c in g.heads if c.id not in reserved_ids] if reserved_ids else list(g.heads)
        )
        if heads and g.runnable:
            per = g.runnable / len(heads)
            # Jobs of one kind share one cost mapping: summed once per kind.
            kinds: dict[int, list[Any]] = {}
            for c in heads:
                kind = kinds.get(id(c.cost))
                if kind is None:
                    kinds[id(c.cost)] = [c.cost, 1]
                else:
                    kind[1] += 1
            for cost, count in kinds.values():
                for name, units in cost.items():
                    vector[name] = vector.get(name, 0.0) + units * count * per
        want[g.key] = dominant({k: math.ceil(v - 1e-9) for k, v in vector.items()}, capacity)
    quota = water_fill(float(capacity.get(GLOBAL, 0)), want, weight)

    def eligible(key: str) -> bool:
        q = quota.get(key, 0.0)
        if q <= 0:
            return False
        d = dom_held.get(key, 0.0)
        return d == 0 or d < q - 1e-9

    # The order, as in fair_share.plan_claims: groups whose tag the clock has passed
    # wait "level" in one heap by (seq, key), the others by (tag, seq, key).
    queue: dict[str, deque[Candidate]] = {}
    ahead: list[tuple[float, int, str]] = []
    level: list[tuple[int, str]] = []
    # The tags of groups with jobs to run that their quota holds back: a group that
    # does not fit is only next in fair-share order (and reserved) if none of these is
    # ahead of it; otherwise it was offered what others may not take, and waits.
    held_back: list[float] = []
    for g in groups:
        heads = unreserved[g.key][: max(g.runnable, 0)]
        if not heads:
            continue
        queue[g.key] = deque(heads)
        before = vfinish.get(g.key, g.vfinish)
        tag = vclock if before is None else max(vclock, before)
        if not eligible(g.key):
            held_back.append(tag)
            continue
        if tag <= vclock:
            level.append((g.served_seq, g.key))
        else:
            ahead.append((tag, g.served_seq, g.key))
    heapq.heapify(ahead)
    heapq.heapify(level)
    reserve: list[Candidate] = []
    # A group holds one reservation at a time: its later jobs never queue up holds.
    waiting = {r.job.group for r in reservations if r.job.id not in served}
    order = len(picks)
    while len(picks) < budget and free.get(GLOBAL, 0) > 0:
        if level:
            _, best = heapq.heappop(level)
            start = clock
        elif ahead:
            start, _, best = heapq.heappop(ahead)
        else:
            break
        jobs = queue[best]
        job = jobs[0]
        items, d = kind_of(job)
        if not fits(items):
            # It does not fit. Next in fair-share order, it holds what it needs of what
            # is free; either way its group is left out of this claim.
            if (
                best not in waiting
                and (not held_back or start <= min(held_back))
                and _possible(job.cost, capacity)
            ):
                _take(job.cost, free, at_most=True)
                reserve.append(job)
            continue
        clock = start
        while ahead and ahead[0][0] <= clock:
            _, s, k = heapq.heappop(ahead)
            heapq.heappush(level, (s, k))
        # The group is served here while it stays first in order (no group level with
        # the clock, none ahead at or below its new tag) and its next job fits: the same
        # steps as a push and a pop, without the heap, and with its state kept local.
        w, q = weight[best], quota.get(best, 0.0)
        mine = held.get(best)
        if mine is None:
            mine = held[best] = {}
        dom = dom_held.get(best, 0.0)
        while True:
            jobs.popleft()
            picks.append(job)
            for name, units in items:
                free[name] = free.get(name, 0) - units
                total = mine[name] = mine.get(name, 0) + units
                if units > 0:
                    cap = capacity.get(name, 0)
                    share = float(scale) if cap <= 0 else total * scale / cap
                    if share > dom:
                        dom = share
            order += 1
            tag = start + d / w
            if not jobs:
                break
            if q <= 0 or not (dom == 0 or dom < q - 1e-9):
                held_back.append(max(clock, tag))
                break
            job = jobs[0]
            items, d = kind_of(job)
            if (
                level
                or (ahead and ahead[0][0] <= tag)
                or len(picks) >= budget
                or free.get(GLOBAL, 0) <= 0
                or not fits(items)
            ):
                # Served groups queue behind the ones never served in this plan.
                heapq.heappush(ahead, (tag, 1 << 62 | order, best))
                break
            start = clock = tag
        vfinish[best] = tag
        dom_held[best] = dom
        last[best] = len(picks)
    if len(capacity) > 1:
        # Work conservation: in dominant units a group may reach its quota on one
        # resource while others sit idle. What is still free goes, in tag order, to any
        # group whose next job fits, its quota notwithstanding (never to a job that does
        # not fit, so no reservation is made or bypassed here). With the global cap as
        # the only resource nothing is ever stranded so, as in fair_share, this never runs.
        while len(picks) < budget and free.get(GLOBAL, 0) > 0:
            fitting = [
                (max(clock, vfinish.get(k, by_key[k].vfinish) or clock), by_key[k].served_seq, k)
                for k, jobs in queue.items()
                if jobs and fits(kind_of(jobs[0])[0])
            ]
            if not fitting:
                break
            start, _, best = min(fitting)
            job = queue[best].popleft()
            serve(job, kind_of(job)[0])
            vfinish[best] = start + cost_of(job) / weight[best]
    return DrfPlan(
        picks=tuple(picks),
        reserve=tuple(reserve),
        served_reservations=frozenset(served),
        vclock=clock,
        vfinish=vfinish,
        last=last,
    )


def progress_of(
    plan: DrfPlan,
    claimed: set[int],
    groups: Sequence[GroupState],
    capacity: Mapping[str, int],
    vclock: float,
    seq: int,
) -> Progress:
    """The fair-share state once the ``claimed`` ids among the plan's picks started.

    When every pick was claimed this is the plan's own state; otherwise the picks are
    replayed without the missing ones (a row another transaction had changed)."""
    if len(claimed) == len(plan.picks) and all(c.id in claimed for c in plan.picks):
        return Progress(
            vclock=plan.vclock,
            seq=seq + len(plan.picks),
            vfinish=dict(plan.vfinish),
            served_seq={key: seq + n for key, n in plan.last.items()},
        )
    by_key = {g.key: g for g in groups}
    vfinish: dict[str, float] = {}
    served: dict[str, int] = {}
    clock = vclock
    for c in plan.picks:
        if c.id not in claimed:
            continue
        g = by_key.get(c.group)
        before = vfinish.get(c.group, g.vfinish if g is not None else None)
        start = clock if before is None else max(clock, before)
        vfinish[c.group] = start + dominant(c.cost, capacity) / (g.weight if g else 1)
        if c.id not in plan.served_reservations:
            clock = start
        seq += 1
        served[c.group] = seq
    return Progress(vclock=clock, seq=seq, vfinish=vfinish, served_seq=served)
