"""Named resources across worker processes: the capacity holds for all of them at once,
and weighted Dominant Resource Fairness shares it between backlogged groups.

The worker processes (``app.py`` with ``--resource``) define the resource; their handler
records its start and end in the history table. The units of each interval are the job's stored
costs. A handler's interval lies inside its job's time in flight (claim to outcome, as
the claims count it), so intervals that never add up past the capacity are implied by,
and checked as a consequence of, the claims' sums.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import pytest
import sqlalchemy as sa
from harness import (
    JOB_TYPE,
    Interval,
    Workers,
    in_flight,
    intervals,
    max_concurrency,
    read_history,
)

import readyq
from readyq.resources import decode

pytestmark = pytest.mark.slow

def units_by_job(queue: readyq.Queue, resource: str) -> dict[int, int]:
    """Each job's stored units of ``resource`` (0 for none)."""
    j = queue.store.tables.jobs
    with queue.engine.connect() as conn:
        rows = conn.execute(sa.select(j.c.id, j.c.uses)).all()
    return {int(r.id): decode(r.uses).get(resource, 0) for r in rows}


def peak_units(spans: Sequence[Interval], units: Mapping[int, int]) -> tuple[int, float]:
    """The most units held by open intervals at one instant, and when (half-open: an end
    at t frees its units before a start at t takes any)."""
    points = [(s.start, units[s.job_id]) for s in spans if units[s.job_id]]
    points += [(s.end, -units[s.job_id]) for s in spans if units[s.job_id]]
    points.sort()
    best, when, held = 0, 0.0, 0
    for at, delta in points:
        held += delta
        if held > best:
            best, when = held, at
    return best, when


def unit_seconds(
    spans: Sequence[Interval], units: Mapping[int, int], t0: float, t1: float
) -> dict[str, float]:
    """Unit-seconds of the resource per group inside the window [t0, t1]."""
    out: dict[str, float] = {}
    for s in spans:
        overlap = min(s.end, t1) - max(s.start, t0)
        if overlap > 0:
            out[s.grp or ""] = out.get(s.grp or "", 0.0) + overlap * units[s.job_id]
    return out


def test_three_processes_never_hold_more_than_the_capacity(
    queue: readyq.Queue, history_engine: sa.Engine, workers: Workers
) -> None:
    gpu_cap, cap, processes, jobs = 3, 4, 3, 90
    queue.resource("gpu", capacity=gpu_cap)
    specs = []
    for i in range(jobs):
        # One job in three takes 1 gpu, one 2, one none; 20 to 50 ms each.
        costs = (({"gpu": 1}, {"gpu": 2}, None))[i % 3]
        specs.append(readyq.JobSpec(
            JOB_TYPE, {"sleep": (20 + (i * 7) % 31) / 1000}, group=f"g{i % 4}", uses=costs,
        ))
    queue.enqueue_many(specs)
    # Each process may run 2 at once (6 in all): only the global cap keeps them at 4.
    for n in range(processes):
        workers.start(f"w{n}", concurrency=cap, poll=0.02, resources={"gpu": gpu_cap},
                      max_running=2)

    # The database's own figures, sampled while the jobs run.
    sampled_use: list[int] = []
    sampled_flight: list[int] = []
    deadline = time.monotonic() + 90
    while any(p.popen.poll() is None for p in workers.procs) and time.monotonic() < deadline:
        sampled_use.append(queue.resource_stats()["gpu"].in_use)
        sampled_flight.append(in_flight(queue))
        time.sleep(0.02)
    stats = workers.wait_all_ok(timeout=30)

    assert queue.counts() == {"done": jobs}
    spans = intervals(read_history(history_engine))
    assert len(spans) == jobs
    units = units_by_job(queue, "gpu")
    peak, when = peak_units(spans, units)
    peak_jobs = max_concurrency(spans)
    print(f"gpu peak {peak} (history, at {when:.3f}), {max(sampled_use)} (database, "
          f"{len(sampled_use)} samples); jobs at once {peak_jobs} (history), "
          f"{max(sampled_flight)} (database)")
    print("done per process:", [s["done"] for s in stats])
    assert peak <= gpu_cap, f"{peak} gpus held at {when:.3f}, capacity {gpu_cap}"
    assert max(sampled_use) <= gpu_cap
    assert peak_jobs <= cap, f"{peak_jobs} jobs ran at once under a global cap of {cap}"
    assert max(sampled_flight) <= cap
    assert peak >= 2, "the resource was never contended"
    assert sum(1 for s in stats if s["done"]) >= 2, "work should spread over processes"


def test_drf_shares_the_resource_75_25_between_groups_weighted_3_to_1(
    queue: readyq.Queue, history_engine: sa.Engine, workers: Workers
) -> None:
    """Group a (weight 3) takes 1 gpu a job, group b (weight 1) 2 gpus, of 4; every job
    lasts the same. Weighted DRF gives a 3/4 of the gpu time while both are backlogged."""
    queue.resource("gpu", capacity=4)
    duration = 0.12
    queue.enqueue_many(
        [readyq.JobSpec(JOB_TYPE, {"sleep": duration}, group="a", weight=3,
                        uses={"gpu": 1}) for _ in range(72)]
        + [readyq.JobSpec(JOB_TYPE, {"sleep": duration}, group="b", weight=1,
                          uses={"gpu": 2}) for _ in range(24)]
    )
    for n in range(2):
        workers.start(f"w{n}", concurrency=4, poll=0.02, resources={"gpu": 4},
                      max_running=3)
    stats = workers.wait_all_ok(timeout=120)
    assert queue.counts() == {"done": 96}

    spans = intervals(read_history(history_engine))
    units = units_by_job(queue, "gpu")
    peak, when = peak_units(spans, units)
    assert peak <= 4, f"{peak} gpus held at {when:.3f}"
    # The window where both groups still had jobs to run: until one's last job started.
    t0 = min(s.start for s in spans)
    t1 = min(max(s.start for s in spans if s.grp == g) for g in ("a", "b"))
    assert t1 - t0 > 1.5, f"a window of {t1 - t0:.2f}s is too short to judge shares"
    used = unit_seconds(spans, units, t0, t1)
    share = used["a"] / (used["a"] + used["b"])
    busy = (used["a"] + used["b"]) / (4 * (t1 - t0))
    print(f"window {t1 - t0:.2f}s, gpu-seconds {used}, share of a {share:.3f}, "
          f"gpu busy {busy:.0%}, peak {peak}; done per process {[s['done'] for s in stats]}")
    assert 0.675 <= share <= 0.825, f"group a had {share:.3f} of the gpu time, not 0.75"
