"""The resource claim's two shortcuts give exactly the planner's starts (and, for the
plan on the counts, its fair-share clocks) whenever they answer, and leave every other
case to the planner: ``lone_run``, a group alone, and ``uniform_plan``, jobs that all
cost one dominant unit."""

from __future__ import annotations

import random

from readyq.planning.drf import GLOBAL, plan_starts
from readyq.resources import decode, encode
from readyq.store.resource_claim import (
    HEADS_MAX,
    candidates,
    group_states,
    lone_run,
    uniform_plan,
)

HANDLER_USES = {"a": {"gpu": 1}, "b": {"gpu": 2}, "c": {}}


def make_cost(known: set[str]):
    costs: dict[tuple[str | None, str], dict[str, int] | None] = {}

    def cost(type_: str, stored: str | None) -> dict[str, int] | None:
        key = (stored, type_ if stored is None else "")
        if key not in costs:
            uses = decode(stored) if stored is not None else HANDLER_USES[type_]
            costs[key] = None if any(n not in known for n in uses) else {GLOBAL: 1, **uses}
        return costs[key]

    return cost


def test_a_group_alone_gets_the_planners_starts() -> None:
    rnd = random.Random(20261203)
    answered = 0
    for _ in range(20_000):
        cap = rnd.randint(1, 12)
        capacity = {GLOBAL: cap, "gpu": rnd.randint(0, 8)}
        if rnd.random() < 0.2:
            capacity["tpu"] = rnd.randint(1, 4)
        groups = ["g"] if rnd.random() < 0.85 else ["g", "h"]
        types = ["a"] if rnd.random() < 0.6 else rnd.sample(sorted(HANDLER_USES), 2)
        held: dict[str, dict[str, int]] = {}
        for key in groups if rnd.random() < 0.5 else groups[:1]:
            n = rnd.randint(0, cap)
            if n:
                held[key] = {GLOBAL: n, "gpu": rnd.randint(0, 2 * n)}
        in_flight = sum(h[GLOBAL] for h in held.values())
        limit = rnd.randint(1, 6)
        most = min(limit, cap - in_flight)
        if most <= 0:
            continue
        rows, ready, next_id = [], {}, 1
        total = len(groups)
        want: dict[str, int] = {}
        for key in groups:
            available = rnd.randint(0, 10)
            if not available:
                continue
            counted = min(available, cap)
            ready[key] = (counted, 1)
            want[key] = min(counted, most, HEADS_MAX, max(2, -(-most // total) + 1))
            for _ in range(min(want[key], available)):
                type_ = rnd.choice(types)
                stored = None
                if rnd.random() < 0.15:
                    stored = encode(rnd.choice([HANDLER_USES[type_], {"gpu": 3}, {"tpu": 1}]))
                rows.append((next_id, key, type_, stored, 1, rnd.choice([0, 0, 1])))
                next_id += 1
        if not ready:
            continue
        cost = make_cost(set(capacity) - {GLOBAL})
        run = lone_run(rows, cost, ready, held, capacity, most, want)
        heads = candidates(rows, cost)
        states = group_states(heads, held, ready, {k: 1 for k in groups}, {}, [])
        plan = plan_starts(capacity, states, 0.0, max_claims=limit)
        if run is None:
            continue
        answered += 1
        assert len(states) == 1
        assert [c.id for c in run] == [c.id for c in plan.picks]
        assert [c.cost for c in run] == [c.cost for c in plan.picks]
        assert plan.reserve == ()
    # The shortcut is the common case, not a corner.
    assert answered > 3_000, answered


def test_it_leaves_a_job_that_does_not_fit_to_the_planner() -> None:
    cost = make_cost({"gpu"})
    rows = [(1, "g", "b", None, 1, 0), (2, "g", "b", None, 1, 0)]
    capacity = {GLOBAL: 8, "gpu": 3}
    # Two 2-GPU jobs, 3 GPUs: the second would be reserved, which only the plan does.
    assert lone_run(rows, cost, {"g": (2, 1)}, {}, capacity, 8, {"g": 2}) is None
    # With 4 GPUs both fit.
    run = lone_run(rows, cost, {"g": (2, 1)}, {}, {**capacity, "gpu": 4}, 8, {"g": 2})
    assert run is not None and [c.id for c in run] == [1, 2]
    # Another group in flight: the plan shares between them.
    assert lone_run(rows, cost, {"g": (2, 1)}, {"h": {GLOBAL: 1}}, capacity, 8, {"g": 2}) is None


def random_state(rnd: random.Random):  # type: ignore[no-untyped-def]
    cap = rnd.randint(1, 16)
    # A resource as large as the cap (or larger) is the common case: one dominant unit.
    capacity = {GLOBAL: cap, "gpu": rnd.choice([cap, cap, 2 * cap, rnd.randint(0, cap)])}
    if rnd.random() < 0.2:
        capacity["tpu"] = rnd.randint(1, 4)
    groups = [f"g{i}" for i in range(rnd.randint(1, 5))]
    types = ["a"] if rnd.random() < 0.7 else rnd.sample(sorted(HANDLER_USES), 2)
    weight = {k: rnd.randint(1, 4) for k in groups}
    history = {
        k: (rnd.uniform(0, 3), rnd.randint(0, 20)) for k in groups if rnd.random() < 0.6
    }
    held: dict[str, dict[str, int]] = {}
    left = cap
    for key in groups:
        n = rnd.randint(0, left) if rnd.random() < 0.5 else 0
        if n:
            left -= n
            gpus = n * HANDLER_USES["a"]["gpu"] if rnd.random() < 0.8 else rnd.randint(0, 3 * n)
            held[key] = {GLOBAL: n, "gpu": gpus}
    limit = rnd.randint(1, cap + 2)
    rows, ready, next_id = [], {}, 1
    for key in groups:
        available = rnd.randint(0, 12)
        if not available:
            continue
        ready[key] = (min(available, cap), weight[key])
        read = rnd.randint(1, available)  # a claim may read fewer than a group has
        for _ in range(read):
            type_ = rnd.choice(types)
            stored = None
            if rnd.random() < 0.05:
                stored = encode(rnd.choice([HANDLER_USES[type_], {"gpu": 3}, {"tpu": 1}]))
            rows.append((next_id, key, type_, stored, weight[key], rnd.choice([0, 0, 1])))
            next_id += 1
    return capacity, weight, history, held, limit, rows, ready


def test_the_plan_from_the_counts_is_the_planners() -> None:
    rnd = random.Random(20261203)
    answered = 0
    for _ in range(20_000):
        capacity, weight, history, held, limit, rows, ready = random_state(rnd)
        cost = make_cost(set(capacity) - {GLOBAL})
        vclock = rnd.uniform(0, 2)
        got = uniform_plan(rows, cost, ready, held, capacity, weight, history, limit, vclock)
        states = group_states(candidates(rows, cost), held, ready, weight, history, [])
        plan = plan_starts(capacity, states, vclock, max_claims=limit)
        if got is None:
            continue
        answered += 1
        mine, my_states = got
        assert [c.id for c in mine.picks] == [c.id for c in plan.picks]
        assert [c.cost for c in mine.picks] == [c.cost for c in plan.picks]
        assert plan.reserve == ()
        assert mine.vclock == plan.vclock
        assert mine.vfinish == plan.vfinish
        assert mine.last == plan.last
        assert [s.key for s in my_states] == [s.key for s in states]
    assert answered > 3_000, answered


def test_costs_that_differ_or_a_fuller_resource_go_to_the_planner() -> None:
    cost = make_cost({"gpu"})
    ready = {"g": (1, 1), "h": (1, 1)}
    rows = [(1, "g", "a", None, 1, 0), (2, "h", "a", None, 1, 0)]
    args = ({"g": 1, "h": 1}, {}, 4, 0.0)
    found = uniform_plan(rows, cost, ready, {}, {GLOBAL: 4, "gpu": 4}, *args)
    assert found is not None and [c.id for c in found[0].picks] == [1, 2]
    # More runnable than were read: the planner reads more of them.
    assert uniform_plan(rows, cost, {"g": (2, 1), "h": (1, 1)}, {},
                        {GLOBAL: 4, "gpu": 4}, *args) is None
    # One GPU each out of 2 under a cap of 4: a job is half the GPUs, a quarter of the cap.
    assert uniform_plan(rows, cost, ready, {}, {GLOBAL: 4, "gpu": 2}, *args) is None
    mixed = [(1, "g", "a", None, 1, 0), (2, "h", "b", None, 1, 0)]
    assert uniform_plan(mixed, cost, ready, {}, {GLOBAL: 4, "gpu": 8}, *args) is None
    # A group holding more GPUs than its jobs in flight would.
    heavy = {"g": {GLOBAL: 1, "gpu": 3}}
    assert uniform_plan(rows, cost, ready, heavy, {GLOBAL: 4, "gpu": 4}, *args) is None
