"""Once a job's outcome is recorded, the worker keeps nothing of it: the handler threads
that wait for the next job hold no reference to their last one, its arguments and
result included, even while the worker goes on (driven tick by tick here, so that its
threads stay up)."""

from __future__ import annotations

import gc
import time
import weakref

import readyq
from readyq.model import JobState


def test_a_finished_job_is_not_kept_by_the_idle_handler_threads(queue: readyq.Queue) -> None:
    seen: list[weakref.ref[readyq.Job]] = []

    @queue.handler("step")
    def step(job: readyq.Job) -> None:
        seen.append(weakref.ref(job))

    ids = queue.enqueue_many([readyq.JobSpec("step", args={"n": n}) for n in range(3)])
    worker = queue.worker(concurrency=3, poll_interval=0.01)
    deadline = time.monotonic() + 10
    while any(queue.get(i).state is not JobState.DONE for i in ids):
        assert time.monotonic() < deadline, "the jobs never finished"
        worker.run_once()
        time.sleep(0.01)
    assert worker.running == 0
    # The threads go back to waiting just after the outcome is handed over.
    while True:
        gc.collect()
        if not [ref for ref in seen if ref() is not None]:
            break
        assert time.monotonic() < deadline, "an idle handler thread still holds its last job"
        time.sleep(0.01)
    assert len(seen) == 3
