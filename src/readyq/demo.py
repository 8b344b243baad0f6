"""``readyq demo``: a small pipeline run end to end, then checked from the database.

fetch → parse → a container of transforms for two tenants weighted 3:1 → report (which
depends on the container). Workers run under a global cap; the summary reads the
database only: jobs per state, each tenant's share of slot-time while both had work
waiting, and every dependency edge checked against the recorded start and finish times.
"""

from __future__ import annotations

import random
import shlex
import threading
import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from readyq.model import Job, JobState
from readyq.queue import Queue

DEFAULT_DB = "sqlite:///readyq-demo.db"
DEFAULT_PREFIX = "readyq_demo_"
TENANTS = {"tenant-a": 3, "tenant-b": 1}
# Every job type the pipeline enqueues (the container's included).
DEMO_TYPES = frozenset({"fetch", "parse", "transform-batch", "transform", "report"})


@dataclass(frozen=True)
class DemoReport:
    """What the demo measured, read back from the database."""

    states: dict[str, int]
    shares: dict[str, float]
    edges_checked: int
    edges_violated: int
    max_in_flight: int
    cap: int
    seconds: float

    @property
    def ok(self) -> bool:
        return (
            self.edges_violated == 0
            and self.max_in_flight <= self.cap
            and set(self.states) == {JobState.DONE.value}
        )


def build_queue(url: str, work_seconds: float, prefix: str = DEFAULT_PREFIX) -> Queue:
    """The demo's queue on ``url`` under ``prefix``, with its four handlers."""
    queue = Queue(url, prefix=prefix)

    def work(job: Job) -> None:
        time.sleep(work_seconds * (0.8 + 0.4 * random.random()))

    @queue.handler("fetch", timeout=60)
    def fetch(job: Job) -> dict[str, Any]:
        work(job)
        return {"rows": job.args["rows"]}

    @queue.handler("parse", timeout=60)
    def parse(job: Job) -> dict[str, Any]:
        work(job)
        return {"chunks": job.args["chunks"]}

    @queue.handler("transform", timeout=60, max_attempts=3)
    def transform(job: Job) -> dict[str, Any]:
        work(job)
        return {"tenant": job.group, "chunk": job.args["chunk"]}

    @queue.handler("report", timeout=60)
    def report(job: Job) -> dict[str, Any]:
        work(job)
        return {"status": "published"}

    return queue


def enqueue_pipeline(queue: Queue, chunks: int) -> list[int]:
    """Enqueue the DAG; transforms per tenant are proportional to its weight."""
    fetch = queue.enqueue("fetch", {"rows": 10_000})
    parse = queue.enqueue("parse", {"chunks": chunks}, depends_on=[fetch])
    batch = queue.enqueue_container("transform-batch", {}, depends_on=[parse])
    ids = [fetch, parse, batch]
    total_weight = sum(TENANTS.values())
    for tenant, weight in TENANTS.items():
        for chunk in range(chunks * weight // total_weight):
            ids.append(
                queue.enqueue(
                    "transform", {"chunk": chunk}, group=tenant, weight=weight, parent=batch
                )
            )
    ids.append(queue.enqueue("report", {}, depends_on=[batch]))
    return ids


def foreign_jobs(url: str, prefix: str = DEFAULT_PREFIX) -> int:
    """How many jobs under ``prefix`` at ``url`` are of types the demo never makes (0 when
    the tables do not exist): the demo drops its tables, so these would be lost."""
    queue = Queue(url, prefix=prefix)
    try:
        j = queue.store.tables.jobs
        with queue.engine.connect() as conn:
            if not sa.inspect(conn).has_table(j.name):
                return 0
            return int(
                conn.execute(
                    sa.select(sa.func.count()).where(j.c.type.not_in(sorted(DEMO_TYPES)))
                ).scalar_one()
            )
    finally:
        queue.close()


def measure(queue: Queue, cap: int, seconds: float) -> DemoReport:
    """Read the finished run back from the database and check it."""
    t = queue.store.tables
    j, d = t.jobs, t.deps
    up = j.alias("up")
    with queue.engine.connect() as conn:
        states = {
            r[0]: int(r[1])
            for r in conn.execute(sa.select(j.c.state, sa.func.count()).group_by(j.c.state))
        }
        edges = conn.execute(
            sa.select(j.c.id, j.c.started_at, j.c.is_container, up.c.finished_at).select_from(
                d.join(j, j.c.id == d.c.job_id).join(up, up.c.id == d.c.depends_on_id)
            )
        ).all()
        runs = conn.execute(
            sa.select(j.c.group_key, j.c.started_at, j.c.finished_at).where(j.c.type == "transform")
        ).all()
        spans = conn.execute(
            sa.select(j.c.started_at, j.c.finished_at).where(j.c.started_at.is_not(None))
        ).all()
    checked = violated = 0
    for e in edges:
        if e.is_container:
            continue
        checked += 1
        if e.started_at is None or e.finished_at is None or e.started_at < e.finished_at:
            violated += 1
    # Slot-time per tenant while both tenants still had transforms waiting to start.
    last_start = {g: max(r.started_at for r in runs if r.group_key == g) for g in TENANTS}
    window_start = min(r.started_at for r in runs)
    window_end = min(last_start.values())
    slot = dict.fromkeys(TENANTS, 0.0)
    for r in runs:
        slot[r.group_key] += max(
            0.0, min(r.finished_at, window_end) - max(r.started_at, window_start)
        )
    total = sum(slot.values()) or 1.0
    shares = {g: v / total for g, v in slot.items()}
    events = sorted(
        [(s.started_at, 1) for s in spans] + [(s.finished_at, -1) for s in spans],
        key=lambda e: (e[0], e[1]),
    )
    in_flight = peak = 0
    for _, delta in events:
        in_flight += delta
        peak = max(peak, in_flight)
    return DemoReport(
        states=states,
        shares=shares,
        edges_checked=checked,
        edges_violated=violated,
        max_in_flight=peak,
        cap=cap,
        seconds=seconds,
    )


def run_demo(
    url: str = DEFAULT_DB,
    *,
    prefix: str = DEFAULT_PREFIX,
    workers: int = 3,
    cap: int = 4,
    chunks: int = 48,
    work_seconds: float = 0.08,
    console: Console | None = None,
) -> DemoReport:
    """Run the demo pipeline on ``url`` from an empty schema and return its report.

    The tables under ``prefix`` are dropped first, with every job in them.
    """
    console = console or Console()
    queue = build_queue(url, work_seconds, prefix)
    try:
        queue.drop_schema()
        queue.create_schema()
        ids = enqueue_pipeline(queue, chunks)
        tenants = ", ".join(f"{k} (weight {v})" for k, v in TENANTS.items())
        console.print(
            f"[bold]readyq demo[/] on {queue.database} at {escape(_shown(url))}, table "
            f"prefix {queue.prefix}: {len(ids)} jobs "
            f"(fetch → parse → {len(ids) - 4} transforms for {tenants} "
            f"in a container → report); {workers} workers sharing a cap of {cap}",
            markup=True,  # the console may show plain strings as text: this one is styled
        )
        pool = [
            queue.worker(concurrency=cap, poll_interval=0.05, lease_ttl=30, heartbeat_interval=5)
            for _ in range(workers)
        ]
        started = time.monotonic()
        threads = [
            threading.Thread(target=w.run, kwargs={"until_idle": True}, daemon=True) for w in pool
        ]
        for thread in threads:
            thread.start()
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        ) as progress:
            task = progress.add_task("jobs finished", total=len(ids))
            while any(thread.is_alive() for thread in threads):
                counts = queue.counts()
                done = sum(v for k, v in counts.items() if JobState(k).is_terminal)
                progress.update(task, completed=done)
                time.sleep(0.1)
            counts = queue.counts()
            progress.update(
                task, completed=sum(v for k, v in counts.items() if JobState(k).is_terminal)
            )
        report = measure(queue, cap, time.monotonic() - started)
    finally:
        queue.close()
    print_report(report, console)
    console.print(
        "the jobs stay in the database; see them with: "
        + escape(status_command(url, prefix)),
        soft_wrap=True,
        markup=True,
    )
    return report


def status_command(url: str, prefix: str) -> str:
    """The ``readyq status`` command line that reads the demo's tables (password hidden)."""
    return f"readyq --db {shlex.quote(_shown(url))} --prefix {shlex.quote(prefix)} status"


def _shown(url: str) -> str:
    return sa.make_url(url).render_as_string(hide_password=True)


def print_report(report: DemoReport, console: Console) -> None:
    states = Table(title="Jobs per state")
    states.add_column("state")
    states.add_column("jobs", justify="right")
    for state, n in sorted(report.states.items()):
        states.add_row(state, str(n))
    console.print(states)
    shares = Table(title="Slot-time share while both tenants had work waiting")
    shares.add_column("tenant")
    shares.add_column("weight", justify="right")
    shares.add_column("expected", justify="right")
    shares.add_column("measured", justify="right")
    total_weight = sum(TENANTS.values())
    for tenant, weight in TENANTS.items():
        shares.add_row(
            tenant,
            str(weight),
            f"{weight / total_weight:.0%}",
            f"{report.shares.get(tenant, 0.0):.1%}",
        )
    console.print(shares)
    mark = "[green]ok[/]" if report.edges_violated == 0 else "[red]VIOLATED[/]"
    console.print(
        f"dependency order: {report.edges_checked} edges checked, "
        f"{report.edges_violated} started before their dependency ended: {mark}",
        markup=True,
    )
    cap_mark = "[green]ok[/]" if report.max_in_flight <= report.cap else "[red]EXCEEDED[/]"
    console.print(
        f"global cap: at most {report.max_in_flight} jobs ran at once "
        f"(cap {report.cap}): {cap_mark}",
        markup=True,
    )
    console.print(
        f"finished in {report.seconds:.1f}s: "
        + ("[bold green]all checks passed[/]" if report.ok else "[bold red]checks failed[/]"),
        markup=True,
    )
