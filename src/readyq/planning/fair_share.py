"""Weighted fair share of a global concurrency cap between groups.

Two mechanisms, both fed with what every worker sees in the database:

* Quotas. The cap is divided between the groups that want slots (in flight plus
  runnable) by weighted max-min water-filling: a group that wants less than its share
  gets what it wants and the rest is shared again. A group may hold at most
  ``ceil(quota)`` slots while others wait, so two backlogged groups weighted 3:1 under a
  cap of 4 hold 3 and 1 slots, whatever their jobs' durations.
* Order. Within the quotas, free slots go one by one to the eligible group with the
  smallest start tag (start-time fair queuing): ``S = max(V, F_g)``; serving it sets
  ``F_g = S + 1/w_g`` and ``V = S``. A group that was idle re-enters at ``V``, so it runs
  at once but cannot claim back time it did not use. Equal tags go to the group served
  least recently, so when there are more groups than slots they rotate and none starves.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GroupDemand:
    """What one group wants now, and its fair-share history."""

    key: str
    weight: int
    in_flight: int
    runnable: int
    vfinish: float | None = None
    served_seq: int = 0


@dataclass(frozen=True)
class Plan:
    """How many jobs to claim per group, and the order the slots were handed out.

    ``vclock``, ``vfinish`` and ``last`` are the fair-share state the plan ends with if
    every planned job is claimed: the clock, each served group's finish tag, and the
    index in ``picks`` of each served group's last pick (see :func:`planned_progress`).
    """

    claims: dict[str, int]
    picks: tuple[str, ...]
    # Derived from the picks: two plans with the same picks are the same plan.
    vclock: float = field(default=0.0, compare=False)
    vfinish: dict[str, float] = field(default_factory=dict, compare=False)
    last: dict[str, int] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Progress:
    """Fair-share state after the claimed jobs are accounted for."""

    vclock: float
    seq: int
    vfinish: dict[str, float] = field(default_factory=dict)
    served_seq: dict[str, int] = field(default_factory=dict)


def quotas(cap: int, demands: Sequence[GroupDemand]) -> dict[str, float]:
    """Weighted max-min share of ``cap`` between groups, each capped by its demand."""
    want = {d.key: float(d.in_flight + d.runnable) for d in demands}
    return water_fill(float(max(cap, 0)), want, {d.key: d.weight for d in demands})


def water_fill(
    total: float, want: Mapping[str, float], weight: Mapping[str, int]
) -> dict[str, float]:
    """Weighted max-min share of ``total`` between keys, each capped by what it wants
    (keys that want nothing get nothing)."""
    left = {k: v for k, v in want.items() if v > 0}
    result: dict[str, float] = {}
    remaining = max(total, 0.0)
    while left:
        total_w = sum(weight[k] for k in left)
        share = {k: remaining * weight[k] / total_w for k in left}
        satisfied = [k for k in left if left[k] <= share[k]]
        if not satisfied:
            result.update(share)
            break
        for k in satisfied:
            result[k] = left[k]
            remaining -= left.pop(k)
    return result


def plan_claims(
    cap: int,
    demands: Sequence[GroupDemand],
    vclock: float,
    *,
    max_claims: int | None = None,
) -> Plan:
    """Decide how many runnable jobs to claim per group under the global ``cap``.

    ``max_claims`` bounds the jobs handed out (a worker's own free capacity); the quotas
    still divide the whole cap.
    """
    in_flight = sum(d.in_flight for d in demands)
    free = cap - in_flight
    if max_claims is not None:
        free = min(free, max_claims)
    if free <= 0:
        return Plan(claims={}, picks=(), vclock=vclock)
    q = quotas(cap, demands)
    limit = {k: max(1, math.ceil(v - 1e-9)) for k, v in q.items() if v > 0}
    # Each slot goes to the eligible group with the smallest (max(clock, tag), seq, key).
    # The clock never goes back, so a group whose tag it has passed stays "level": the
    # level groups wait in one heap ordered by (seq, key), the others in one ordered by
    # (tag, seq, key). A pick is then a heap operation, not a pass over every group.
    # A group that has had its fill never becomes eligible again in this plan.
    room: dict[str, int] = {}
    weight: dict[str, int] = {}
    ahead: list[tuple[float, int, str]] = []
    level: list[tuple[int, str]] = []
    for d in demands:
        n = min(d.runnable, limit.get(d.key, 0) - d.in_flight)
        if n <= 0:
            continue
        room[d.key] = n
        weight[d.key] = d.weight
        tag = vclock if d.vfinish is None else max(vclock, d.vfinish)
        if tag <= vclock:
            level.append((d.served_seq, d.key))
        else:
            ahead.append((tag, d.served_seq, d.key))
    heapq.heapify(ahead)
    heapq.heapify(level)
    claims: dict[str, int] = {}
    picks: list[str] = []
    vfinish: dict[str, float] = {}
    last: dict[str, int] = {}
    clock = vclock
    for order in range(1, free + 1):
        if level:
            _, best = heapq.heappop(level)
            start = clock
        elif ahead:
            start, _, best = heapq.heappop(ahead)
            clock = start
        else:
            break
        while ahead and ahead[0][0] <= clock:
            _, s, k = heapq.heappop(ahead)
            heapq.heappush(level, (s, k))
        claims[best] = claims.get(best, 0) + 1
        picks.append(best)
        tag = vfinish[best] = start + 1.0 / weight[best]
        last[best] = order
        room[best] -= 1
        if room[best] > 0:
            # Served groups queue behind the ones never served in this plan.
            heapq.heappush(ahead, (tag, 1 << 62 | order, best))
    return Plan(claims=claims, picks=tuple(picks), vclock=clock, vfinish=vfinish, last=last)


def planned_progress(plan: Plan, seq: int) -> Progress:
    """The state after every planned job is claimed: what ``account(plan, plan.claims,
    ...)`` returns, without replaying the picks. ``seq`` is the sequence before."""
    return Progress(
        vclock=plan.vclock,
        seq=seq + len(plan.picks),
        vfinish=dict(plan.vfinish),
        served_seq={key: seq + order for key, order in plan.last.items()},
    )


def account(
    plan: Plan,
    claimed: Mapping[str, int],
    demands: Sequence[GroupDemand],
    vclock: float,
    seq: int,
) -> Progress:
    """Replay the plan's picks for the jobs actually claimed and return the new state.

    A claim can get fewer rows than planned (rows locked by another transaction are
    skipped); only what was claimed advances a group's tag.
    """
    by_key = {d.key: d for d in demands}
    used: dict[str, int] = {}
    vfinish: dict[str, float] = {}
    served: dict[str, int] = {}
    clock = vclock
    for key in plan.picks:
        if used.get(key, 0) >= claimed.get(key, 0):
            continue
        used[key] = used.get(key, 0) + 1
        previous = vfinish.get(key, by_key[key].vfinish)
        start = max(clock, previous) if previous is not None else clock
        vfinish[key] = start + 1.0 / by_key[key].weight
        clock = start
        seq += 1
        served[key] = seq
    return Progress(vclock=clock, seq=seq, vfinish=vfinish, served_seq=served)
