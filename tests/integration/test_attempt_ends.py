"""How an attempt ends is decided once (readyq.planning.attempts), whoever sees it end.

* A job cancelled while it runs, whose handler ignores the cancel and overruns its
  timeout with attempts left, ends ``cancelled`` with a handler in a thread (the sweep
  sees the deadline) and in a child process (the worker's watch kills the child) alike.
* An isolated job's timeout, seen both by its worker (which kills the child) and by a
  sweep (which ends the attempt in the database), is told and counted once, by
  whichever recorded it, and never reported as a fenced write.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest

import readyq
from isolated import handlers
from readyq import JobState
from readyq.claim_order import ClaimOrder, StartPolicy
from readyq.store import Outcome, OutcomeKind, Recorded

FAST = {"poll_interval": 0.02, "lease_ttl": 10.0, "heartbeat_interval": 0.2}


def run_until(queue: readyq.Queue, workers: list[readyq.Worker], done: object,
              timeout: float = 30.0) -> None:
    threads = [threading.Thread(target=w.run, kwargs={"handle_signals": False}, daemon=True)
               for w in workers]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + timeout
        while not done():  # type: ignore[operator]
            assert time.monotonic() < deadline, "not reached in time"
            time.sleep(0.02)
    finally:
        for w in workers:
            w.stop()
        for t in threads:
            t.join(30)


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_a_cancel_then_a_timeout_ends_cancelled_in_both_isolations(
    queue: readyq.Queue, isolation: str
) -> None:
    queue.handler("overrun", timeout=1.5, max_attempts=3,
                  isolation=isolation)(handlers.overrun)
    job_id = queue.enqueue("overrun", {"seconds": 4.0})
    # In a thread the sweep ends the attempt at its deadline; in a child process the
    # worker's watch does, and its own sweeps are held off (a long poll: the worker still
    # wakes for each outcome) so that its own decision is the one recorded.
    options = {**FAST, "poll_interval": 0.02 if isolation == "thread" else 30.0}
    worker = queue.worker(kill_grace=0.2, **options)

    def cancelled_then_ended() -> bool:
        info = queue.get(job_id)
        if info.state is JobState.RUNNING and not cancelled:
            queue.cancel(job_id)
            cancelled.append(True)
        return info.state.is_terminal

    cancelled: list[bool] = []
    run_until(queue, [worker], cancelled_then_ended)
    info = queue.get(job_id)
    assert info.state is JobState.CANCELLED, (info.state, info.error)
    assert info.attempts == 1


def test_a_timeout_seen_by_the_worker_and_a_sweep_is_told_once(
    queue: readyq.Queue, caplog: pytest.LogCaptureFixture
) -> None:
    queue.handler("overrun", timeout=1.0, max_attempts=1,
                  isolation="process")(handlers.overrun)
    ids = [queue.enqueue("overrun", {"seconds": 5.0}) for _ in range(3)]
    owner = queue.worker(concurrency=3, kill_grace=0.2, **FAST)
    queue.handler("other")(lambda job: None)
    sweeper = queue.worker(types=["other"], **FAST)
    with caplog.at_level(logging.INFO, logger="readyq"):
        run_until(queue, [owner, sweeper],
                  lambda: owner.running == 0
                  and all(queue.get(i).state.is_terminal for i in ids))
    for i in ids:
        info = queue.get(i)
        assert info.state is JobState.FAILED and "timed out" in (info.error or "")
    told = [r for r in caplog.records
            if getattr(r, "job_id", None) in ids and "timed out" in r.getMessage()]
    assert sorted(r.job_id for r in told) == sorted(ids), [r.getMessage() for r in told]
    assert not [r for r in caplog.records if getattr(r, "event", "") == "write_fenced"]
    assert owner.stats.fenced_out == 0
    assert owner.stats.timed_out + sweeper.stats.timed_out == len(ids)
    for r in told:
        assert "(attempt" not in r.getMessage(), r.getMessage()


def test_a_timeout_a_sweep_recorded_first_is_recorded_for_its_worker(
    queue: readyq.Queue,
) -> None:
    queue.handler("t", timeout=1.0, max_attempts=3)(lambda job: None)
    job_id = queue.enqueue("t")
    worker = queue.worker(**FAST)
    store = queue.store
    _, [claimed] = store.finish_and_claim([], ClaimOrder(
        owner=worker.worker_id, cap=1, limit=1, lease_ttl=10.0, types=["t"],
        start={"t": StartPolicy(1.0, True, 3)},
    ))
    store.clock_offset = 5.0  # past the deadline: the sweep ends the attempt
    assert store.reclaim_expired().timed_out == 1
    timeout = Outcome(job=claimed, kind=OutcomeKind.RETRY, delay=1.0, error_type="Timeout",
                      error="timed out after 1s (attempt 1): its child process was terminated")
    late = Outcome(job=claimed, kind=OutcomeKind.DONE, result_json="null")
    assert store.record_outcomes(worker.worker_id, [timeout]) == {
        (job_id, claimed.lease_token): Recorded.SWEPT
    }
    assert store.record_outcomes(worker.worker_id, [late]) == {
        (job_id, claimed.lease_token): Recorded.FENCED
    }
