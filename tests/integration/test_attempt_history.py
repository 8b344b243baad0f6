"""What happened stays visible: every attempt that did not end its job done is kept (its
worker, start, end, outcome and error), shown by ``show``, the dashboard and the JSON
API, and pruned with its job. A cancel records who asked for it."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

import readyq
from readyq import JobState, admin
from readyq.claim_order import ClaimOrder


def test_a_flaky_job_keeps_the_errors_of_its_failed_attempts(queue: readyq.Queue) -> None:
    @queue.handler("flaky", max_attempts=3, retry_backoff=0.001, retry_backoff_max=0.001)
    def flaky(job: readyq.Job) -> str:
        if job.attempt < 3:
            raise RuntimeError(f"boom {job.attempt}")
        return "ok"

    job_id = queue.enqueue("flaky")
    worker = queue.worker(poll_interval=0.01, worker_id="w-history")
    worker.run(until_idle=True, handle_signals=False)

    info = queue.get(job_id)
    assert (info.state, info.error) == (JobState.DONE, None)
    history = admin.show(queue, job_id).attempts
    assert [(a.attempt, a.outcome, a.worker) for a in history] == [
        (1, "retried", "w-history"), (2, "retried", "w-history"), (3, "done", "w-history")]
    assert "RuntimeError: boom 1" in (history[0].error or "")
    assert "RuntimeError: boom 2" in (history[1].error or "")
    for a in history:
        assert a.started_at is not None and a.ended_at is not None
        assert a.started_at <= a.ended_at
    assert queue.attempts(job_id) == history
    with pytest.raises(readyq.JobNotFound):
        queue.attempts(job_id + 1)
    as_json = admin.show(queue, job_id).to_json()["attempt_history"]
    assert [a["outcome"] for a in as_json] == ["retried", "retried", "done"]
    assert as_json[0]["started_at"].endswith("+00:00")


def test_the_sweep_records_a_lost_lease_and_prune_takes_the_history(
    queue: readyq.Queue,
) -> None:
    @queue.handler("t", max_attempts=1)
    def t(job: readyq.Job) -> None:
        return None

    job_id = queue.enqueue("t", max_attempts=1)
    claimed = queue.store.claim_jobs(ClaimOrder(
        owner="gone", cap=1, limit=1, lease_ttl=0.5, types=["t"],
    ))
    assert [c.id for c in claimed] == [job_id]
    queue.store.clock_offset = 5.0  # past the lease
    queue.store.reclaim_expired()

    info = queue.get(job_id)
    assert info.state is JobState.FAILED
    [attempt] = admin.show(queue, job_id).attempts
    assert (attempt.attempt, attempt.worker, attempt.outcome) == (1, "gone", "lease expired")
    assert attempt.started_at is None  # it never started
    assert attempt.error == info.error

    attempts = queue.store.tables.attempts
    count = sa.select(sa.func.count()).select_from(attempts)
    with queue.engine.connect() as conn:
        assert conn.execute(count).scalar_one() == 1
    queue.store.clock_offset = 10 * 86400.0
    admin.prune(queue, older_than=86400)
    with queue.engine.connect() as conn:
        assert conn.execute(count).scalar_one() == 0
    with pytest.raises(readyq.JobNotFound):
        queue.get(job_id)


def test_a_cancel_records_who_asked(queue: readyq.Queue) -> None:
    a, b, c = (queue.enqueue("t") for _ in range(3))
    assert queue.cancel(a) is True
    admin.cancel(queue, b, by="cli")
    assert queue.get(a).cancelled_by == "api"
    assert queue.get(b).cancelled_by == "cli"
    assert admin.show(queue, b).fields["cancelled_by"] == "cli"
    with pytest.raises(readyq.InvalidArgument, match="by must be one of"):
        admin.cancel(queue, c, by="me")
    assert queue.get(c).state is JobState.READY and queue.get(c).cancelled_by is None
    admin.retry(queue, b)
    assert queue.get(b).cancelled_by is None
