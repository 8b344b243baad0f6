"""Fair share as pure functions: quotas, plan, accounting, and simulated runs."""

from __future__ import annotations

import heapq
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from readyq.planning.fair_share import (
    GroupDemand,
    Plan,
    account,
    plan_claims,
    planned_progress,
    quotas,
)


def demand(key: str, weight: int = 1, in_flight: int = 0, runnable: int = 100,
           vfinish: float | None = None, seq: int = 0) -> GroupDemand:
    return GroupDemand(key=key, weight=weight, in_flight=in_flight, runnable=runnable,
                       vfinish=vfinish, served_seq=seq)


def test_quotas_follow_weights_when_everyone_is_backlogged() -> None:
    assert quotas(4, [demand("a", 3), demand("b", 1)]) == {"a": 3.0, "b": 1.0}


def test_quotas_give_unused_share_to_the_others() -> None:
    q = quotas(10, [demand("a", 3, runnable=1), demand("b", 1)])
    assert q == {"a": 1.0, "b": 9.0}


def test_quotas_never_exceed_the_cap_or_the_demand() -> None:
    q = quotas(5, [demand("a", 1, runnable=2), demand("b", 1, runnable=2)])
    assert q == {"a": 2.0, "b": 2.0}


def test_plan_counts_what_groups_already_have_in_flight() -> None:
    plan = plan_claims(4, [demand("a", 3, in_flight=3), demand("b", 1)], 0.0)
    assert plan.claims == {"b": 1}


def test_plan_fills_free_slots_with_a_work_conserving_split() -> None:
    plan = plan_claims(10, [demand("a", 3, runnable=1), demand("b", 1)], 0.0)
    assert plan.claims == {"a": 1, "b": 9}


def test_plan_is_empty_when_the_cap_is_reached() -> None:
    assert plan_claims(2, [demand("a", in_flight=2)], 0.0) == Plan(claims={}, picks=())


def test_plan_respects_max_claims() -> None:
    plan = plan_claims(100, [demand("a"), demand("b")], 0.0, max_claims=3)
    assert sum(plan.claims.values()) == 3


def test_more_groups_than_slots_rotate_by_least_recently_served() -> None:
    groups = [demand(f"g{i}") for i in range(6)]
    served: list[str] = []
    vclock, seq = 0.0, 0
    hist: dict[str, tuple[float | None, int]] = {g.key: (None, 0) for g in groups}
    for _ in range(6):
        ds = [demand(k, vfinish=v, seq=s) for k, (v, s) in hist.items()]
        plan = plan_claims(2, ds, vclock)
        progress = account(plan, plan.claims, ds, vclock, seq)
        vclock, seq = progress.vclock, progress.seq
        for k, v in progress.vfinish.items():
            hist[k] = (v, progress.served_seq[k])
        served.extend(plan.picks)
    # 12 slots over 6 groups: every group served twice, none starved.
    assert sorted(served) == sorted([f"g{i}" for i in range(6)] * 2)


@given(
    groups=st.lists(
        st.tuples(
            st.integers(1, 5),  # weight
            st.integers(0, 6),  # in flight
            st.integers(0, 30),  # runnable
            st.one_of(st.none(), st.floats(0, 20, allow_nan=False)),  # stored finish tag
            st.integers(0, 50),  # served sequence
        ),
        min_size=1,
        max_size=6,
    ),
    cap=st.integers(1, 40),
    limit=st.integers(1, 40),
    vclock=st.floats(0, 20, allow_nan=False),
    seq=st.integers(0, 1000),
)
def test_the_plans_own_progress_is_what_accounting_for_every_planned_job_gives(
    groups: list[tuple[int, int, int, float | None, int]],
    cap: int,
    limit: int,
    vclock: float,
    seq: int,
) -> None:
    demands = [
        demand(f"g{i}", w, in_flight=f, runnable=r, vfinish=v, seq=s)
        for i, (w, f, r, v, s) in enumerate(groups)
    ]
    plan = plan_claims(cap, demands, vclock, max_claims=limit)
    assert planned_progress(plan, seq) == account(plan, plan.claims, demands, vclock, seq)


def test_account_only_advances_groups_for_jobs_actually_claimed() -> None:
    ds = [demand("a"), demand("b")]
    plan = plan_claims(4, ds, 0.0)
    progress = account(plan, {"a": plan.claims["a"], "b": 0}, ds, 0.0, 0)
    assert "b" not in progress.vfinish
    assert progress.vfinish["a"] == pytest.approx(plan.claims["a"] * 1.0)


def simulate(weights: dict[str, int], cap: int, duration: dict[str, float],
             jobs: dict[str, int], horizon: float) -> tuple[dict[str, float], dict[str, float]]:
    """Event-driven run of the planner; returns slot-time per group and first start."""
    backlog = dict(jobs)
    running: list[tuple[float, int, str]] = []
    counter = itertools.count()
    hist: dict[str, tuple[float | None, int]] = {k: (None, 0) for k in weights}
    vclock, seq, now = 0.0, 0, 0.0
    slot_time = dict.fromkeys(weights, 0.0)
    first: dict[str, float] = {}
    while now < horizon and (running or any(backlog.values())):
        flight: dict[str, int] = {}
        for _, _, g in running:
            flight[g] = flight.get(g, 0) + 1
        ds = [demand(k, weights[k], flight.get(k, 0), backlog[k], *hist[k]) for k in weights]
        plan = plan_claims(cap, ds, vclock)
        progress = account(plan, plan.claims, ds, vclock, seq)
        vclock, seq = progress.vclock, progress.seq
        for k, v in progress.vfinish.items():
            hist[k] = (v, progress.served_seq[k])
        for g, n in plan.claims.items():
            backlog[g] -= n
            first.setdefault(g, now)
            for _ in range(n):
                end = now + duration[g]
                heapq.heappush(running, (end, next(counter), g))
                slot_time[g] += min(end, horizon) - now
        if running:
            now = heapq.heappop(running)[0]
    return slot_time, first


def test_simulated_three_to_one_gets_75_25_slot_time_even_with_unequal_durations() -> None:
    slot, _ = simulate({"a": 3, "b": 1}, 4, {"a": 1.0, "b": 7.0},
                       {"a": 10_000, "b": 10_000}, horizon=500.0)
    share = slot["a"] / (slot["a"] + slot["b"])
    assert share == pytest.approx(0.75, abs=0.02)


def test_simulated_light_group_among_ten_heavy_groups_starts_at_once_and_keeps_its_share() -> None:
    weights = {f"heavy{i}": 10 for i in range(10)} | {"light": 1}
    durations = dict.fromkeys(weights, 1.0)
    slot, first = simulate(weights, 4, durations, dict.fromkeys(weights, 10_000), horizon=2000.0)
    assert first["light"] <= 3.0
    share = slot["light"] / sum(slot.values())
    assert share == pytest.approx(1 / 101, rel=0.25)


def reference_plan(cap: int, demands: list[GroupDemand], vclock: float,
                   max_claims: int | None) -> Plan:
    """The plan's rule written the slow, obvious way: every slot scans every group."""
    free = cap - sum(d.in_flight for d in demands)
    if max_claims is not None:
        free = min(free, max_claims)
    if free <= 0:
        return Plan(claims={}, picks=())
    limit = {k: max(1, -int(-(v - 1e-9) // 1)) for k, v in quotas(cap, demands).items()
             if v > 0}
    weight = {d.key: d.weight for d in demands}
    tag = {d.key: vclock if d.vfinish is None else max(vclock, d.vfinish) for d in demands}
    seq = {d.key: d.served_seq for d in demands}
    claims: dict[str, int] = {}
    picks: list[str] = []
    clock = vclock
    for order in range(1, free + 1):
        eligible = [d.key for d in demands if d.runnable > claims.get(d.key, 0)
                    and d.in_flight + claims.get(d.key, 0) < limit.get(d.key, 0)]
        if not eligible:
            break
        best = min(eligible, key=lambda k: (max(clock, tag[k]), seq[k], k))
        start = max(clock, tag[best])
        tag[best] = start + 1.0 / weight[best]
        clock = start
        seq[best] = 1 << 62 | order
        claims[best] = claims.get(best, 0) + 1
        picks.append(best)
    return Plan(claims=claims, picks=tuple(picks))


try:
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - hypothesis is in the test extra
    pass
else:
    group_demand = st.builds(
        GroupDemand,
        key=st.sampled_from("abcdefgh"),
        weight=st.integers(1, 5),
        in_flight=st.integers(0, 6),
        runnable=st.integers(0, 30),
        vfinish=st.one_of(st.none(), st.sampled_from([0.0, 0.5, 1.0, 1.25, 2.0, 3.5])),
        served_seq=st.integers(0, 4),
    )

    @settings(max_examples=400, deadline=None)
    @given(
        cap=st.integers(0, 40),
        demands=st.lists(group_demand, max_size=8, unique_by=lambda d: d.key),
        vclock=st.sampled_from([0.0, 0.5, 1.0, 2.0]),
        max_claims=st.one_of(st.none(), st.integers(0, 40)),
    )
    def test_plan_picks_exactly_what_the_one_by_one_rule_picks(
        cap: int, demands: list[GroupDemand], vclock: float, max_claims: int | None
    ) -> None:
        got = plan_claims(cap, demands, vclock, max_claims=max_claims)
        assert got == reference_plan(cap, demands, vclock, max_claims)
