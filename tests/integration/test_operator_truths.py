"""What the operator sees is what happened.

* A worker that rehearsed its claim at start (``prepare()``, as ``readyq worker`` does)
  records its resources' capacities at its first real claim: the rehearsal is rolled
  back, and so is what it wrote.
* A container an operator cancelled ends ``cancelled``, and the cancel says how many
  jobs it ended at once and how many running ones it asked to stop.
"""

from __future__ import annotations

import logging
import time

import pytest

import readyq
from readyq import JobState, admin


def test_a_prepared_worker_records_its_resource_capacities(queue: readyq.Queue) -> None:
    queue.resource("gpu", capacity=2)
    queue.handler("train", uses={"gpu": 1})(lambda job: None)
    ids = [queue.enqueue("train") for _ in range(3)]
    worker = queue.worker(concurrency=4, poll_interval=0.02)
    worker.prepare()
    assert queue.resource_stats()["gpu"].capacity is None  # the rehearsal left nothing
    worker.run(until_idle=True, handle_signals=False)
    assert [queue.get(i).state for i in ids] == [JobState.DONE] * 3
    gpu = queue.resource_stats()["gpu"]
    assert gpu.capacity == 2 and gpu.seen_age is not None and gpu.seen_age < 30


def test_a_cancelled_container_ends_cancelled_with_its_nested_ones(
    queue: readyq.Queue,
) -> None:
    """Cancelling a running pipeline's container ends it, and the containers in it,
    ``cancelled``, not ``failed``; the cancel says what it did."""
    import threading

    started = threading.Event()

    @queue.handler("step")
    def step(job: readyq.Job) -> None:
        started.set()
        while not job.cancelled:
            job.heartbeat()
            time.sleep(0.02)
        raise RuntimeError("stopped on request")

    outer = queue.enqueue_container("pipeline")
    running = queue.enqueue("step", parent=outer)
    inner = queue.enqueue_container("stage", parent=outer)
    waiting = [queue.enqueue("step", parent=inner, depends_on=[running]) for _ in range(2)]
    worker = queue.worker(concurrency=1, poll_interval=0.02, heartbeat_interval=0.1,
                          lease_ttl=5)
    runner = threading.Thread(target=worker.run, kwargs={"until_idle": True,
                                                         "handle_signals": False})
    runner.start()
    try:
        assert started.wait(20)
        result = admin.cancel(queue, outer)
    finally:
        runner.join(30)
    assert (result.before, result.after) == ("active", "active")
    assert (result.ended, result.stopping) == (2, 1)
    states = {i: queue.get(i).state for i in (outer, inner, running, *waiting)}
    assert states == {outer: JobState.CANCELLED, inner: JobState.CANCELLED,
                      running: JobState.CANCELLED,
                      waiting[0]: JobState.CANCELLED, waiting[1]: JobState.CANCELLED}


def test_ctrl_c_stops_the_worker_then_raises(queue: readyq.Queue) -> None:
    """SIGINT (Ctrl-C) in the main thread: the worker stops gracefully, hands back
    nothing it finished, and ``run`` raises KeyboardInterrupt; SIGTERM returns."""
    import os
    import signal

    queue.handler("t")(lambda job: os.kill(os.getpid(), signal.SIGINT))
    job_id = queue.enqueue("t")
    worker = queue.worker(poll_interval=0.02)
    try:
        worker.run()
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("run() returned after Ctrl-C")
    assert queue.get(job_id).state is JobState.DONE  # the grace let it be recorded
    queue.handler("u")(lambda job: os.kill(os.getpid(), signal.SIGTERM))
    queue.enqueue("u")
    stats = queue.worker(poll_interval=0.02).run()
    assert stats.done == 1


def test_a_cap_of_zero_is_refused(queue: readyq.Queue) -> None:
    queue.handler("t")(lambda job: None)
    for cap in (0, [4, 0]):
        try:
            queue.worker(concurrency=cap)
        except readyq.ConfigurationError as exc:
            assert "at least 1" in str(exc)
        else:
            raise AssertionError(f"concurrency={cap!r} was accepted")


def test_a_worker_warns_of_ready_jobs_no_handler_of_its_queue_runs(
    queue: readyq.Queue, caplog: pytest.LogCaptureFixture
) -> None:
    """Two applications that keep the default prefix see each other's jobs."""
    other_app = readyq.Queue(queue.engine)
    for t in ("invoice", "email", "resize"):
        other_app.enqueue(t)
    queue.handler("resize")(lambda job: None)
    with caplog.at_level(logging.WARNING, logger="readyq.worker"):
        queue.run_worker(until_idle=True, poll_interval=0.02)
    [warning] = [r for r in caplog.records if getattr(r, "event", "") == "foreign_types"]
    assert warning.job_types == ["email", "invoice"]  # type: ignore[attr-defined]
    assert "readyq_" in warning.getMessage() and "prefix=" in warning.getMessage()


def test_python_dash_m_readyq_is_the_command() -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "readyq", "--help"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "migrate" in done.stdout


def test_async_queue_without_its_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "greenlet", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "readyq.aio", raising=False)
    monkeypatch.delitem(sys.modules, "readyq.aio.queue", raising=False)
    with pytest.raises(readyq.ConfigurationError, match=r"readyq\[async\]"):
        readyq.AsyncQueue("sqlite+aiosqlite:///nowhere.db")
