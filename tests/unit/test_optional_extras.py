"""prometheus_client, opentelemetry and pydantic stay optional.

Each check runs in a fresh interpreter, where those packages can be hidden.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HIDDEN = ("prometheus_client", "opentelemetry", "pydantic")


def run(code: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr


def test_readyq_imports_none_of_them_until_asked(tmp_path: Path) -> None:
    run(
        f"""
        import sys
        import readyq, readyq.metrics, readyq.prometheus, readyq.tracing, readyq.validation
        q = readyq.Queue("sqlite:///q.db")
        q.create_schema()
        q.handler("x")(lambda job: 1)
        q.enqueue("x")
        assert q.run_worker(until_idle=True, poll_interval=0.01).done == 1
        loaded = [m for m in {HIDDEN!r} if m in sys.modules]
        assert loaded == [], loaded
        """,
        tmp_path,
    )


def test_a_worker_traces_once_the_application_installs_a_provider(tmp_path: Path) -> None:
    # The application imports the API after the worker was built: the next attempt has
    # its span.
    run(
        """
        import sys
        import readyq
        q = readyq.Queue("sqlite:///q.db")
        q.create_schema()
        q.handler("x")(lambda job: 1)
        worker = q.worker(poll_interval=0.01)
        q.enqueue("x")
        assert worker.run(until_idle=True).done == 1
        assert "opentelemetry" not in sys.modules
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        q.enqueue("x")
        assert worker.run(until_idle=True).done == 2  # the worker's counts go on
        assert [s.name for s in exporter.get_finished_spans()] == ["x"]
        """,
        tmp_path,
    )


def test_a_provider_named_by_the_api_setting_is_loaded_without_an_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # OTEL_PYTHON_TRACER_PROVIDER names a provider the API loads by itself: readyq then
    # imports the API, and attempts get spans although the application never imported it.
    monkeypatch.setenv("OTEL_PYTHON_TRACER_PROVIDER", "sdk_tracer_provider")
    run(
        """
        import sys
        import readyq
        from readyq.tracing import spans_enabled
        q = readyq.Queue("sqlite:///q.db")
        q.create_schema()
        q.handler("x")(lambda job: 1)
        q.enqueue("x")
        assert q.run_worker(until_idle=True, poll_interval=0.01).done == 1
        assert "opentelemetry.trace" in sys.modules
        assert spans_enabled()
        """,
        tmp_path,
    )


def test_without_them_jobs_run_and_asking_for_them_is_a_clear_error(tmp_path: Path) -> None:
    run(
        f"""
        import sys
        for name in {HIDDEN!r}:
            sys.modules[name] = None  # makes `import name` raise ImportError
        import readyq
        from readyq.prometheus import PrometheusMetrics
        q = readyq.Queue("sqlite:///q.db")
        q.create_schema()
        q.handler("x")(lambda job: 1)
        q.enqueue("x")
        assert q.run_worker(until_idle=True, poll_interval=0.01).done == 1
        try:
            PrometheusMetrics(q)
        except readyq.ConfigurationError as exc:
            assert "pip install 'readyq[prometheus]'" in str(exc), exc
        else:
            raise AssertionError("no error")
        try:
            q.handler("y", args_model=dict)
        except readyq.ConfigurationError as exc:
            assert "pip install 'readyq[pydantic]'" in str(exc), exc
        else:
            raise AssertionError("no error")
        """,
        tmp_path,
    )
