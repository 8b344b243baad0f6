from __future__ import annotations

import readyq
from readyq_test_support import run_until_idle


def test_a_job_runs_and_stores_its_result(queue: readyq.Queue) -> None:
    @queue.handler("echo")
    def echo(job: readyq.Job) -> object:
        return {"got": job.args, "attempt": job.attempt}

    job_id = queue.enqueue("echo", {"n": 1})
    stats = run_until_idle(queue)
    info = queue.get(job_id)
    assert info.state is readyq.JobState.DONE
    assert info.result == {"got": {"n": 1}, "attempt": 1}
    assert info.attempts == 1
    assert stats.done == 1
