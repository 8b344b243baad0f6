"""A poison job (its handler SIGKILLs its own worker, on every attempt) ends failed after
exactly max_attempts, the last crashed attempt counted, while other jobs keep flowing;
a supervisor restarts the workers it kills."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import history
import pytest
from chaos_procs import Proc, Procs

import readyq
from readyq import JobSpec, JobState

pytestmark = pytest.mark.slow

MAX_ATTEMPTS = 3


@pytest.fixture
def procs(db: str, tmp_path: Path) -> Iterator[Procs]:
    p = Procs(db, tmp_path)
    try:
        yield p
    finally:
        p.close()


def test_a_job_that_kills_its_worker_fails_after_exactly_max_attempts(
    queue: readyq.Queue, procs: Procs
) -> None:
    history.install(queue)
    [poison] = queue.enqueue_many([JobSpec("poison", max_attempts=MAX_ATTEMPTS, priority=5)])
    others = queue.enqueue_many(
        [JobSpec("chaos", {"ms": 40}, max_attempts=10) for _ in range(120)]
    )
    opts = {"concurrency": 3, "lease_ttl": 1.0, "heartbeat": 0.25, "poll": 0.05}
    slots: dict[int, Proc] = {n: procs.start(f"w{n}.1", **opts) for n in range(2)}
    generation = {0: 1, 1: 1}
    died: dict[str, float] = {}
    deadline = time.monotonic() + 60
    # The supervisor: a worker that died is replaced by a new one (a new worker id).
    while set(queue.counts()) - {"done", "failed"}:
        assert time.monotonic() < deadline, f"not finished: {queue.counts()}"
        for n, proc in list(slots.items()):
            if not proc.alive():
                died[proc.name] = time.time()
                generation[n] += 1
                slots[n] = procs.start(f"w{n}.{generation[n]}", **opts)
        time.sleep(0.05)
    for proc in slots.values():
        proc.signal(15)
        proc.wait_ok(30)

    info = queue.get(poison)
    assert info.state is JobState.FAILED
    assert info.attempts == MAX_ATTEMPTS
    assert info.error == f"lease expired: worker lost during attempt {MAX_ATTEMPTS}"
    assert queue.counts() == {"done": len(others), "failed": 1}
    assert len(died) == MAX_ATTEMPTS  # one worker lost per attempt, no more

    events = history.read_history(queue.engine)
    mine = [e for e in events if e.job == poison]
    starts = [e.attempt for e in mine if e.event == "start"]
    assert starts == [1, 2, 3], starts
    reclaims = [(e.kind, e.attempt) for e in mine if e.event == "reclaim"]
    assert reclaims == [("retry", 1), ("retry", 2), ("failed", 3)], reclaims
    # Other jobs flowed while the poison job was being retried.
    first, last = mine[0].at, mine[-1].at
    during = [e for e in events if e.job != poison and e.event == "finalize"
              and e.kind == "done" and first < e.at < last]
    assert len(during) >= 10, f"only {len(during)} other jobs finished meanwhile"

    report = history.check(events, history.read_jobs(queue), cap=opts["concurrency"],
                           killed=died)
    assert report.ok, report.summary()
    print(f"poison: {starts} starts, {len(died)} workers lost, {len(during)} other jobs done "
          f"meanwhile; duplicates {report.figures['duplicates_explained']}")
