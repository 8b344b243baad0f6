"""Weighted fair share of the global cap between groups, observed from the history."""

from __future__ import annotations

from collections import Counter

import pytest
import sqlalchemy as sa
from harness import Workers, enqueue_many, intervals, read_history, slot_time

import readyq

pytestmark = pytest.mark.slow


def test_backlogged_groups_weighted_3_to_1_share_slot_time_75_25(
    queue: readyq.Queue, history_engine: sa.Engine, workers: Workers
) -> None:
    jobs = [({"sleep": 0.03}, "a", 3)] * 240 + [({"sleep": 0.03}, "b", 1)] * 80
    enqueue_many(queue, jobs)
    # Each process may run two of the four slots, so the slots are shared between
    # processes and the shares are decided across them.
    for n in range(3):
        workers.start(f"w{n}", concurrency=4, poll=0.02, max_running=2)
    stats = workers.wait_all_ok(timeout=120)
    assert queue.counts() == {"done": len(jobs)}
    assert sum(1 for s in stats if s["done"]) >= 2, "work should spread over processes"

    spans = intervals(read_history(history_engine))
    assert len(spans) == len(jobs)
    # The window where both groups still had jobs to run: until one's last job started.
    t0 = min(s.start for s in spans)
    t1 = min(max(s.start for s in spans if s.grp == g) for g in ("a", "b"))
    assert t1 - t0 > 1.0
    slots = slot_time(spans, t0, t1)
    share = slots["a"] / (slots["a"] + slots["b"])
    print(f"window {t1 - t0:.2f}s, slot-time {slots}, share of a {share:.3f}")
    print("done per process:", [s["done"] for s in stats])
    assert 0.675 <= share <= 0.825, f"group a had {share:.3f} of the slot time, not 0.75"


def test_a_light_group_among_heavy_ones_starts_within_the_first_rounds(
    queue: readyq.Queue, history_engine: sa.Engine, workers: Workers
) -> None:
    cap = 4
    heavy = [({"sleep": 0.03}, f"h{g}", 10) for g in range(10) for _ in range(6)]
    # Named to sort last, so that no tie is broken in its favour.
    light = [({"sleep": 0.03}, "z-light", 1)] * 3
    enqueue_many(queue, heavy + light)
    workers.start("w0", concurrency=cap, poll=0.02)
    workers.wait_all_ok(timeout=60)

    starts = sorted(intervals(read_history(history_engine)), key=lambda s: s.start)
    assert len(starts) == len(heavy) + len(light)
    # Starts are ordered by the time their handler threads began, which may shuffle the
    # jobs of one claim by up to cap - 1 places: 4 * cap allows for that past 3 rounds.
    rank = next(n for n, s in enumerate(starts) if s.grp == "z-light")
    print(f"light group first start: #{rank + 1}, {starts[rank].start - starts[0].start:.3f}s in")
    assert rank < 4 * cap, f"the light group's first job was start number {rank + 1}"
    assert starts[rank].start - starts[0].start < 1.0


def test_more_groups_than_slots_all_start_early_and_take_turns(
    queue: readyq.Queue, history_engine: sa.Engine, workers: Workers
) -> None:
    cap, groups, per_group = 3, 12, 4
    enqueue_many(
        queue, [({"sleep": 0.03}, f"c{g:02}", 1) for _ in range(per_group) for g in range(groups)]
    )
    workers.start("w0", concurrency=cap, poll=0.02)
    workers.wait_all_ok(timeout=60)

    starts = sorted(intervals(read_history(history_engine)), key=lambda s: s.start)
    assert len(starts) == groups * per_group
    # Every group started within the first rounds (12 groups, 3 slots: 4 rounds, and up to
    # cap - 1 places of shuffling between handler threads started by one claim)...
    first = {}
    for n, s in enumerate(starts):
        first.setdefault(s.grp, n)
    assert len(first) == groups
    assert max(first.values()) < groups + cap, f"first starts by rank: {first}"
    # ...and they took turns: no group ever got more than 2 jobs ahead of another.
    seen: Counter[str] = Counter({f"c{g:02}": 0 for g in range(groups)})
    worst = 0
    for s in starts:
        seen[s.grp] += 1
        worst = max(worst, max(seen.values()) - min(seen.values()))
    print(f"last first start: #{max(first.values()) + 1}, largest drift {worst}")
    assert worst <= 2, f"started counts drifted {worst} apart"
