"""The synchronous and the asyncio paths share one retry loop and one worker loop; these
pin the behaviours where the two once differed, each on both paths and every database:

* a read-only unit ends with a COMMIT (psycopg keeps its prepared statements), never a
  ROLLBACK;
* a write's ``after_commit`` runs once the COMMIT is done;
* a worker opens no tracing span for an attempt when nothing traces.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

import readyq
import readyq.tracing
import readyq.worker
from async_support import Runner, async_engine

MODES = ("sync", "async")


class Path:
    """A queue of one mode, with its store's calls made synchronous for the test."""

    def __init__(self, db: str, mode: str) -> None:
        self.mode = mode
        self.runner: Runner | None = None
        if mode == "sync":
            self.q: Any = readyq.Queue(db)
            self.engine = self.q.engine
            self.store = self.q.store
        else:
            self.runner = Runner()
            self.aengine = async_engine(db)
            self.q = readyq.AsyncQueue(self.aengine)
            self.engine = self.aengine.sync_engine
            self.store = self.q.queue.store
        self.call(self.q.create_schema)

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        return out if self.runner is None else self.runner.run(out)

    def store_call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if self.runner is None:
            return fn(*args, **kwargs)
        return self.runner.run(self.q.run(fn, *args, **kwargs))

    def close(self) -> None:
        self.call(self.q.close)
        if self.runner is not None:
            self.runner.run(self.aengine.dispose())
            self.runner.close()


@pytest.fixture(params=MODES)
def path(request: pytest.FixtureRequest, db: str) -> Iterator[Path]:
    p = Path(db, request.param)
    try:
        yield p
    finally:
        p.close()


def _ends(engine: sa.Engine, events: list[str]) -> None:
    sa.event.listen(engine, "commit", lambda conn: events.append("commit"))
    sa.event.listen(engine, "rollback", lambda conn: events.append("rollback"))


def test_a_read_ends_with_a_commit(path: Path) -> None:
    events: list[str] = []
    _ends(path.engine, events)
    jobs = path.store.tables.jobs

    def unit(conn: sa.Connection) -> int:
        return int(conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar_one())

    assert path.store_call(path.store.read, unit) == 0
    assert events == ["commit"]


def test_after_commit_runs_once_the_commit_is_done(path: Path) -> None:
    events: list[str] = []
    _ends(path.engine, events)
    gate = path.store.tables.gate

    def unit(conn: sa.Connection) -> int:
        events.append("unit")
        return int(conn.execute(sa.select(gate.c.seq)).scalar_one())

    def after(out: int) -> int:
        events.append("after_commit")
        return out + 1

    assert path.store_call(path.store.write, unit, after_commit=after) == 1
    assert events == ["unit", "commit", "after_commit"]


def test_no_span_is_opened_when_nothing_traces(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[int] = []
    real = readyq.tracing.attempt_span

    def counting(job: Any) -> Any:
        opened.append(job.id)
        return real(job)

    monkeypatch.setattr(readyq.worker, "spans_enabled", lambda: False)
    monkeypatch.setattr(readyq.worker, "attempt_span", counting)
    import readyq.aio.worker as aio_worker

    monkeypatch.setattr(aio_worker, "attempt_span", counting)

    if path.mode == "sync":
        path.q.handler("plain")(lambda job: None)
        path.q.enqueue("plain")
        stats = path.q.run_worker(until_idle=True, poll_interval=0.05)
    else:

        async def handler(job: readyq.Job) -> None:
            return None

        path.q.handler("coro")(handler)
        path.call(path.q.enqueue, "coro")
        stats = path.call(path.q.run_worker, until_idle=True, poll_interval=0.05)
    assert stats.done == 1
    assert opened == []
