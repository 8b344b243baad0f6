"""One rule for every handler setting (``max_attempts``, ``timeout``): a value given at
enqueue wins; otherwise the registration of the handler that runs the job decides, when
it runs. So a producer that registers no handlers (``readyq enqueue`` without ``--app``)
stores no guess of its own."""

from __future__ import annotations

import time

import pytest

import readyq
from readyq import JobState, admin


@pytest.fixture
def producer(db: str, queue: readyq.Queue) -> readyq.Queue:
    """A second queue on the same tables, with no handlers: as a producer process."""
    q = readyq.Queue(db)
    yield q  # type: ignore[misc]
    q.close()


def _run(worker_queue: readyq.Queue) -> None:
    worker_queue.run_worker(until_idle=True, poll_interval=0.02, lease_ttl=10,
                            heartbeat_interval=2)


def test_the_handlers_max_attempts_decides_when_none_was_given(
    queue: readyq.Queue, producer: readyq.Queue
) -> None:
    @queue.handler("flaky", max_attempts=2, retry_backoff=0)
    def flaky(job: readyq.Job) -> None:
        raise RuntimeError(f"attempt {job.attempt}")

    job_id = producer.enqueue("flaky")
    assert producer.get(job_id).max_attempts is None  # not decided yet
    assert admin.show(producer, job_id).fields["max_attempts"] is None
    _run(queue)
    info = queue.get(job_id)
    assert info.state is JobState.FAILED
    assert info.attempts == info.max_attempts == 2  # the handler's, not the default 3


def test_a_value_given_at_enqueue_wins(queue: readyq.Queue, producer: readyq.Queue) -> None:
    @queue.handler("flaky", max_attempts=2, retry_backoff=0)
    def flaky(job: readyq.Job) -> None:
        raise RuntimeError(f"attempt {job.attempt}")

    job_id = producer.enqueue("flaky", max_attempts=4)
    assert producer.get(job_id).max_attempts == 4
    _run(queue)
    assert (queue.get(job_id).attempts, queue.get(job_id).max_attempts) == (4, 4)


def test_the_queue_default_decides_for_a_handler_that_sets_none(
    db: str, producer: readyq.Queue
) -> None:
    with readyq.Queue(db, default_max_attempts=1) as worker_queue:

        @worker_queue.handler("plain", retry_backoff=0)
        def plain(job: readyq.Job) -> None:
            raise RuntimeError("no")

        job_id = producer.enqueue("plain")
        _run(worker_queue)
        assert (worker_queue.get(job_id).state, worker_queue.get(job_id).attempts) == (
            JobState.FAILED, 1)


def test_timeouts_follow_the_same_rule(queue: readyq.Queue, producer: readyq.Queue) -> None:
    @queue.handler("slow", timeout=0.2, max_attempts=1)
    def slow(job: readyq.Job) -> None:
        time.sleep(job.args["sleep"])

    from_handler = producer.enqueue("slow", {"sleep": 1.0})
    given = producer.enqueue("slow", {"sleep": 0.5}, timeout=5)
    _run(queue)
    assert queue.get(from_handler).state is JobState.FAILED  # the handler's 0.2 s
    assert "timed out" in (queue.get(from_handler).error or "")
    assert queue.get(given).state is JobState.DONE  # 5 s given at enqueue wins


def test_a_retried_job_that_never_ran_keeps_the_rule(
    queue: readyq.Queue, producer: readyq.Queue
) -> None:
    @queue.handler("t", max_attempts=2)
    def t(job: readyq.Job) -> None:
        return None

    job_id = producer.enqueue("t")
    producer.cancel(job_id)
    admin.retry(producer, job_id)
    assert producer.get(job_id).max_attempts is None
    _run(queue)
    assert (queue.get(job_id).state, queue.get(job_id).max_attempts) == (JobState.DONE, 2)


def test_show_says_who_decides(
    db: str, producer: readyq.Queue, capsys: pytest.CaptureFixture[str]
) -> None:
    from readyq.cli import main

    undecided = producer.enqueue("t")
    given = producer.enqueue("t", max_attempts=5, timeout=9)
    assert main(["--db", db, "show", str(undecided)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "the handler's max_attempts decides when it runs" in out
    assert "the handler's, if any" in out
    assert main(["--db", db, "show", str(given)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "0 of 5" in out and "9s (given at enqueue)" in out
