"""Once a job's outcome is recorded, the worker keeps nothing of it: the handler threads
that wait for the next job hold no reference to their last one, its arguments and
result included, even while the worker goes on (driven tick by tick here, so that its
threads stay up)."""

from __future__ import annotations

import gc
import weakref

import readyq
from readyq.model import JobState
from readyq_test_support import wait_for


def test_a_finished_job_is_not_kept_by_the_idle_handler_threads(queue: readyq.Queue) -> None:
    seen: list[weakref.ref[readyq.Job]] = []

    @queue.handler("step")
    def step(job: readyq.Job) -> None:
        seen.append(weakref.ref(job))

    ids = queue.enqueue_many([readyq.JobSpec("step", args={"n": n}) for n in range(3)])
    worker = queue.worker(concurrency=3, poll_interval=0.01)

    def all_done() -> bool:
        worker.run_once()
        return all(queue.get(i).state is JobState.DONE for i in ids)

    wait_for(all_done, "the jobs to finish", timeout=10, interval=0.01)
    assert worker.running == 0
    assert len(seen) == 3

    def all_released() -> bool:
        gc.collect()
        return all(ref() is None for ref in seen)

    # The threads go back to waiting just after the outcome is handed over.
    wait_for(all_released, "the idle handler threads to drop their last jobs", timeout=10)
