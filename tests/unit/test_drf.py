"""The DRF planner on its own: today's fair share when the global cap is the only
resource, the 3:1 split of GPUs between weighted groups of different costs, and the
reservation bound, in simulations driven by the planner and its progress alone."""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

import pytest

from readyq.planning.drf import (
    GLOBAL,
    Candidate,
    GroupState,
    Reserved,
    dominant,
    plan_starts,
    progress_of,
    water_fill,
)
from readyq.planning.fair_share import GroupDemand, plan_claims


def test_with_the_global_cap_alone_the_plan_is_todays_step_for_step() -> None:
    rnd = random.Random(20261202)
    for _ in range(5000):
        cap = rnd.randint(0, 12)
        vclock = rnd.choice([0.0, 1.5, 3.0])
        demands, groups, next_id = [], [], 0
        for i in range(rnd.randint(1, 5)):
            key, weight = f"g{i}", rnd.randint(1, 4)
            in_flight, runnable = rnd.randint(0, 4), rnd.randint(0, cap)
            vfinish = rnd.choice([None, vclock - 1, vclock, vclock + rnd.random() * 3])
            seq = rnd.randint(0, 5)
            demands.append(GroupDemand(key, weight, in_flight, runnable, vfinish, seq))
            heads = [Candidate(next_id + k, key, {GLOBAL: 1}) for k in range(runnable)]
            next_id += runnable
            groups.append(GroupState(key, weight, {GLOBAL: in_flight}, runnable, heads,
                                     vfinish, seq))
        most = rnd.choice([None, 1, 2, 5])
        today = plan_claims(cap, demands, vclock, max_claims=most)
        drf = plan_starts({GLOBAL: cap}, groups, vclock, max_claims=most)
        assert tuple(c.group for c in drf.picks) == today.picks
        assert (drf.vclock, drf.vfinish, drf.last) == (today.vclock, today.vfinish, today.last)
        assert drf.reserve == ()


def test_dominant_units_and_water_filling() -> None:
    cap = {GLOBAL: 8, "gpu": 4}
    assert dominant({GLOBAL: 1}, cap) == 1.0
    assert dominant({GLOBAL: 1, "gpu": 2}, cap) == 4.0  # half the GPUs: half the cap
    assert dominant({GLOBAL: 1, "tpu": 1}, cap) == 8.0  # no capacity: full
    assert water_fill(8.0, {"a": 100.0, "b": 100.0}, {"a": 3, "b": 1}) == {"a": 6.0, "b": 2.0}
    assert water_fill(8.0, {"a": 1.0, "b": 100.0}, {"a": 3, "b": 1}) == {"a": 1.0, "b": 7.0}


@dataclass
class Sim:
    """Backlogged groups served by the planner as jobs finish, in simulated time."""

    capacity: dict[str, int]
    costs: dict[str, dict[str, int]]  # group -> cost of each of its jobs
    weights: dict[str, int]
    durations: tuple[float, float] = (1.0, 1.0)
    seed: int = 1
    held: dict[str, dict[str, int]] = field(default_factory=dict)
    usage: dict[str, float] = field(default_factory=dict)  # group -> GPU-time
    waits: list[tuple[float, int]] = field(default_factory=list)  # (wait, holds ahead)

    def run(self, until: float, resource: str = "gpu") -> None:
        rnd = random.Random(self.seed)
        t, vclock, seq = 0.0, 0.0, 0
        vfinish: dict[str, float | None] = {g: None for g in self.costs}
        served: dict[str, int] = {g: 0 for g in self.costs}
        nxt = {g: 0 for g in self.costs}
        self.held = {g: {} for g in self.costs}
        self.usage = {g: 0.0 for g in self.costs}
        running: list[tuple[float, int, str, dict[str, int]]] = []
        reserved: list[tuple[Candidate, float, int]] = []  # (job, since, holds ahead)
        groups_order = sorted(self.costs)
        gcap = self.capacity[GLOBAL]

        def job(g: str, k: int) -> Candidate:
            return Candidate(k * len(groups_order) + groups_order.index(g), g,
                             {GLOBAL: 1, **self.costs[g]})

        while t < until:
            groups = [
                GroupState(g, self.weights[g], self.held[g], gcap,
                           [job(g, nxt[g] + i) for i in range(gcap)], vfinish[g], served[g])
                for g in groups_order
            ]
            plan = plan_starts(self.capacity, groups, vclock,
                               reservations=[Reserved(r[0]) for r in reserved])
            for c in plan.picks:
                if c.id in plan.served_reservations:
                    since, ahead = next((s, a) for r, s, a in reserved if r.id == c.id)
                    reserved = [r for r in reserved if r[0].id != c.id]
                    self.waits.append((t - since, ahead))
                nxt[c.group] += 1
                for name, units in c.cost.items():
                    self.held[c.group][name] = self.held[c.group].get(name, 0) + units
                heapq.heappush(running, (t + rnd.uniform(*self.durations), c.id, c.group,
                                         dict(c.cost)))
            for c in plan.reserve:
                reserved.append((c, t, len(reserved)))
            progress = progress_of(plan, {c.id for c in plan.picks}, groups, self.capacity,
                                   vclock, seq)
            vclock, seq = progress.vclock, progress.seq
            vfinish.update(progress.vfinish)
            served.update(progress.served_seq)
            for name, cap in self.capacity.items():
                assert sum(h.get(name, 0) for h in self.held.values()) <= cap
            end, _, g, cost = heapq.heappop(running)
            for k in self.costs:
                self.usage[k] += self.held[k].get(resource, 0) * (end - t)
            t = end
            for name, units in cost.items():
                self.held[g][name] -= units

    def share(self, group: str) -> float:
        return self.usage[group] / sum(self.usage.values())


@pytest.mark.parametrize("durations", [(1.0, 1.0), (0.5, 1.5)])
@pytest.mark.parametrize("costs", [(1, 2), (2, 1), (1, 4), (1, 1)])
def test_weighted_groups_of_different_costs_split_the_gpus_by_weight(
    durations: tuple[float, float], costs: tuple[int, int]
) -> None:
    sim = Sim({GLOBAL: 8, "gpu": 4}, {"a": {"gpu": costs[0]}, "b": {"gpu": costs[1]}},
              {"a": 3, "b": 1}, durations)
    sim.run(2000.0)
    assert sim.share("a") == pytest.approx(0.75, abs=0.02)


def test_a_big_job_waits_no_longer_than_the_jobs_holding_its_units() -> None:
    # Four GPUs; one group's jobs take all four, the others one each and keep them busy.
    dmax = 1.5
    sim = Sim({GLOBAL: 8, "gpu": 4},
              {"big": {"gpu": 4}, "s1": {"gpu": 1}, "s2": {"gpu": 1}},
              {"big": 1, "s1": 1, "s2": 1}, (0.5, dmax), seed=7)
    sim.run(3000.0)
    assert sim.waits, "no job was ever reserved"
    assert any(ahead == 0 for _, ahead in sim.waits)
    for wait, ahead in sim.waits:
        # The jobs holding its units finish within dmax, and each reservation ahead of it
        # holds its own units for at most that long again.
        assert wait <= (ahead + 1) * dmax + 1e-9
    assert sim.usage["big"] > 0


def test_a_shrunken_capacity_starts_nothing_that_uses_it_until_use_is_under_it() -> None:
    gpu = [Candidate(i, "a", {GLOBAL: 1, "gpu": 1}) for i in range(3)]
    cpu = [Candidate(10 + i, "b", {GLOBAL: 1}) for i in range(3)]
    groups = [GroupState("a", 1, {GLOBAL: 3, "gpu": 3}, 3, gpu),
              GroupState("b", 1, {}, 3, cpu)]
    plan = plan_starts({GLOBAL: 10, "gpu": 2}, groups, 0.0)
    assert plan.picks and all("gpu" not in c.cost for c in plan.picks)
    assert all(c.cost.get("gpu", 0) == 0 for c in plan.picks)


def test_free_units_a_quota_leaves_idle_go_to_a_job_that_fits() -> None:
    # "a" alone holds every GPU: in dominant units it is at its whole quota, yet its jobs
    # that take no GPU still start on the free slots of the global cap.
    heads = [Candidate(1, "a", {GLOBAL: 1, "gpu": 1}), Candidate(2, "a", {GLOBAL: 1})]
    groups = [GroupState("a", 1, {GLOBAL: 2, "gpu": 2}, 2, heads)]
    plan = plan_starts({GLOBAL: 4, "gpu": 2}, groups, 0.0)
    # Its first job does not fit: nothing behind it in its group jumps it (and, held back
    # by its quota rather than next in order, it reserves nothing).
    assert plan.picks == () and plan.reserve == ()
    free = [Candidate(2, "a", {GLOBAL: 1}), Candidate(1, "a", {GLOBAL: 1, "gpu": 1})]
    plan = plan_starts({GLOBAL: 4, "gpu": 2}, [GroupState("a", 1, {GLOBAL: 2, "gpu": 2}, 2,
                                                          free)], 0.0)
    assert [c.id for c in plan.picks] == [2]


def test_a_reservation_holds_its_units_against_every_group() -> None:
    big = Candidate(1, "big", {GLOBAL: 1, "gpu": 4})
    small = [Candidate(10 + i, "s", {GLOBAL: 1, "gpu": 1}) for i in range(4)]
    groups = [GroupState("big", 1, {}, 1, [big]),
              GroupState("s", 1, {GLOBAL: 2, "gpu": 2}, 4, small)]
    plan = plan_starts({GLOBAL: 8, "gpu": 4}, groups, 0.0, reservations=[Reserved(big)])
    assert plan.picks == ()  # the two free GPUs are held for the big job
    groups[1] = GroupState("s", 1, {}, 4, small)
    plan = plan_starts({GLOBAL: 8, "gpu": 4}, groups, 0.0, reservations=[Reserved(big)])
    assert [c.id for c in plan.picks] == [1] and plan.served_reservations == {1}
