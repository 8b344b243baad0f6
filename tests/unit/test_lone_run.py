"""The resource claim's shortcut for a group alone (``lone_run``) gives exactly the
planner's starts whenever it answers, and leaves every other case to the planner."""

from __future__ import annotations

import random

from readyq.planning.drf import GLOBAL, plan_starts
from readyq.resources import decode, encode
from readyq.store.resource_claim import HEADS_MAX, candidates, group_states, lone_run

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
