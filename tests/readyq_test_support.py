"""Helpers shared by test modules (fixtures live in conftest.py).

Kept out of conftest.py: several test folders have a conftest.py of their own, and only
one module can be imported under the name ``conftest``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa

import readyq


def run_until_idle(queue: readyq.Queue, **options: object) -> readyq.WorkerStats:
    """Run one in-process worker with short intervals until nothing is left to run."""
    options.setdefault("concurrency", 4)
    options.setdefault("poll_interval", 0.02)
    options.setdefault("lease_ttl", 10.0)
    options.setdefault("heartbeat_interval", 2.0)
    return queue.run_worker(until_idle=True, **options)  # type: ignore[arg-type]


T = TypeVar("T")


def wait_for(
    condition: Callable[[], T], what: str, timeout: float = 20.0, interval: float = 0.005
) -> T:
    """Poll ``condition`` until it returns something truthy, and return that; fail
    naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def skip_on(dialect: str, current: str, reason: str) -> None:
    """Skip a test on one dialect, saying why inline."""
    if dialect == current:
        pytest.skip(f"not on {dialect}: {reason}")


def observed(queue: readyq.Queue, run: Any) -> list[tuple[str, bool | None]]:
    """Each statement ``run`` sends (whitespace folded), and whether it ran inside a
    transaction, as the driver tells once it is done (PostgreSQL; None elsewhere)."""
    seen: list[tuple[str, bool | None]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, context: Any,
               executemany: bool) -> None:
        info = getattr(conn.connection.driver_connection, "info", None)
        status = getattr(info, "transaction_status", None)
        seen.append((" ".join(statement.split()),
                     None if status is None else status.name != "IDLE"))

    sa.event.listen(queue.engine, "after_cursor_execute", record)
    try:
        run()
    finally:
        sa.event.remove(queue.engine, "after_cursor_execute", record)
    return seen


def cut_connection(conn: Any, kind: str) -> None:
    """Fail the statement about to run on ``conn`` as a lost connection does.

    ``driver``: close the connection under it, so that the driver raises its own error
    (SQLAlchemy wraps it and sees a disconnect); SQLite has no connection to lose, so
    its driver's "database is locked" stands in. ``os``: the socket's own error, which
    nothing wraps.
    """
    if kind == "os":
        raise ConnectionResetError(104, "Connection reset by peer")
    if conn.dialect.name == "sqlite":
        raise conn.dialect.loaded_dbapi.OperationalError("database is locked")
    conn.connection.dbapi_connection.close()
