"""Graceful shutdown with real processes: SIGTERM stops claiming; running jobs finish
within the grace period, or are handed back at once when it is over (no lease to wait
for, no attempt charged), and no job is finalized twice. A second signal ends the grace
period at once."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import history
import pytest
from chaos_procs import Procs, wait_for

import readyq
from readyq import JobSpec, JobState

pytestmark = pytest.mark.slow

LEASE = 10.0  # long: a job handed back must not wait for it


@pytest.fixture
def procs(db: str, tmp_path: Path) -> Iterator[Procs]:
    p = Procs(db, tmp_path)
    try:
        yield p
    finally:
        p.close()


def events_of(queue: readyq.Queue, job_id: int) -> list[tuple[str, str | None, str | None]]:
    return [(e.event, e.kind, e.worker) for e in history.read_history(queue.engine)
            if e.job == job_id and e.event in ("claim", "start", "end", "finalize",
                                                 "reclaim", "lease_lost", "fenced")]


def started(queue: readyq.Queue, worker: str) -> int:
    return sum(1 for e in history.read_history(queue.engine)
               if e.event == "start" and e.worker == worker)


def test_running_jobs_finish_within_the_grace_period_and_nothing_new_starts(
    queue: readyq.Queue, procs: Procs
) -> None:
    history.install(queue)
    ids = queue.enqueue_many([JobSpec("chaos", {"ms": 1500}) for _ in range(5)])
    w = procs.start("A", concurrency=3, lease_ttl=LEASE, heartbeat=2.0,
                    shutdown_grace=8.0)
    wait_for(lambda: started(queue, "A") == 3, timeout=30, what="three jobs to start")
    sent = time.monotonic()
    w.signal(signal.SIGTERM)
    stats = w.wait_ok(timeout=15)
    took = time.monotonic() - sent
    assert took < 8.0, f"the worker took {took:.1f}s to stop"
    assert stats["done"] == 3 and stats["claimed"] == 3
    infos = [queue.get(i) for i in ids]
    assert sorted(i.state.value for i in infos) == ["done"] * 3 + ["ready"] * 2
    for info in infos:
        assert info.attempts == (1 if info.state is JobState.DONE else 0)
    events = history.read_history(queue.engine)
    assert not [e for e in events if e.event in ("reclaim", "fenced", "lease_lost")
                or (e.event == "finalize" and e.kind == "release")]
    assert history.check(events, None, cap=3).ok


def test_jobs_still_running_when_the_grace_period_ends_are_handed_back_at_once(
    queue: readyq.Queue, procs: Procs
) -> None:
    history.install(queue)
    # Under its first lease the job would run for a minute; after a hand-back, briefly.
    ids = queue.enqueue_many([JobSpec("chaos", {"first_lease_ms": 60_000, "ms": 50})
                              for _ in range(2)])
    a = procs.start("A", concurrency=2, lease_ttl=LEASE, heartbeat=2.0, shutdown_grace=0.7)
    wait_for(lambda: started(queue, "A") == 2, timeout=30, what="two jobs to start")
    # B is up (and finds nothing to claim) before A stops: what B's claim is measured
    # against is the hand-back, not a process start on a busy machine.
    b = procs.start("B", concurrency=2, lease_ttl=LEASE, heartbeat=2.0)
    time.sleep(2.0)
    assert started(queue, "B") == 0
    sent = time.monotonic()
    a.signal(signal.SIGTERM)
    stats_a = a.wait_ok(timeout=15)
    assert time.monotonic() - sent < 6.0  # grace 0.7 s, then at once
    assert stats_a["done"] == 0 and stats_a["fenced_out"] == 0
    # Handed back ready, uncharged and without a delay: B (up and polling) takes them.
    wait_for(lambda: all(queue.get(i).state is JobState.DONE for i in ids), timeout=30,
             what="B to run the handed-back jobs")
    b.signal(signal.SIGTERM)
    b.wait_ok(timeout=15)
    events = history.read_history(queue.engine)
    for job_id in ids:
        info = queue.get(job_id)
        # A's attempt was not charged: B's is attempt 1.
        assert (info.attempts, info.lease_owner, info.result) == (1, "B", {"w": "B", "a": 1})
        seen = events_of(queue, job_id)
        assert ("finalize", "release", "A") in seen
        assert seen.count(("finalize", "done", "B")) == 1
        assert ("lease_lost", None, "A") in seen  # A's handler was told and stopped
        release = next(e for e in events if e.job == job_id and e.kind == "release")
        again = next(e for e in events if e.job == job_id and e.event == "claim"
                     and e.worker == "B")
        # Claimed again before the old lease would have run out, let alone been swept.
        assert again.at < release.expires, "the job waited for its old lease"
    report = history.check(events, history.read_jobs(queue), cap=2)
    assert report.ok, report.summary()
    assert report.figures["duplicates_explained"] == {"release": 2}


def test_a_second_signal_ends_the_grace_period_at_once(
    queue: readyq.Queue, procs: Procs
) -> None:
    history.install(queue)
    [job_id] = queue.enqueue_many([JobSpec("chaos", {"first_lease_ms": 60_000, "ms": 10})])
    a = procs.start("A", concurrency=1, lease_ttl=LEASE, heartbeat=2.0, shutdown_grace=60.0)
    wait_for(lambda: started(queue, "A") == 1, timeout=30, what="the job to start")
    a.signal(signal.SIGTERM)
    time.sleep(0.5)
    assert a.alive(), "the worker stopped before its grace period was over"
    assert queue.get(job_id).state is JobState.RUNNING
    sent = time.monotonic()
    a.signal(signal.SIGINT)  # a second signal: hand back now
    a.wait_ok(timeout=15)
    assert time.monotonic() - sent < 6.0  # not the 60 s of grace
    info = queue.get(job_id)
    assert (info.state, info.attempts) == (JobState.READY, 0)


def test_stop_with_grace_from_another_thread_and_signal_handlers_restored(
    queue: readyq.Queue,
) -> None:
    release = threading.Event()

    @queue.handler("wait")
    def wait(job: readyq.Job) -> str:
        release.wait(10)
        return "finished"

    job_id = queue.enqueue("wait")
    mine = signal.getsignal(signal.SIGTERM)
    custom = lambda *_: None  # noqa: E731
    signal.signal(signal.SIGTERM, custom)
    try:
        worker = queue.worker(concurrency=1, poll_interval=0.02, lease_ttl=LEASE,
                              heartbeat_interval=2.0, shutdown_grace=5.0)

        def stop_soon() -> None:
            wait_for(lambda: worker.running == 1, timeout=10, what="the job to run")
            assert signal.getsignal(signal.SIGTERM) is not custom  # the worker's own
            worker.stop(grace=5.0)
            time.sleep(0.3)
            release.set()  # the job finishes inside the grace period

        helper = threading.Thread(target=stop_soon)
        helper.start()
        stats = worker.run()  # in the main thread: installs and restores handlers
        helper.join()
        assert signal.getsignal(signal.SIGTERM) is custom
    finally:
        signal.signal(signal.SIGTERM, mine)
    assert stats.done == 1 and stats.claimed == 1
    info = queue.get(job_id)
    assert (info.state, info.result, info.attempts) == (JobState.DONE, "finished", 1)
