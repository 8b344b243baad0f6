"""A handler that raises SystemExit ends its own attempt, not the worker's threads.

The attempt is recorded failed with the exception; the handler thread survives and later
jobs keep running, on a worker with one slot, so a thread lost to the first job would
leave the second unrun.
"""

from __future__ import annotations

import sys
import threading

import readyq
from readyq import JobState


def test_system_exit_in_a_handler_fails_the_attempt_and_the_worker_goes_on(
    queue: readyq.Queue,
) -> None:
    @queue.handler("exit", max_attempts=1)
    def leave(job: readyq.Job) -> None:
        sys.exit(3)

    @queue.handler("ok")
    def ok(job: readyq.Job) -> int:
        return job.args["n"]

    first = queue.enqueue("exit")
    later = [queue.enqueue("ok", {"n": n}) for n in range(3)]
    worker = queue.worker(concurrency=1, poll_interval=0.02)
    thread = threading.Thread(target=worker.run, kwargs={"until_idle": True,
                                                        "handle_signals": False})
    thread.start()
    thread.join(30)
    if thread.is_alive():
        worker.stop()
        thread.join(10)
        raise AssertionError(f"the worker stalled after SystemExit: {queue.counts()}")
    info = queue.get(first)
    assert info.state is JobState.FAILED
    assert info.error is not None and "SystemExit" in info.error
    assert [queue.get(i).state for i in later] == [JobState.DONE] * 3
    assert [queue.get(i).result for i in later] == [0, 1, 2]
