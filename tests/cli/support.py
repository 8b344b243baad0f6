"""Helpers for the CLI tests (the fixtures are in conftest.py next to this file)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

import readyq


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    @property
    def one_line_error(self) -> bool:
        """A user mistake: exactly one line on stderr, no traceback, nothing on stdout."""
        return (self.code != 0 and self.err.startswith("readyq: ")
                and self.err.count("\n") == 1 and "Traceback" not in self.err)


Run = Callable[..., Result]


def set_rows(queue: readyq.Queue, ids: list[int], **values: Any) -> None:
    """Write columns directly (to make finished jobs of a given age, say)."""
    j = queue.store.tables.jobs
    with queue.engine.begin() as conn:
        conn.execute(sa.update(j).where(j.c.id.in_(ids)).values(**values))


def db_now(queue: readyq.Queue) -> float:
    with queue.engine.connect() as conn:
        return float(conn.execute(sa.select(queue.store.now())).scalar_one())


def run_until_idle(queue: readyq.Queue) -> readyq.WorkerStats:
    return queue.run_worker(until_idle=True, concurrency=4, poll_interval=0.02,
                            lease_ttl=10.0, heartbeat_interval=2.0)


def wait_for(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)
