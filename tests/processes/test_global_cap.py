"""The concurrency cap is global: three processes, each given a cap of 5, run at most 5."""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa
from harness import (
    Workers,
    enqueue_many,
    in_flight,
    intervals,
    max_concurrency,
    read_history,
)

import readyq

pytestmark = pytest.mark.slow

CAP = 5
JOBS = 150
PROCESSES = 3


def test_three_processes_never_run_more_jobs_than_the_global_cap(
    queue: readyq.Queue, history_engine: sa.Engine, workers: Workers
) -> None:
    # 20 to 50 ms each, in three groups.
    enqueue_many(
        queue, (({"sleep": (20 + (i * 7) % 31) / 1000}, f"g{i % 3}", 1) for i in range(JOBS))
    )
    # Each process may run 3 at once (9 in all), so only the global cap keeps the total
    # at 5.
    for n in range(PROCESSES):
        workers.start(f"w{n}", concurrency=CAP, poll=0.02, max_running=3)

    # The database's own count of leased and running jobs, sampled while they run. Each
    # process alone would be allowed 5, and runnable jobs are waiting throughout.
    sampled: list[int] = []
    deadline = time.monotonic() + 90
    while any(p.popen.poll() is None for p in workers.procs) and time.monotonic() < deadline:
        sampled.append(in_flight(queue))
        time.sleep(0.01)
    stats = workers.wait_all_ok(timeout=30)

    spans = intervals(read_history(history_engine))
    assert len(spans) == JOBS
    assert queue.counts() == {"done": JOBS}
    peak = max_concurrency(spans)
    print(f"peak {peak} (history), {max(sampled)} (database, {len(sampled)} samples)")
    print("done per process:", [s["done"] for s in stats])
    assert peak <= CAP, f"{peak} jobs ran at once under a global cap of {CAP}"
    assert peak == CAP, f"the cap was never reached (peak {peak})"
    assert max(sampled) <= CAP
    assert sum(1 for s in stats if s["done"]) >= 2, "work should spread over processes"
