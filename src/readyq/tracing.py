"""OpenTelemetry spans around handler runs, when ``opentelemetry-api`` is installed.

Each attempt runs inside a span named after the job type (kind ``CONSUMER``) with the
attributes ``readyq.job.id``, ``readyq.job.type``, ``readyq.job.attempt`` and
``readyq.job.group``; an attempt that raises (or whose args or result fail validation)
gets status ``ERROR`` and the exception recorded. The span is current while the handler
runs, so spans the handler opens are its children. Args are never attributes.

The API is imported lazily, once: without it (``pip install 'readyq[otel]'``) this module
does nothing, and until an SDK's tracer provider is installed no span is made.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from readyq.model import ClaimedJob

_lock = threading.Lock()
_api: Any = None  # the opentelemetry.trace module, False when not installed
TRACER_NAME = "readyq"


def _trace_api() -> Any:
    global _api
    if _api is None:
        with _lock:
            if _api is None:
                try:
                    from opentelemetry import trace
                except ImportError:
                    _api = False
                else:
                    _api = trace
    return _api or None


def spans_enabled() -> bool:
    """Whether an attempt gets a real span: the API is installed and an SDK's tracer
    provider is set. Until then the API's spans are no-ops that still cost several
    microseconds each, so none is made (the check follows a provider set later)."""
    trace = _trace_api()
    return trace is not None and not isinstance(
        trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
    )


@contextlib.contextmanager
def attempt_span(job: ClaimedJob) -> Iterator[Any]:
    """Run the block inside the attempt's span; yield the span (None when spans are not
    enabled, see :func:`spans_enabled`)."""
    if not spans_enabled():
        yield None
        return
    trace = _trace_api()
    from readyq import __version__

    tracer = trace.get_tracer(TRACER_NAME, __version__)
    with tracer.start_as_current_span(
        job.type,
        kind=trace.SpanKind.CONSUMER,
        attributes={
            "readyq.job.id": job.id,
            "readyq.job.type": job.type,
            "readyq.job.attempt": job.attempt,
            "readyq.job.group": job.group,
        },
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span


def mark_failed(span: Any, exc: BaseException) -> None:
    """Record ``exc`` on the attempt's span and set its status to ERROR."""
    if span is None:
        return
    trace = _trace_api()
    span.record_exception(exc)
    span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
