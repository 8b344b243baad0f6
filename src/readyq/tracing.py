"""OpenTelemetry spans around handler runs, when ``opentelemetry-api`` is installed.

Each attempt runs inside a span named after the job type (kind ``CONSUMER``) with the
attributes ``readyq.job.id``, ``readyq.job.type``, ``readyq.job.attempt`` and
``readyq.job.group``; an attempt that raises (or whose args or result fail validation)
gets status ``ERROR`` and the exception recorded. The span is current while the handler
runs, so spans the handler opens are its children. Args are never attributes.

Spans are made once an SDK's tracer provider is installed. That can only be done through
``opentelemetry.trace``, so readyq looks for the module among those the application has
imported and never imports it for a process that has not (a worker would pay several
milliseconds at start for nothing), with one exception: ``OTEL_PYTHON_TRACER_PROVIDER``
names a provider that the API loads itself, and then the API is imported once. Without
the API (``pip install 'readyq[otel]'``) this module does nothing.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

from readyq.model import ClaimedJob

_lock = threading.Lock()
_api: Any = None  # opentelemetry.trace as imported here, False when not installed
TRACER_NAME = "readyq"
API_MODULE = "opentelemetry.trace"
# The API's own setting for a provider it loads at its first use.
PROVIDER_SETTING = "OTEL_PYTHON_TRACER_PROVIDER"


def _trace_api() -> Any:
    """The tracing API's module, or None when no tracer provider can be installed (see
    the module's doc)."""
    global _api
    imported = sys.modules.get(API_MODULE)
    if imported is not None:
        return imported
    if PROVIDER_SETTING not in os.environ:
        return None
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
    """Whether an attempt gets a real span: the API is loaded and an SDK's tracer
    provider is set. Until then the API's spans are no-ops that still cost several
    microseconds each, so none is made (the check follows a provider set later)."""
    trace = _trace_api()
    if trace is None:
        return False
    try:
        provider = trace.get_tracer_provider()
        return not isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))
    except AttributeError:  # another thread is still importing the module
        return False


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
