"""A Prometheus exporter for readyq: ``pip install 'readyq[prometheus]'``.

:class:`PrometheusMetrics` is an observer (see :mod:`readyq.metrics`) that counts what a
queue and its workers do, plus a collector that reads per-group gauges from the database
when Prometheus scrapes. Serve the registry as usual, e.g. with
``prometheus_client.start_http_server(9100)``.

Metrics (``type``: the job type, ``state``: done, retried, failed or cancelled):

- ``readyq_jobs_enqueued_total{type}``, ``readyq_jobs_started_total{type}``,
  ``readyq_jobs_finished_total{type,state}``: counters of this process's enqueues and
  attempts;
- ``readyq_jobs_reclaimed_total``: attempts ended by this process's sweeps (expired lease
  or timeout, whichever worker ran them);
- ``readyq_fenced_writes_total``: outcomes fenced out after a lost lease;
- ``readyq_claim_seconds``: claim transaction latency (histogram);
- ``readyq_job_duration_seconds{type}``: how long handlers ran (histogram, up to a day);
- ``readyq_queue_age_seconds{group}``, ``readyq_ready_jobs{group}``,
  ``readyq_in_flight{group}``, ``readyq_resource_in_use{group,resource}`` (units of a
  named resource held by the group's jobs in flight): gauges read from the database at
  scrape time (across all workers), with :meth:`readyq.Queue.group_stats`;
- ``readyq_progress_jobs{type}`` (jobs in flight that reported ``Job.progress``) and
  ``readyq_progress_fraction{type}`` (the mean fraction done, 0 to 1, of those that gave a
  total): gauges read at scrape time with :meth:`readyq.Queue.progress_stats`. Labelled
  by type only, never by job, so that their series stay as few as the types.

prometheus_client is imported when a PrometheusMetrics is made, never by ``import readyq``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from readyq.errors import ConfigurationError
from readyq.metrics import Observer
from readyq.model import GroupStats, ProgressStats
from readyq.transient import describe

if TYPE_CHECKING:
    from readyq.aio.queue import AsyncQueue
    from readyq.model import Job
    from readyq.queue import Queue

log = logging.getLogger("readyq.metrics")

# Jobs run from seconds to hours: buckets up to a day.
DURATION_BUCKETS = (
    0.1, 0.5, 1, 5, 15, 30, 60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400,
    float("inf"),
)
# How long a scrape waits for an async queue's event loop to read the gauges.
SCRAPE_TIMEOUT = 10.0


def _client() -> Any:
    try:
        import prometheus_client
    except ImportError:
        raise ConfigurationError(
            "the Prometheus exporter needs prometheus_client: "
            "pip install 'readyq[prometheus]'"
        ) from None
    return prometheus_client


class PrometheusMetrics(Observer):
    """Counts a queue's jobs into Prometheus metrics and serves its gauges from the database.

    Making one attaches it to ``queue`` (it calls ``queue.add_observer(self)``) and
    registers its metrics and collector in ``registry`` (the default registry if None),
    so make one per queue and registry.

    Args:
        queue: a :class:`readyq.Queue` or :class:`readyq.AsyncQueue`. For an AsyncQueue,
            make the exporter inside its event loop: scrapes (from another thread, as
            ``start_http_server`` does) read the gauges on that loop.
        registry: a ``prometheus_client.CollectorRegistry``.
        gauges: read the per-group gauges at scrape time (True by default).

    Raises:
        ConfigurationError: prometheus_client is not installed.

    Example::

        from readyq.prometheus import PrometheusMetrics
        PrometheusMetrics(queue)
        prometheus_client.start_http_server(9100)
        queue.run_worker(concurrency=4)
    """

    def __init__(
        self,
        queue: Queue | AsyncQueue,
        *,
        registry: Any = None,
        gauges: bool = True,
    ) -> None:
        pc = _client()
        if registry is None:
            registry = pc.REGISTRY
        self.registry = registry
        self.enqueued = pc.Counter(
            "readyq_jobs_enqueued", "Jobs enqueued by this process.", ["type"],
            registry=registry,
        )
        self.started = pc.Counter(
            "readyq_jobs_started", "Attempts started by this process's workers.", ["type"],
            registry=registry,
        )
        self.finished = pc.Counter(
            "readyq_jobs_finished",
            "Attempts whose outcome this process's workers recorded, by resulting state.",
            ["type", "state"],
            registry=registry,
        )
        self.reclaimed = pc.Counter(
            "readyq_jobs_reclaimed",
            "Attempts ended by this process's sweeps (expired lease or timeout).",
            registry=registry,
        )
        self.fenced = pc.Counter(
            "readyq_fenced_writes",
            "Outcomes fenced out because their lease was lost.",
            registry=registry,
        )
        self.claim_seconds = pc.Histogram(
            "readyq_claim_seconds", "Latency of a worker's claim transaction.",
            registry=registry,
        )
        self.job_duration = pc.Histogram(
            "readyq_job_duration_seconds", "How long handlers ran, per attempt.", ["type"],
            buckets=DURATION_BUCKETS, registry=registry,
        )
        if gauges:
            registry.register(_GroupCollector(pc, _reader(queue, "group_stats")))
            registry.register(_ProgressCollector(_reader(queue, "progress_stats")))
        queue.add_observer(self)

    # -- hooks --------------------------------------------------------------------------

    def on_enqueued(self, n: int, type: str) -> None:
        self.enqueued.labels(type=type).inc(n)

    def on_claim(self, latency: float, claimed: int) -> None:
        self.claim_seconds.observe(latency)

    def on_started(self, job: Job) -> None:
        self.started.labels(type=job.type).inc()

    def on_finished(self, job: Job, state: str, duration: float) -> None:
        self.finished.labels(type=job.type, state=state).inc()
        self.job_duration.labels(type=job.type).observe(duration)

    def on_reclaimed(self, n: int) -> None:
        self.reclaimed.inc(n)

    def on_fenced(self, n: int) -> None:
        self.fenced.inc(n)


def _reader(queue: Queue | AsyncQueue, name: str) -> Callable[[], Any]:
    """A blocking function returning the queue's method ``name()`` (``group_stats`` or
    ``progress_stats``) of a sync or an async queue."""
    from readyq.queue import Queue

    if isinstance(queue, Queue):
        return getattr(queue, name)  # type: ignore[no-any-return]
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise ConfigurationError(
            "make PrometheusMetrics for an AsyncQueue inside its event loop (the gauges "
            "are read on that loop at scrape time), or pass gauges=False"
        ) from None

    def read() -> Any:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            # Blocking the loop on itself would deadlock: scrape from another thread.
            raise RuntimeError("the gauges of an AsyncQueue cannot be read on its own loop")
        future = asyncio.run_coroutine_threadsafe(getattr(queue, name)(), loop)
        return future.result(SCRAPE_TIMEOUT)

    return read


class _GroupCollector:
    """Per-group gauges read from the database at each scrape."""

    def __init__(self, pc: Any, read: Callable[[], dict[str, GroupStats]]) -> None:
        from prometheus_client.core import GaugeMetricFamily

        self._families = GaugeMetricFamily
        self._read = read

    def _empty(self) -> tuple[Any, Any, Any, Any]:
        gauge = self._families
        return (
            gauge(
                "readyq_queue_age_seconds",
                "Seconds the longest-waiting claimable job of the group has waited.",
                labels=["group"],
            ),
            gauge("readyq_ready_jobs", "Jobs of the group claimable now.", labels=["group"]),
            gauge("readyq_in_flight", "Jobs of the group leased or running.", labels=["group"]),
            gauge(
                "readyq_resource_in_use",
                "Units of a named resource held by the group's jobs in flight.",
                labels=["group", "resource"],
            ),
        )

    def describe(self) -> Iterator[Any]:
        # Names only: registering the collector must not query the database.
        yield from self._empty()

    def collect(self) -> Iterator[Any]:
        age, ready, flight, uses = self._empty()
        try:
            stats = self._read()
        except Exception as exc:
            # A scrape must still serve the counters when the database is away.
            log.warning("readyq gauges not collected: %s", describe(exc))
            return
        for key, st in stats.items():
            if st.oldest_ready_age is not None:
                age.add_metric([key], st.oldest_ready_age)
            ready.add_metric([key], st.ready)
            flight.add_metric([key], st.in_flight)
            for name, units in st.uses.items():
                uses.add_metric([key, name], units)
        yield age
        yield ready
        yield flight
        yield uses


class _ProgressCollector:
    """Per-type gauges of the progress of the jobs in flight, read at each scrape."""

    def __init__(self, read: Callable[[], dict[str, ProgressStats]]) -> None:
        from prometheus_client.core import GaugeMetricFamily

        self._families = GaugeMetricFamily
        self._read = read

    def _empty(self) -> tuple[Any, Any]:
        gauge = self._families
        return (
            gauge("readyq_progress_jobs",
                  "Jobs of the type in flight that reported progress.", labels=["type"]),
            gauge("readyq_progress_fraction",
                  "Mean fraction done (0 to 1) of the type's jobs in flight that reported "
                  "progress with a total.", labels=["type"]),
        )

    def describe(self) -> Iterator[Any]:
        yield from self._empty()

    def collect(self) -> Iterator[Any]:
        jobs, fraction = self._empty()
        try:
            stats = self._read()
        except Exception as exc:
            log.warning("readyq progress gauges not collected: %s", describe(exc))
            return
        for type_, st in stats.items():
            jobs.add_metric([type_], st.reporting)
            if st.mean_fraction is not None:
                fraction.add_metric([type_], st.mean_fraction)
        yield jobs
        yield fraction
