"""Structured logs, metrics hooks, the Prometheus exporter and OpenTelemetry spans.

Every scenario runs a real worker on each database; the logs are read with caplog, the
metrics from a private Prometheus registry, the spans from the SDK's in-memory exporter.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import prometheus_client
import pytest
from opentelemetry import trace
from opentelemetry.trace import StatusCode

import readyq
from observability_support import Broken, Recorder, span_exporter
from readyq.prometheus import PrometheusMetrics
from readyq_test_support import run_until_idle

SECRET = "s3cret-value-never-logged"
JOB_FIELDS = ("job_id", "job_type", "attempt", "group")


def sample(registry: Any, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)  # type: ignore[no-any-return]


def by_event(records: list[logging.LogRecord], event: str) -> list[logging.LogRecord]:
    return [r for r in records if getattr(r, "event", None) == event]


def test_logs_carry_job_fields_and_never_args(
    queue: readyq.Queue, caplog: pytest.LogCaptureFixture
) -> None:
    @queue.handler("ok")
    def ok(job: readyq.Job) -> int:
        return 1

    @queue.handler("boom", max_attempts=2, retry_backoff=0)
    def boom(job: readyq.Job) -> None:
        raise RuntimeError("no luck")

    good = queue.enqueue("ok", {"password": SECRET}, group="g1")
    bad = queue.enqueue("boom", {"token": SECRET}, group="g2")
    with caplog.at_level(logging.DEBUG, logger="readyq"):
        run_until_idle(queue)

    records = [r for r in caplog.records if r.name.startswith("readyq")]
    assert {r.name for r in records} <= {"readyq.worker", "readyq.store", "readyq.wakeup"}
    for r in records:
        assert SECRET not in r.getMessage() and SECRET not in repr(vars(r)), r
    started = by_event(records, "worker_started")
    stopped = by_event(records, "worker_stopped")
    assert len(started) == len(stopped) == 1
    assert started[0].worker_id == stopped[0].worker_id  # type: ignore[attr-defined]

    def fields(r: logging.LogRecord) -> tuple[Any, ...]:
        return tuple(getattr(r, f) for f in JOB_FIELDS)

    assert sorted(fields(r) for r in by_event(records, "job_started")) == sorted(
        [(good, "ok", 1, "g1"), (bad, "boom", 1, "g2"), (bad, "boom", 2, "g2")]
    )
    (retry,) = by_event(records, "job_retry_scheduled")
    assert fields(retry) == (bad, "boom", 1, "g2")
    assert retry.state == "retried" and retry.retry_in == 0  # type: ignore[attr-defined]
    assert retry.error_type == "RuntimeError"  # type: ignore[attr-defined]
    ends = {r.job_id: r for r in by_event(records, "job_finished")}  # type: ignore[attr-defined]
    assert fields(ends[good]) == (good, "ok", 1, "g1")
    assert ends[good].state == "done" and ends[good].levelno == logging.INFO  # type: ignore[attr-defined]
    assert fields(ends[bad]) == (bad, "boom", 2, "g2")
    assert ends[bad].state == "failed" and ends[bad].levelno == logging.WARNING  # type: ignore[attr-defined]
    for r in (ends[good], ends[bad], retry):
        assert isinstance(r.duration, float) and r.duration >= 0  # type: ignore[attr-defined]


def test_prometheus_counts_jobs_and_a_broken_hook_changes_nothing(
    queue: readyq.Queue, caplog: pytest.LogCaptureFixture
) -> None:
    registry = prometheus_client.CollectorRegistry()
    recorder = Recorder()
    queue.add_observer(Broken())
    metrics = PrometheusMetrics(queue, registry=registry)
    queue.add_observer(recorder)
    assert queue.observers[1:] == (metrics, recorder)

    @queue.handler("resize", max_attempts=1)
    def resize(job: readyq.Job) -> int:
        if job.args["n"] == 2:
            raise ValueError("bad image")
        return int(job.args["n"])

    queue.enqueue("resize", {"n": 1}, group="a")
    queue.enqueue_many([readyq.JobSpec("resize", {"n": n}, group="b") for n in (2, 3)])
    assert sample(registry, "readyq_jobs_enqueued_total", type="resize") == 3
    assert sample(registry, "readyq_ready_jobs", group="a") == 1
    assert sample(registry, "readyq_ready_jobs", group="b") == 2
    age = sample(registry, "readyq_queue_age_seconds", group="b")
    assert age is not None and 0 <= age < 60
    assert sample(registry, "readyq_in_flight", group="a") == 0

    with caplog.at_level(logging.ERROR, logger="readyq.metrics"):
        stats = run_until_idle(queue)
    assert (stats.done, stats.failed) == (2, 1)

    assert sample(registry, "readyq_jobs_started_total", type="resize") == 3
    assert sample(registry, "readyq_jobs_finished_total", type="resize", state="done") == 2
    assert sample(registry, "readyq_jobs_finished_total", type="resize", state="failed") == 1
    assert sample(registry, "readyq_job_duration_seconds_count", type="resize") == 3
    claims = sample(registry, "readyq_claim_seconds_count")
    assert claims is not None and claims >= 1
    assert sample(registry, "readyq_jobs_reclaimed_total") == 0
    assert sample(registry, "readyq_fenced_writes_total") == 0
    # Nothing is ready or in flight any more: the gauges drop the groups.
    assert sample(registry, "readyq_ready_jobs", group="b") is None

    # The recorder after the broken observer saw every hook the exporter saw.
    assert sorted(recorder.named("on_enqueued")) == [(1, "resize"), (2, "resize")]
    assert len(recorder.named("on_started")) == 3
    states = sorted(state for _, state, _ in recorder.named("on_finished"))
    assert states == ["done", "done", "failed"]
    broken = [r for r in caplog.records if r.name == "readyq.metrics"]
    assert broken and all("raised in on_" in r.getMessage() and r.exc_info for r in broken)


def test_prometheus_progress_gauges_per_type_of_the_jobs_in_flight(
    queue: readyq.Queue,
) -> None:
    """Per type, the jobs in flight that reported progress and their mean fraction
    done; no series per job; a type whose jobs ended drops out."""
    registry = prometheus_client.CollectorRegistry()
    PrometheusMetrics(queue, registry=registry)
    release = threading.Event()
    reported: list[int] = []

    @queue.handler("copy")
    def copy(job: readyq.Job) -> None:
        job.progress(job.args["done"], 1000, "copying")
        reported.append(job.id)
        release.wait(20)

    @queue.handler("count")
    def count(job: readyq.Job) -> None:
        job.progress(42)  # no total: counted, not in the mean
        reported.append(job.id)
        release.wait(20)

    @queue.handler("quiet")
    def quiet(job: readyq.Job) -> None:
        reported.append(job.id)
        release.wait(20)

    for done in (250, 750, 2000):  # 2000 of 1000 counts as all done
        queue.enqueue("copy", {"done": done})
    queue.enqueue("count", {})
    queue.enqueue("quiet", {})
    worker = queue.worker(concurrency=5, poll_interval=0.01, lease_ttl=10, heartbeat_interval=2)
    thread = threading.Thread(target=worker.run, kwargs={"handle_signals": False}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 15
        while len(reported) < 5:
            assert time.monotonic() < deadline, "the jobs did not start"
            time.sleep(0.01)
        assert sample(registry, "readyq_progress_jobs", type="copy") == 3
        mean = sample(registry, "readyq_progress_fraction", type="copy")
        assert mean is not None and abs(mean - (0.25 + 0.75 + 1.0) / 3) < 1e-9
        assert sample(registry, "readyq_progress_jobs", type="count") == 1
        assert sample(registry, "readyq_progress_fraction", type="count") is None
        assert sample(registry, "readyq_progress_jobs", type="quiet") is None
        labels = {tuple(sorted(s.labels)) for m in registry.collect()
                  if m.name.startswith("readyq_progress") for s in m.samples}
        assert labels == {("type",)}
        assert queue.progress_stats()["copy"].with_total == 3
    finally:
        release.set()
        worker.stop()
        thread.join(20)
    assert sample(registry, "readyq_progress_jobs", type="copy") is None
    assert queue.progress_stats() == {}


def test_reclaim_lease_loss_and_fenced_write_are_logged_and_counted(
    queue: readyq.Queue, caplog: pytest.LogCaptureFixture
) -> None:
    registry = prometheus_client.CollectorRegistry()
    PrometheusMetrics(queue, registry=registry)
    recorder = Recorder()
    queue.add_observer(recorder)
    entered, release = threading.Event(), threading.Event()

    @queue.handler("slow", max_attempts=1)
    def slow(job: readyq.Job) -> str:
        entered.set()
        release.wait(10)
        return "late"

    job_id = queue.enqueue("slow", {"key": SECRET}, group="g")
    worker = queue.worker(concurrency=1, poll_interval=0.01, lease_ttl=10, heartbeat_interval=2)
    with caplog.at_level(logging.INFO, logger="readyq"):
        assert worker.run_once().claimed == 1
        assert entered.wait(10)
        assert sample(registry, "readyq_in_flight", group="g") == 1
        # The database clock jumps past the lease: the next sweep reclaims the attempt.
        queue.store.clock_offset = 100.0
        worker._last_reclaim = 0.0
        assert worker.run_once().reclaimed == 1
        worker.heartbeats.run_once()  # the heartbeat learns that the lease is gone
        worker.run_once()  # and the loop forgets the attempt
        release.set()
        deadline = time.monotonic() + 10
        while not worker._inbox.outcomes:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        worker.run_once()  # the late result is fenced out
    worker._pool.shutdown()

    info = queue.get(job_id)
    assert info.state is readyq.JobState.FAILED and info.result is None
    records = [r for r in caplog.records if r.name.startswith("readyq")]
    assert all(SECRET not in repr(vars(r)) for r in records)
    expected = (job_id, "slow", 1, "g")
    for event, logger in (("job_reclaimed", "readyq.store"), ("lease_lost", "readyq.worker"),
                          ("write_fenced", "readyq.worker")):
        (r,) = by_event(records, event)
        assert r.name == logger and r.levelno == logging.WARNING
        assert tuple(getattr(r, f) for f in JOB_FIELDS) == expected, event
    (reclaim,) = by_event(records, "job_reclaimed")
    assert (reclaim.reason, reclaim.state) == ("lease_expired", "failed")  # type: ignore[attr-defined]
    assert not by_event(records, "job_finished")

    assert recorder.named("on_reclaimed") == [(1,)]
    assert recorder.named("on_fenced") == [(1,)]
    assert recorder.named("on_finished") == []
    assert sample(registry, "readyq_jobs_reclaimed_total") == 1
    assert sample(registry, "readyq_fenced_writes_total") == 1
    assert sample(registry, "readyq_in_flight", group="g") is None


def test_each_attempt_runs_in_a_span_named_after_its_type(queue: readyq.Queue) -> None:
    exporter = span_exporter()
    exporter.clear()
    tracer = trace.get_tracer("handler-code")

    @queue.handler("render")
    def render(job: readyq.Job) -> str:
        with tracer.start_as_current_span("inner"):
            return "ok"

    @queue.handler("crash", max_attempts=1)
    def crash(job: readyq.Job) -> None:
        raise KeyError("missing")

    ok = queue.enqueue("render", {"secret": SECRET}, group="tenant")
    bad = queue.enqueue("crash", group="other")
    run_until_idle(queue)

    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"render", "crash", "inner"}
    render_span, crash_span = spans["render"], spans["crash"]
    assert dict(render_span.attributes or {}) == {
        "readyq.job.id": ok, "readyq.job.type": "render", "readyq.job.attempt": 1,
        "readyq.job.group": "tenant",
    }
    assert render_span.status.status_code is StatusCode.UNSET
    assert spans["inner"].parent is not None
    assert spans["inner"].parent.span_id == render_span.context.span_id
    assert (crash_span.attributes or {})["readyq.job.id"] == bad
    assert crash_span.status.status_code is StatusCode.ERROR
    assert [e.name for e in crash_span.events] == ["exception"]
    assert all(SECRET not in repr(dict(s.attributes or {})) for s in spans.values())
