"""Helpers for the observability tests: a recording observer and the in-memory tracer.

OpenTelemetry accepts one global tracer provider per process, so the SDK provider and its
in-memory exporter are installed once and shared by every test that looks at spans.
"""

from __future__ import annotations

import threading
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import readyq
from readyq.metrics import Observer

_lock = threading.Lock()
_exporter: InMemorySpanExporter | None = None


def span_exporter() -> InMemorySpanExporter:
    """The process-wide in-memory exporter behind the global SDK tracer provider."""
    global _exporter
    with _lock:
        if _exporter is None:
            _exporter = InMemorySpanExporter()
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(_exporter))
            trace.set_tracer_provider(provider)
    return _exporter


class Recorder(Observer):
    """Records every hook call as (hook, arguments)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self._lock = threading.Lock()

    def _note(self, hook: str, *args: Any) -> None:
        with self._lock:
            self.calls.append((hook, args))

    def named(self, hook: str) -> list[tuple[Any, ...]]:
        return [args for name, args in self.calls if name == hook]

    def on_enqueued(self, n: int, type: str) -> None:
        self._note("on_enqueued", n, type)

    def on_claim(self, latency: float, claimed: int) -> None:
        self._note("on_claim", latency, claimed)

    def on_started(self, job: readyq.Job) -> None:
        self._note("on_started", job)

    def on_finished(self, job: readyq.Job, state: str, duration: float) -> None:
        self._note("on_finished", job, state, duration)

    def on_reclaimed(self, n: int) -> None:
        self._note("on_reclaimed", n)

    def on_fenced(self, n: int) -> None:
        self._note("on_fenced", n)


class Broken:
    """An observer whose every hook raises: the queue and its workers must not care."""

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("on_"):
            raise AttributeError(name)

        def hook(*args: Any) -> None:
            raise RuntimeError(f"{name} is broken")

        return hook
