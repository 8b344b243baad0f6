"""A child answers only for the job it runs.

Its answers are JSON, of a bounded size, each with the token drawn for its job. An
answer left in the pipe for a job that is over (by a thread the handler left behind) is
dropped when it arrives during the next job, and the child is not reused after that
job; bytes that are no answer at all fail the attempt and the child is killed. The
worker never unpickles what a child sends.
"""

from __future__ import annotations

import readyq
from isolated import handlers
from readyq import JobState

FAST = {"poll_interval": 0.05, "lease_ttl": 10.0, "heartbeat_interval": 1.0}


def test_an_answer_left_behind_by_a_job_never_becomes_the_next_jobs(
    queue: readyq.Queue,
) -> None:
    queue.handler("forge", isolation="process")(handlers.forge_answers)
    queue.handler("echo", isolation="process")(handlers.slow_echo)
    forge = queue.enqueue("forge", {"after": 0.3})
    echo = queue.enqueue("echo", {"seconds": 1.0, "value": "mine"}, depends_on=[forge])
    after = queue.enqueue("echo", {"seconds": 0.0, "value": "later"}, depends_on=[echo])
    stats = queue.run_worker(until_idle=True, concurrency=1, **FAST)
    assert (queue.get(forge).state, queue.get(forge).result) == (JobState.DONE, "own")
    assert (queue.get(echo).state, queue.get(echo).result) == (JobState.DONE, "mine")
    assert (queue.get(after).state, queue.get(after).result) == (JobState.DONE, "later")
    assert stats.done == 3


def test_bytes_that_are_no_answer_fail_the_attempt_and_the_worker_goes_on(
    queue: readyq.Queue,
) -> None:
    queue.handler("garbage", isolation="process", max_attempts=1)(handlers.garbage_answer)
    queue.handler("echo", isolation="process")(handlers.slow_echo)
    bad = queue.enqueue("garbage")
    good = queue.enqueue("echo", {"seconds": 0.0, "value": "fine"})
    queue.run_worker(until_idle=True, concurrency=1, **FAST)
    info = queue.get(bad)
    assert info.state is JobState.FAILED
    assert "sent a message readyq does not accept" in (info.error or "")
    assert queue.get(good).result == "fine"
