"""The ``resources`` invariant of the history checker: on hand-made histories a start that
takes a resource past its capacity is caught (and only that), then on a history recorded
from a real run on each database, which must pass it."""

from __future__ import annotations

import time
from typing import Any

import pytest
from history import Event, JobFacts, Recorder, capacity_at, check, install, read_history, read_jobs

import readyq


class H:
    """Builds a history; every event one second after the previous one by default."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.t = 100.0

    def ev(self, job: int, event: str, *, at: float | None = None, **kw: Any) -> H:
        self.t = self.t + 1.0 if at is None else at
        self.events.append(Event(seq=len(self.events) + 1, job=job, event=event, at=self.t, **kw))
        return self

    def claim(self, job: int, worker: str = "A", *, at: float | None = None) -> H:
        return self.ev(job, "claim", token=1, attempt=1, worker=worker, at=at)

    def start(self, job: int, worker: str = "A", *, at: float | None = None) -> H:
        return self.ev(job, "start", token=1, attempt=1, worker=worker, at=at)

    def end(self, job: int, worker: str = "A", *, at: float | None = None) -> H:
        return self.ev(job, "end", token=1, attempt=1, worker=worker, at=at)

    def fin(self, job: int, worker: str = "A", *, at: float | None = None) -> H:
        return self.ev(job, "finalize", token=1, attempt=1, worker=worker, kind="done", at=at)

    def begin(self, job: int, worker: str = "A") -> H:
        return self.claim(job, worker).start(job, worker)

    def close(self, job: int, worker: str = "A") -> H:
        return self.end(job, worker).fin(job, worker)


def facts(**uses: dict[str, int]) -> dict[int, JobFacts]:
    """Done jobs ``j1``, ``j2``... with the given costs."""
    return {
        int(k[1:]): JobFacts(id=int(k[1:]), state="done", uses=tuple(sorted(v.items())))
        for k, v in uses.items()
    }


def flagged(rep: Any) -> set[str]:
    return {k for k, v in rep.violations.items() if v}


def test_uses_within_the_capacity_pass_with_their_peaks() -> None:
    # gpu 4: jobs of 2, 1 and 1 at once, then one of 4 once they are all over.
    h = H().begin(1).begin(2).begin(3).close(1).close(2).close(3)
    h.begin(4).close(4)
    jobs = facts(j1={"gpu": 2}, j2={"gpu": 1, "mem": 8}, j3={"gpu": 1}, j4={"gpu": 4})
    rep = check(h.events, jobs, cap=4, resources={"gpu": 4, "mem": 8})
    assert rep.ok, rep.summary()
    assert rep.figures["peak_uses"] == {"gpu": 4, "mem": 8}
    assert rep.figures["peak_uses_running"] == {"gpu": 4, "mem": 8}
    # Without ``resources`` (or without the jobs' costs) nothing is judged.
    assert check(h.events, jobs, cap=4).figures["peak_uses"] == {}
    assert check(h.events, None, resources={"gpu": 1}).ok


def test_claims_past_the_capacity_are_caught() -> None:
    h = H().claim(1).claim(2).start(1).start(2).close(1).close(2)
    jobs = facts(j1={"gpu": 2}, j2={"gpu": 3})
    rep = check(h.events, jobs, resources={"gpu": 4})
    assert flagged(rep) == {"resources"}, rep.summary()
    assert any("job 2 took 3" in m and "5 held by leases" in m
               for m in rep.violations["resources"]), rep.violations
    assert rep.figures["peak_uses"] == {"gpu": 5}
    assert check(h.events, jobs, resources={"gpu": 5}).ok
    # The global cap alone does not see it: two jobs under a cap of 2.
    assert check(h.events, jobs, cap=2).ok


def test_handler_starts_past_the_capacity_are_caught_without_claim_events() -> None:
    h = H().start(1).start(2, "B").end(1).fin(1).end(2, "B").fin(2, "B")
    jobs = facts(j1={"gpu": 1}, j2={"gpu": 1})
    rep = check(h.events, jobs, resources={"gpu": 1})
    assert flagged(rep) == {"resources"}, rep.summary()
    assert any("held by handlers" in m for m in rep.violations["resources"])


def test_units_freed_at_an_instant_can_be_taken_at_that_instant() -> None:
    h = H().begin(1).end(1).fin(1, at=110.0).claim(2, at=110.0).start(2).close(2)
    rep = check(h.events, facts(j1={"gpu": 4}, j2={"gpu": 4}), resources={"gpu": 4})
    assert rep.ok, rep.summary()


def test_only_the_resources_a_job_uses_count() -> None:
    h = H().begin(1).begin(2).begin(3).close(1).close(2).close(3)
    jobs = facts(j1={"gpu": 2}, j2={"mem": 2}, j3={})
    rep = check(h.events, jobs, resources={"gpu": 2, "mem": 2, "api": 0})
    assert rep.ok, rep.summary()
    assert rep.figures["peak_uses"] == {"api": 0, "gpu": 2, "mem": 2}


def test_a_capacity_that_steps_judges_each_start_by_the_capacity_then() -> None:
    # Capacity 3 from the start, 1 from t=110, 4 from t=130.
    steps = [(0.0, 3), (110.0, 1), (130.0, 4)]
    h = H()
    for job in (1, 2, 3):
        h.begin(job)                          # t=101..106: 3 in use of 3
    for job in (1, 2):
        h.close(job)                          # t=107..110: 1 in use...
    h.t = 111.0
    h.begin(4)                                # t=112, 113: 2 held, capacity 1
    h.close(3).close(4)
    jobs = facts(**{f"j{i}": {"gpu": 1} for i in (1, 2, 3, 4)})
    rep = check(h.events, jobs, resources={"gpu": steps})
    assert flagged(rep) == {"resources"}, rep.summary()
    assert all("job 4" in m and "capacity 1" in m for m in rep.violations["resources"])
    # Lowered below what is in use: nothing that runs is judged, only starts.
    h2 = H()
    for job in (1, 2, 3):
        h2.begin(job)
    h2.t = 115.0
    h2.close(1).close(2).close(3)
    h2.t = 131.0
    for job in (4, 5, 6, 7):
        h2.begin(job)                         # 4 of 4 after t=130
    for job in (4, 5, 6, 7):
        h2.close(job)
    jobs2 = facts(**{f"j{i}": {"gpu": 1} for i in range(1, 8)})
    assert check(h2.events, jobs2, resources={"gpu": steps}).ok
    # A claim committed just after a lowering may have read the capacity before it.
    late = H().begin(1).begin(2)
    late.claim(3, at=110.2).start(3, at=110.3).close(1).close(2).close(3)
    jobs3 = facts(j1={"gpu": 1}, j2={"gpu": 1}, j3={"gpu": 1})
    assert flagged(check(late.events, jobs3, resources={"gpu": steps})) == {"resources"}
    assert check(late.events, jobs3, resources={"gpu": steps}, capacity_lag=0.5).ok


def test_capacity_at() -> None:
    steps = [(110.0, 1), (0.0, 3), (130.0, 4)]  # any order
    assert capacity_at(5, 1e9) == 5
    assert [capacity_at(steps, t) for t in (-5.0, 0.0, 109.9, 110.0, 129.0, 130.0, 1e9)] == [
        3, 3, 3, 1, 1, 4, 4]
    assert capacity_at(steps, 110.4, lag=0.5) == 3
    assert capacity_at(steps, 110.6, lag=0.5) == 1
    assert capacity_at([(50.0, 2)], 10.0) == 2  # the first step also holds before it
    with pytest.raises(ValueError):
        capacity_at([], 1.0)


def test_a_recorded_run_keeps_every_capacity(queue: readyq.Queue, db: str) -> None:
    """An in-process worker over jobs of 1 and 2 gpus (of 3) and jobs taking none, its
    transitions recorded by triggers and its handlers' events by a Recorder."""
    install(queue)
    queue.resource("gpu", capacity=3)
    recorder = Recorder(db, "w1", queue.store.now)

    @queue.handler("work", uses={"gpu": 1})
    def work(job: readyq.Job) -> None:
        recorder.job("start", job)
        time.sleep(0.01)
        recorder.job("end", job)

    specs = [
        readyq.JobSpec("work", group=f"g{i % 3}", uses=({"gpu": 2}, None, {"mem": 1})[i % 3])
        for i in range(24)
    ]
    queue.resource("mem", capacity=2)
    queue.enqueue_many(specs)
    try:
        queue.run_worker(until_idle=True, concurrency=4, poll_interval=0.02,
                         worker_id="w1")
    finally:
        recorder.close()
    jobs = read_jobs(queue)
    assert {dict(f.uses).get("gpu", 0) for f in jobs.values()} == {0, 1, 2}
    assert all(f.uses for f in jobs.values())  # the handler's costs, written at claim
    events = read_history(queue.engine)
    # SQLite stamps its triggers' rows to the millisecond.
    tolerance = 0.002 if queue.engine.dialect.name == "sqlite" else 0.0
    rep = check(events, jobs, cap=4, resources={"gpu": 3, "mem": 2}, tolerance=tolerance)
    assert rep.ok, rep.summary()
    f = rep.figures
    print(f"peaks: leases {f['peak_leases']}, gpu {f['peak_uses']['gpu']} "
          f"(running {f['peak_uses_running']['gpu']}), mem {f['peak_uses']['mem']}")
    assert 2 <= f["peak_uses"]["gpu"] <= 3
    assert f["peak_uses"]["mem"] <= 2 and f["peak_leases"] <= 4
    # The same history judged against a smaller capacity than the workers had fails.
    assert flagged(check(events, jobs, resources={"gpu": 1})) == {"resources"}
