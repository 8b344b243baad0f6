"""Helpers for the multi-process tests.

* Worker processes: :class:`Workers` starts ``app.py`` processes and always kills what
  is left of them; :class:`WorkerProcess` pauses, resumes, kills and waits for one.
* Deadlines: :func:`wait_for` polls a condition until it holds or its deadline passes.
* The history table: one row per handler event (``start``, ``end``, ``lease_lost``,
  ``fenced``), written by the worker processes in short transactions of their own and
  read back here; :func:`intervals`, :func:`max_concurrency` and :func:`slot_time`
  turn it into the figures the tests assert on.

This module is imported by ``app.py`` too, so it does not import pytest.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa

import readyq

APP = Path(__file__).with_name("app.py")
JOB_TYPE = "work"
EVENTS = ("start", "end", "lease_lost", "fenced")

T = TypeVar("T")

metadata = sa.MetaData()
history = sa.Table(
    "history",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.BigInteger, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("worker", sa.String(120), nullable=False),
    sa.Column("grp", sa.String(200), nullable=True),
    sa.Column("event", sa.String(16), nullable=False),
    sa.Column("at", sa.Double, nullable=False),
)


# -- deadlines ---------------------------------------------------------------------------


def wait_for(
    condition: Callable[[], T], *, timeout: float, what: str, interval: float = 0.02
) -> T:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


# -- the history table -------------------------------------------------------------------


def create_history(engine: sa.Engine) -> None:
    metadata.create_all(engine, checkfirst=True)


def history_engine(url: str) -> sa.Engine:
    """The engine a worker process writes its history with (small pool, busy timeout)."""
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = sa.create_engine(
            parsed, connect_args={"timeout": 30.0}, pool_size=4, max_overflow=8
        )

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA busy_timeout = 30000")
            # History rows need not survive a power cut; this keeps commits cheap.
            cur.execute("PRAGMA synchronous = NORMAL")
            cur.close()

        return engine
    return sa.create_engine(parsed, pool_size=4, max_overflow=8)


def _retryable(engine: sa.Engine, exc: sa.exc.DBAPIError) -> bool:
    """Errors after which nothing was written (so inserting again cannot duplicate)."""
    if engine.dialect.name == "sqlite":
        return "locked" in str(exc.orig).lower()
    if engine.dialect.name in ("mysql", "mariadb"):
        args: tuple[Any, ...] = getattr(exc.orig, "args", ())
        return bool(args) and args[0] in (1205, 1213)
    return getattr(exc.orig, "sqlstate", None) in ("40001", "40P01")


def record(
    engine: sa.Engine, *, job_id: int, attempt: int, worker: str, grp: str | None, event: str
) -> None:
    """Insert one history row in its own short transaction; ``at`` is taken first."""
    assert event in EVENTS, event
    row = {
        "job_id": job_id,
        "attempt": attempt,
        "worker": worker,
        "grp": grp,
        "event": event,
        "at": time.time(),
    }
    deadline = time.monotonic() + 60.0
    while True:
        try:
            with engine.connect() as conn:
                if engine.dialect.name == "sqlite":
                    # Take the write lock up front: the busy timeout then applies.
                    conn.exec_driver_sql("BEGIN IMMEDIATE")
                conn.execute(sa.insert(history).values(**row))
                conn.commit()
            return
        except sa.exc.DBAPIError as exc:
            if not _retryable(engine, exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


@dataclass(frozen=True)
class Event:
    job_id: int
    attempt: int
    worker: str
    grp: str | None
    event: str
    at: float


def read_history(engine: sa.Engine) -> list[Event]:
    """Every history row, in time order."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(
                history.c.job_id,
                history.c.attempt,
                history.c.worker,
                history.c.grp,
                history.c.event,
                history.c.at,
            ).order_by(history.c.at, history.c.id)
        ).all()
    return [
        Event(int(r.job_id), int(r.attempt), r.worker, r.grp, r.event, float(r.at)) for r in rows
    ]


def count_events(engine: sa.Engine, event: str, **where: Any) -> int:
    conds = [history.c.event == event] + [history.c[k] == v for k, v in where.items()]
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).where(*conds)).scalar_one())


# -- figures from the history -------------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    job_id: int
    attempt: int
    worker: str
    grp: str | None
    start: float
    end: float


def intervals(events: Iterable[Event]) -> list[Interval]:
    """Pair each attempt's ``start`` with its ``end``; fails on a start without an end."""
    starts: dict[tuple[int, int, str], Event] = {}
    out: list[Interval] = []
    for e in events:
        key = (e.job_id, e.attempt, e.worker)
        if e.event == "start":
            assert key not in starts, f"two starts for {key}"
            starts[key] = e
        elif e.event == "end":
            s = starts.pop(key)
            out.append(Interval(e.job_id, e.attempt, e.worker, s.grp, s.at, e.at))
    assert not starts, f"attempts that started and never ended: {sorted(starts)[:5]}"
    return sorted(out, key=lambda i: i.start)


def max_concurrency(spans: Sequence[Interval]) -> int:
    """Most intervals open at one instant (half-open: an end at t closes before a start at t)."""
    points = [(i.start, 1) for i in spans] + [(i.end, -1) for i in spans]
    points.sort(key=lambda p: (p[0], p[1]))
    best = running = 0
    for _, delta in points:
        running += delta
        best = max(best, running)
    return best


def slot_time(spans: Iterable[Interval], t0: float, t1: float) -> dict[str, float]:
    """Seconds of handler time per group inside the window [t0, t1]."""
    out: dict[str, float] = {}
    for i in spans:
        overlap = min(i.end, t1) - max(i.start, t0)
        if overlap > 0:
            key = i.grp or ""
            out[key] = out.get(key, 0.0) + overlap
    return out


# -- the jobs table ------------------------------------------------------------------------


def enqueue_many(
    queue: readyq.Queue, jobs: Iterable[tuple[Any, str, int]], *, spread: float = 0.0
) -> list[int]:
    """Enqueue (args, group, weight) triples in one transaction; returns the ids.

    With ``spread``, the jobs become runnable one after another over that many seconds
    (``run_after`` delays from 0 to ``spread``) instead of all at once.
    """
    jobs = list(jobs)
    step = spread / len(jobs) if jobs else 0.0
    with queue.engine.begin() as conn:
        return [
            queue.enqueue(
                JOB_TYPE, args, group=group, weight=weight, connection=conn,
                run_after=n * step if spread else None,
            )
            for n, (args, group, weight) in enumerate(jobs)
        ]


def job_row(queue: readyq.Queue, job_id: int) -> Any:
    """The job's row with the database clock as ``db_now`` (to judge lease expiry)."""
    j = queue.store.tables.jobs
    now = queue.store.now()
    with queue.engine.connect() as conn:
        return conn.execute(sa.select(j, now.label("db_now")).where(j.c.id == job_id)).one()


def wait_taken_from(
    queue: readyq.Queue, job_id: int, owner: str, expires: float, *, timeout: float
) -> Any:
    """Poll the job until it stops being ``owner``'s running attempt; return that row.

    Fails if that happens while the database clock is still before ``expires`` (the
    lease expiry the owner left behind): nobody may take a job from a live lease.
    """
    deadline = time.monotonic() + timeout
    while True:
        row = job_row(queue, job_id)
        if (row.state, row.lease_owner) != ("running", owner):
            assert row.db_now >= expires, (
                f"job {job_id} was taken from {owner} ({row.state}, {row.lease_owner}) "
                f"{expires - row.db_now:.3f}s before its lease expired"
            )
            return row
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} was still {owner}'s after {timeout:g}s")
        time.sleep(0.01)


def in_flight(queue: readyq.Queue) -> int:
    counts = queue.counts()
    return counts.get("leased", 0) + counts.get("running", 0)


# -- worker processes ----------------------------------------------------------------------


@dataclass
class WorkerProcess:
    name: str
    popen: subprocess.Popen[bytes]
    stats_file: Path
    log_file: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def terminate(self) -> None:
        os.kill(self.pid, signal.SIGTERM)

    def kill(self) -> None:
        if self.popen.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
        self.popen.wait()

    def log(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"worker {self.name} did not exit within {timeout:g}s; its log:\n{self.log()}"
            ) from None

    def wait_ok(self, timeout: float) -> dict[str, Any]:
        """Wait for a clean exit (code 0, nothing raised) and return the worker's stats."""
        code = self.wait(timeout)
        log = self.log()
        assert code == 0, f"worker {self.name} exited with {code}; its log:\n{log}"
        assert "Traceback" not in log, f"worker {self.name} logged an error:\n{log}"
        return self.stats()

    def stats(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.stats_file.read_text())
        return data


class Workers:
    """Starts worker processes for one test and kills every one still alive at close()."""

    def __init__(self, url: str, directory: Path) -> None:
        self.url = url
        self.directory = directory
        self.procs: list[WorkerProcess] = []

    def start(
        self,
        name: str,
        *,
        concurrency: int,
        lease_ttl: float = 10.0,
        heartbeat: float = 2.0,
        poll: float = 0.05,
        until_idle: bool = True,
        mode: str = "sleep",
        max_running: int | None = None,
        resources: Mapping[str, int] | None = None,
        isolation: str = "thread",
    ) -> WorkerProcess:
        stats_file = self.directory / f"stats-{name}.json"
        log_file = self.directory / f"worker-{name}.log"
        cmd = [
            sys.executable,
            str(APP),
            "--url", self.url,
            "--concurrency", str(concurrency),
            "--lease-ttl", str(lease_ttl),
            "--heartbeat", str(heartbeat),
            "--poll", str(poll),
            "--mode", mode,
            "--stats-file", str(stats_file),
            "--worker-id", name,
            "--isolation", isolation,
        ]
        if until_idle:
            cmd.append("--until-idle")
        if max_running is not None:
            cmd += ["--max-running", str(max_running)]
        for resource, capacity in (resources or {}).items():
            cmd += ["--resource", f"{resource}={capacity}"]
        with open(log_file, "wb") as log:
            popen = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        proc = WorkerProcess(name, popen, stats_file, log_file)
        self.procs.append(proc)
        return proc

    def wait_all_ok(self, timeout: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        return [p.wait_ok(max(deadline - time.monotonic(), 0.1)) for p in self.procs]

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()
