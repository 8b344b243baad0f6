"""prometheus_client, opentelemetry and pydantic stay optional.

Each check runs in a fresh interpreter, where those packages can be hidden.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

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
        assert loaded == ["opentelemetry"], loaded  # the first attempt looked for it
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
