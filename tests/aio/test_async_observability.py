"""The asyncio worker calls the same hooks, opens the same spans and validates the same
pydantic models as the thread worker; the Prometheus gauges read through its loop."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import prometheus_client
import pydantic
import pytest
from opentelemetry import trace
from opentelemetry.trace import StatusCode

import readyq
from async_support import async_engine
from observability_support import Recorder, span_exporter
from readyq.prometheus import PrometheusMetrics


class FetchArgs(pydantic.BaseModel):
    url: str
    retries: int = 0


class FetchResult(pydantic.BaseModel):
    size: int


def test_async_worker_reports_like_the_thread_worker(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    exporter = span_exporter()
    exporter.clear()
    recorder = Recorder()
    registry = prometheus_client.CollectorRegistry()
    tracer = trace.get_tracer("handler-code")
    seen: list[Any] = []

    def gauge(name: str, group: str) -> float | None:
        return registry.get_sample_value(name, {"group": group})  # type: ignore[no-any-return]

    async def scenario() -> readyq.WorkerStats:
        engine = async_engine(db)
        queue = readyq.AsyncQueue(engine, observers=[recorder])
        try:
            await queue.create_schema()
            PrometheusMetrics(queue, registry=registry)

            @queue.handler("fetch", args_model=FetchArgs, result_model=FetchResult)
            async def fetch(job: readyq.Job) -> FetchResult:
                seen.append(job.args)
                with tracer.start_as_current_span("download"):
                    await asyncio.sleep(0)
                return FetchResult(size=len(job.args.url))

            @queue.handler("parse", max_attempts=1)
            def parse(job: readyq.Job) -> None:
                raise ValueError("unparseable")

            with pytest.raises(readyq.InvalidJobArgs, match="do not match FetchArgs"):
                await queue.enqueue("fetch", {"url": 1})
            first = await queue.enqueue("fetch", {"url": "https://a.example"}, group="net")
            await queue.enqueue("parse", {}, group="cpu")
            # A scrape from another thread reads the gauges on this loop.
            ready = await asyncio.to_thread(gauge, "readyq_ready_jobs", "net")
            assert ready == 1
            # The progress gauges read on this loop too: no job in flight reports any.
            assert await queue.progress_stats() == {}
            assert await asyncio.to_thread(
                registry.get_sample_value, "readyq_progress_jobs", {"type": "fetch"}) is None
            stats: readyq.WorkerStats = await queue.run_worker(
                concurrency=2, poll_interval=0.02, lease_ttl=10.0, heartbeat_interval=2.0,
                until_idle=True,
            )
            info = await queue.get(first)
            assert info.args == {"url": "https://a.example", "retries": 0}
            assert info.result == {"size": 17}
            return stats
        finally:
            await queue.close()
            await engine.dispose()

    with caplog.at_level(logging.INFO, logger="readyq.worker"):
        stats = asyncio.run(scenario())
    assert (stats.done, stats.failed) == (1, 1)
    assert not [r for r in caplog.records if "not collected" in r.getMessage()]
    assert seen == [FetchArgs(url="https://a.example")]

    assert sorted(recorder.named("on_enqueued")) == [(1, "fetch"), (1, "parse")]
    assert sorted(job.type for (job,) in recorder.named("on_started")) == ["fetch", "parse"]
    finished = sorted((job.type, state) for job, state, _ in recorder.named("on_finished"))
    assert finished == [("fetch", "done"), ("parse", "failed")]
    assert recorder.named("on_claim")
    sample = registry.get_sample_value
    assert sample("readyq_jobs_finished_total", {"type": "fetch", "state": "done"}) == 1
    assert sample("readyq_jobs_finished_total", {"type": "parse", "state": "failed"}) == 1

    ends = {r.job_type: r for r in caplog.records  # type: ignore[attr-defined]
            if getattr(r, "event", None) == "job_finished"}
    assert ends["fetch"].group == "net" and ends["parse"].group == "cpu"  # type: ignore[attr-defined]

    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"fetch", "parse", "download"}
    assert spans["download"].parent is not None
    assert spans["download"].parent.span_id == spans["fetch"].context.span_id
    assert spans["fetch"].status.status_code is StatusCode.UNSET
    assert spans["parse"].status.status_code is StatusCode.ERROR
    assert (spans["parse"].attributes or {})["readyq.job.group"] == "cpu"
