"""Helpers shared by test modules (fixtures live in conftest.py).

Kept out of conftest.py: several test folders have a conftest.py of their own, and only
one module can be imported under the name ``conftest``.
"""

from __future__ import annotations

import pytest

import readyq


def run_until_idle(queue: readyq.Queue, **options: object) -> readyq.WorkerStats:
    """Run one in-process worker with short intervals until nothing is left to run."""
    options.setdefault("concurrency", 4)
    options.setdefault("poll_interval", 0.02)
    options.setdefault("lease_ttl", 10.0)
    options.setdefault("heartbeat_interval", 2.0)
    return queue.run_worker(until_idle=True, **options)  # type: ignore[arg-type]


def skip_on(dialect: str, current: str, reason: str) -> None:
    """Skip a test on one dialect, saying why inline."""
    if dialect == current:
        pytest.skip(f"not on {dialect}: {reason}")
