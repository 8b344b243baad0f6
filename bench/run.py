"""readyq's benchmark: throughput against its peers, scan flatness, enqueue and memory.

    python bench/run.py                 # everything, about 5 minutes on 2 cores
    python bench/run.py --quick         # fewer jobs and one run per configuration

One table per run, every figure measured in the same run on the same machine, since
the machine is shared and noisy: compare the ratios, not the absolute numbers.

* Throughput: 10,000 no-op jobs, 1 and 2 worker processes, median of ``--repeat`` runs.
  readyq runs with every guarantee on (result and done in one transaction per batch,
  fenced writes, the global cap, fair share between 4 weighted groups, dependencies
  checked) at default durability. Worker processes start and connect before the clock
  starts, and readyq's workers call ``Worker.prepare()`` then (see
  ``bench/peer_worker.py``); each worker is done when it first finds nothing left to
  claim. Peers, when installed (``pip install readyq[bench]``): PGQueuer and
  Procrastinate on PostgreSQL; the queues a user would pick on each database, at the
  fastest setting each one's documentation offers (see ``bench/peers.py`` for which and
  why): huey (``SqliteHuey``) on SQLite, django-tasks with its database backend
  (``db_worker``) on SQLite, PostgreSQL and MariaDB, DBOS queues on SQLite and
  PostgreSQL, Chancy on PostgreSQL; each peer's run is checked from its own tables
  (every job finished once, none lost or run twice). Also two claim/finish loops per database
  written straight against the driver, claiming 100 jobs per transaction: the correct
  loop (leases with a token and an expiry, each payload decoded, each job's result
  written with its own UPDATE fenced by its token, in one transaction) and the bare
  loop (no payload, no lease expiry, the batch marked done with one UPDATE: a floor,
  not a queue; see ``bench/peers.py``). Each round runs
  every configuration once; the table shows the medians of the rounds. On PostgreSQL,
  readyq and PGQueuer also run with batches of 500 (PGQueuer runs faster with batches
  larger than 100 on this machine), and readyq once more at 500 without ``prepare()``
  ("cold": its first claim also compiles its SQL).
* Chains: the same jobs in dependency chains of 10 (each job waits for the one before
  it), checked afterwards: no job started before the job it depends on finished.
* CPU: the worker processes' own per job, and the rest of the machine's per job over
  the same window ("server": the database server and the kernel's work for it; about 0
  on SQLite, which runs inside the workers; see ``bench/peers.py``).
* Claim latency: p50/p99 of one worker transaction (record outcomes + claim + start).
* Deep backlog: ``--deep-jobs`` (100,000) jobs drained by one process, readyq and the
  correct loop on each database and PGQueuer at batches of 100 and 500, against the same
  system's rate with ``--jobs``: claims then walk past the index entries of the jobs
  already claimed, which PostgreSQL keeps until a vacuum.
* Scan flatness: median time of one claim transaction on a table of 200 jobs and on
  one that also holds ``--done-rows`` finished jobs and ``--waiting-rows`` jobs waiting
  on an unfinished upstream job, the two measured in alternation; likewise the claimed
  jobs' start, a heartbeat, their hand-back, and a worker's idle check (whether its
  types still have unfinished jobs), and the claim of a worker of two types. A third
  table holds ``--other-ready`` (50,000) ready jobs of a type the measured worker does
  not run, ahead of its own jobs in the same groups. Each table also holds 120 failed
  jobs, older than the rest: the listings of a page of 50 failed jobs (and the page
  after it) and of 50 of one type's ready jobs are timed with the rest.
* Enqueue: ``enqueue_many`` of 20,000 jobs with dependencies (one transaction) and
  single ``enqueue`` calls.
* Memory: a worker's RSS growth while it runs ``--memory-jobs`` jobs (SQLite).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers

import readyq
from readyq import JobSpec
from readyq.claim_order import ClaimOrder, StartPolicy
from readyq.resources import decode as decode_uses

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_MARIADB = "mysql+pymysql://root@127.0.0.1:3306/test"
GROUPS = {"tenant-a": 3, "tenant-b": 2, "tenant-c": 1, "tenant-d": 1}


# -- databases -------------------------------------------------------------------------


def fresh_database(kind: str, base_url: str, name: str) -> str:
    """A URL to an empty database for one run."""
    if kind == "sqlite":
        path = Path(tempfile.mkdtemp(prefix="readyq-bench-")) / f"{name}.db"
        return f"sqlite:///{path}"
    admin = sa.create_engine(base_url, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    with admin.connect() as conn:
        if kind == "postgresql":
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        else:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    admin.dispose()
    return sa.make_url(base_url).set(database=name).render_as_string(hide_password=False)


def fill_noop(queue: readyq.Queue, jobs: int, type_: str = "noop") -> None:
    """``jobs`` ready jobs of ``type_``, dealt round the weighted groups."""
    specs = [
        JobSpec(type_, {"i": i}, group=g, weight=GROUPS[g])
        for i, g in zip(range(jobs), list(GROUPS) * (jobs // len(GROUPS) + 1), strict=False)
    ]
    for start in range(0, jobs, 20_000):
        queue.enqueue_many(specs[start : start + 20_000])


CHAIN = 10
# The second batch size at which readyq and PGQueuer meet on PostgreSQL.
LARGE_BATCH = 500
# Procrastinate commits about 4 times per job and runs a few hundred jobs/s here: its rows
# run fewer jobs than the others so that they do not take most of the benchmark's time.
PROCRASTINATE_JOBS = 2_000


def fill_chains(queue: readyq.Queue, jobs: int) -> None:
    """The same jobs in chains of ``CHAIN``: each depends on the one before it, and a
    chain's jobs share a group (chains go round the four groups)."""
    groups = list(GROUPS)
    specs = [
        JobSpec(
            "noop", {"i": i}, key=f"k{i}", depends_on=[f"k{i - 1}"] if i % CHAIN else [],
            group=(g := groups[i // CHAIN % len(groups)]), weight=GROUPS[g],
        )
        for i in range(jobs)
    ]
    for start in range(0, jobs, 20_000):  # a multiple of CHAIN: no chain spans two batches
        queue.enqueue_many(specs[start : start + 20_000])


# -- throughput --------------------------------------------------------------------------


@dataclass
class Row:
    system: str
    database: str
    processes: int
    jobs: int
    jobs_per_s: float
    cpu_us_per_job: float
    commits_per_job: float | None
    p50_ms: float | None = None
    p99_ms: float | None = None
    # The machine's CPU beyond the workers' own (the database server), per job.
    server_cpu_us_per_job: float | None = None
    # readyq only: the global cap and the fair share, checked from the run's own rows.
    cap: int | None = None
    peak: int | None = None
    shares: dict[str, float] | None = None
    # readyq with dependencies: edges checked, and those whose job started before its
    # upstream job finished (must be 0).
    edges: int | None = None
    early: int | None = None
    # readyq with a resource: its capacity, and the most units in flight at any instant.
    resource_cap: int | None = None
    resource_peak: int | None = None


# The resource of the "resources" configuration: every job takes one unit of it.
RESOURCE = "slots"


def check_resource(queue: readyq.Queue) -> int:
    """The most units of RESOURCE held at any instant, from each job's stored costs and
    its database timestamps (a sweep over [started_at, finished_at], as the peak in
    flight); every job must have stored the one unit its handler declares."""
    t = queue.store.tables.jobs
    with queue.engine.connect() as conn:
        rows = conn.execute(sa.select(t.c.uses, t.c.started_at, t.c.finished_at)).all()
    events = []
    for r in rows:
        units = decode_uses(r.uses).get(RESOURCE, 0)
        if units != 1:
            raise RuntimeError(f"a job ran with uses {r.uses!r}, not one unit of {RESOURCE}")
        events += [(r.started_at, units), (r.finished_at, -units)]
    return peak_of(events)


def peak_of(events: list[tuple[float, int]]) -> int:
    """The highest running sum of (instant, step) events taken in time order; at equal
    instants an end (a negative step) sorts first, so touching intervals never add up."""
    peak = running = 0
    for _, step in sorted(events):
        running += step
        peak = max(peak, running)
    return peak


def check_guarantees(queue: readyq.Queue, jobs: int) -> tuple[int, dict[str, float]]:
    """Peak jobs in flight, and each group's share of the starts while every group still
    had a backlog (the claims that started the first 40% of the jobs: the heaviest group,
    weight 3 of 7, has then used about 1,700 of its 2,500 jobs), both from the database's
    own timestamps.

    The peak is a sweep over [started_at, finished_at]: a claim counts every job not yet
    committed done as in flight, so the sweep can only under-count what a claim saw.
    """
    t = queue.store.tables.jobs
    with queue.engine.connect() as conn:
        rows = conn.execute(
            sa.select(
                t.c.id, t.c.group_key, t.c.started_at, t.c.finished_at, t.c.lease_owner
            ).order_by(t.c.started_at, t.c.id)
        ).all()
    peak = peak_of([(r.started_at, 1) for r in rows] + [(r.finished_at, -1) for r in rows])
    # The cut falls between claims, and a claim counts whole: a cut inside one would
    # count an arbitrary part of it (its rows are started in id order, not by group).
    # A claim is a run of starts by one worker, each within CLAIM_GAP of the one before:
    # PostgreSQL reads its clock per row, so one claim's starts are microseconds apart
    # (SQLite and MariaDB give them one time), and claims take turns at the gate row.
    claims: list[list[Any]] = []
    for r in rows:
        last = claims[-1][-1] if claims else None
        if last is None or r.lease_owner != last.lease_owner or \
                r.started_at - last.started_at > CLAIM_GAP:
            claims.append([])
        claims[-1].append(r)
    head: list[Any] = []
    for claim in claims:
        if len(head) >= jobs * 0.4:
            break
        head += claim
    shares = {g: sum(1 for r in head if r.group_key == g) / len(head) for g in GROUPS}
    return peak, shares


# Seconds between two starts that are taken to belong to different claims.
CLAIM_GAP = 0.0005


def check_dependency_order(queue: readyq.Queue) -> tuple[int, int]:
    """(dependency edges, edges whose job started before its upstream job finished),
    from the database's own timestamps."""
    t = queue.store.tables
    job, up = t.jobs.alias("job"), t.jobs.alias("up")
    with queue.engine.connect() as conn:
        edges = conn.execute(sa.select(sa.func.count()).select_from(t.deps)).scalar_one()
        early = conn.execute(
            sa.select(sa.func.count())
            .select_from(t.deps)
            .join(job, job.c.id == t.deps.c.job_id)
            .join(up, up.c.id == t.deps.c.depends_on_id)
            .where(sa.or_(up.c.finished_at.is_(None), job.c.started_at < up.c.finished_at))
        ).scalar_one()
    return int(edges), int(early)


def run_readyq(
    kind: str,
    base_url: str,
    jobs: int,
    processes: int,
    cap: int,
    *,
    chains: bool = False,
    prepared: bool = True,
    db_name: str = "bench_readyq",
    resource: int | None = None,
) -> Row:
    url = fresh_database(kind, base_url, db_name)
    queue = readyq.Queue(url)
    queue.create_schema()

    @queue.handler("noop")
    def noop(job: readyq.Job) -> None:
        return None

    (fill_chains if chains else fill_noop)(queue, jobs)
    queue.close()
    timing_files = [tempfile.mktemp(prefix="readyq-timing-") for _ in range(processes)]
    configs = [
        {
            "url": url,
            "cap": cap * processes,
            "max_running": cap,
            "timings_file": timing_files[i],
            "prepare": prepared,
            "resource": resource,
        }
        for i in range(processes)
    ]
    pg_stats = None
    before = 0
    if kind == "postgresql":
        pg_stats = peers.PgCommits(peers.libpq_url(base_url), db_name)
        pg_stats.wait_no_backends()

        def hook() -> None:
            nonlocal before
            before = pg_stats.read()

    else:
        hook = None  # type: ignore[assignment]
    run = peers.run_workers("readyq", configs, peers.run_timeout(jobs), hook)
    commits = run.commits
    if pg_stats is not None:
        pg_stats.wait_no_backends()
        commits = pg_stats.read() - before
        pg_stats.close()
    check = readyq.Queue(url)
    counts = check.counts()
    peak, shares = check_guarantees(check, jobs)
    edges, early = check_dependency_order(check) if chains else (None, None)
    resource_peak = check_resource(check) if resource is not None else None
    check.close()
    if counts != {"done": jobs} or run.executed != jobs:
        raise RuntimeError(f"readyq did not run every job exactly once: {counts}, {run.executed}")
    timings = [json.loads(Path(f).read_text()) for f in timing_files if os.path.exists(f)]
    for f in timing_files:
        if os.path.exists(f):
            os.unlink(f)
    system = f"readyq, chains of {CHAIN}" if chains else f"readyq (batch {cap}/process)"
    if resource is not None:
        system = f"readyq (batch {cap}/process), 1 {RESOURCE}"
    return Row(
        system=system + ("" if prepared else ", cold"),
        database={"postgresql": "PostgreSQL", "sqlite": "SQLite", "mariadb": "MariaDB"}[kind],
        processes=processes,
        jobs=jobs,
        jobs_per_s=jobs / run.seconds,
        cpu_us_per_job=run.cpu * 1e6 / jobs,
        commits_per_job=None if commits is None else commits / jobs,
        server_cpu_us_per_job=peers.server_cpu(run, jobs),
        p50_ms=statistics.median(t["p50"] for t in timings) * 1000 if timings else None,
        p99_ms=max(t["p99"] for t in timings) * 1000 if timings else None,
        cap=cap * processes,
        peak=peak,
        shares=None if chains else shares,
        edges=edges,
        early=early,
        resource_cap=resource,
        resource_peak=resource_peak,
    )


def loop_url(kind: str, url: str) -> str:
    """The reference loops' URL for a database of ``kind`` at ``url`` (SQLite: a file of
    their own)."""
    return peers.libpq_url(url) if kind == "postgresql" else (url or "sqlite://")


def from_peer(r: peers.PeerResult) -> Row:
    return Row(r.system, r.database, r.processes, r.jobs, r.jobs_per_s, r.cpu_us_per_job,
               r.commits_per_job, server_cpu_us_per_job=r.server_cpu_us_per_job)


def median_row(rows: list[Row]) -> Row:
    best = sorted(rows, key=lambda r: r.jobs_per_s)[len(rows) // 2]
    return best


# -- scan flatness -----------------------------------------------------------------------


OPERATIONS = (
    "claim", "start", "heartbeat", "hand-back", "idle check", "2-type claim", "failed page",
    "failed page 2", "ready page",
)
# Failed jobs in each scan table, older than every other row there: a listing of them
# newest first reads past every newer job unless an index leads to them.
FAILED_ROWS = 120


def operation_times(
    queue: readyq.Queue, samples: int, times: dict[str, list[float]]
) -> None:
    """Add ``samples`` timings (seconds) of each step of a job's life that reads the jobs
    table to ``times``: one claim transaction that takes 10 jobs, their start, a
    heartbeat, their hand-back, and the question a worker run with ``until_idle`` asks
    when a tick finds nothing (here for a type with no jobs at all, so that no probe
    stops at a first match); then the claim of 10 jobs by a worker of two types (its
    jobs' type and one with none), whose jobs are then handed back untimed; then the
    listings an operator reads: a page of 50 failed jobs, the page after it (by its
    cursor), and a page of 50 of one type's ready jobs (``Queue.jobs``)."""
    store = queue.store

    def timed(op: str, fn: Callable[[], Any]) -> Any:
        t = time.perf_counter()
        out = fn()
        times[op].append(time.perf_counter() - t)
        return out

    for _ in range(samples):
        claimed = timed("claim", lambda: store.claim_jobs(ClaimOrder(
            owner="bench", cap=10, limit=10, lease_ttl=60.0, types=["noop"],
        )))
        starts = [(c, StartPolicy(None)) for c in claimed]
        timed("start", lambda s=starts: store.start_jobs("bench", s))
        leases = [readyq.store.Lease(c.id, c.lease_token) for c in claimed]
        timed("heartbeat", lambda ls=leases: store.heartbeat("bench", ls, 60.0))
        backs = [readyq.store.Outcome(job=c, kind=readyq.store.OutcomeKind.RELEASE)
                 for c in claimed]
        timed("hand-back", lambda bs=backs: store.record_outcomes("bench", bs))
        timed("idle check", lambda: store.has_unfinished(["other"]))
        claimed = timed("2-type claim", lambda: store.claim_jobs(ClaimOrder(
            owner="bench", cap=10, limit=10, lease_ttl=60.0, types=["noop", "other"],
        )))
        store.start_jobs("bench", [(c, StartPolicy(None)) for c in claimed])
        release = readyq.store.OutcomeKind.RELEASE
        store.record_outcomes("bench", [readyq.store.Outcome(job=c, kind=release) for c in claimed])
        page = timed("failed page", lambda: queue.jobs(state="failed", limit=50))
        timed("failed page 2", lambda p=page: queue.jobs(
            state="failed", limit=50, cursor=p.next_cursor))
        timed("ready page", lambda: queue.jobs(state="ready", type="noop", limit=50))


def fill_failed(queue: readyq.Queue, n: int) -> None:
    """``n`` jobs that failed, with an error and a small payload."""
    ids = queue.enqueue_many([JobSpec("broken", {"i": i}) for i in range(n)])
    j = queue.store.tables.jobs
    with queue.engine.begin() as conn:
        conn.execute(
            sa.update(j).where(j.c.id.in_(ids)).values(
                state="failed", attempts=3, error="RuntimeError: the upstream API is down",
                finished_at=1.0,
            )
        )


def bulk_rows(queue: readyq.Queue, kind: str, done: int, waiting: int) -> None:
    """Add finished rows and rows waiting on an unfinished upstream job, fast, in SQL."""
    j = queue.store.tables.jobs
    with queue.engine.begin() as conn:
        blocker = conn.execute(
            sa.insert(j).values(
                type="noop", args="{}", state="waiting", is_container=False, group_key="blocker",
                weight=1, priority=0, attempts=0, max_attempts=3, retry_on_timeout=True,
                pending_deps=1, open_children=0, failed_children=0, cancel_requested=False,
                lease_token=0, created_at=0, updated_at=0,
            )
        ).inserted_primary_key[0]
        cols = (
            "type, args, state, is_container, group_key, weight, priority, attempts, "
            "max_attempts, retry_on_timeout, pending_deps, open_children, failed_children, "
            "cancel_requested, lease_token, created_at, updated_at, finished_at"
        )
        for state, n, pending in (("done", done, 0), ("waiting", waiting, 1)):
            if not n:
                continue
            values = (
                f"'noop', '{{}}', '{state}', false, 'old', 1, 0, 1, 3, true, {pending}, 0, 0, "
                "false, 1, 0, 0, 0"
            )
            if kind == "postgresql":
                conn.exec_driver_sql(
                    f"INSERT INTO {j.name} ({cols}) SELECT {values} FROM generate_series(1, {n})"
                )
            elif kind == "mariadb":
                conn.exec_driver_sql(
                    f"INSERT INTO {j.name} ({cols}) SELECT {values} FROM seq_1_to_{n}"
                )
            else:
                conn.exec_driver_sql(
                    f"WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s "
                    f"WHERE x < {n}) INSERT INTO {j.name} ({cols}) SELECT "
                    f"{values.replace('false', '0').replace('true', '1')} FROM s"
                )
        if waiting:
            conn.exec_driver_sql(
                f"INSERT INTO {queue.store.tables.deps.name} (job_id, depends_on_id) "
                f"SELECT id, {blocker} FROM {j.name} WHERE state = 'waiting' AND id <> {blocker}"
            )
    with queue.engine.connect() as conn:
        if kind == "postgresql":
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
                f"VACUUM ANALYZE {j.name}"
            )
        elif kind == "mariadb":
            conn.exec_driver_sql(f"ANALYZE TABLE {j.name}")
        else:
            conn.exec_driver_sql("ANALYZE")
        conn.commit()


def scan_flatness(
    kind: str, base_url: str, done: int, waiting: int, other: int, samples: int = 60
) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """Median time of each operation on a small table, on a full one and on one with a
    backlog of another type: three databases, measured in alternation, 10 samples at a
    time, so that a machine whose speed drifts (or a server still busy writing out the
    full table) weighs on all alike."""
    queues = []
    for name, table in (("bench_scan_empty", "empty"), ("bench_scan_full", "full"),
                        ("bench_scan_mixed", "mixed")):
        queue = readyq.Queue(fresh_database(kind, base_url, name))
        queue.create_schema()
        fill_failed(queue, FAILED_ROWS)
        if table == "mixed":
            # Ready jobs of a type the measured worker does not run, in the same groups
            # and ahead of its own in claim order (enqueued first).
            fill_noop(queue, other, type_="bulk")
        fill_noop(queue, 200)
        if table == "full":
            bulk_rows(queue, kind, done, waiting)
        queues.append(queue)
    times: list[dict[str, list[float]]] = [{op: [] for op in OPERATIONS} for _ in queues]
    for _ in range(0, samples, 10):
        for queue, into in zip(queues, times, strict=True):
            operation_times(queue, 10, into)
    for queue in queues:
        queue.close()
    empty, full, mixed = ({op: statistics.median(ts) for op, ts in t.items()} for t in times)
    return empty, full, mixed


# -- enqueue -----------------------------------------------------------------------------


def enqueue_rates(kind: str, base_url: str, repeat: int = 3) -> tuple[float, float]:
    """Median of ``repeat`` bulk batches of 20,000 jobs (one in ten without a dependency,
    the others depending on the job before), then 500 single enqueues."""
    url = fresh_database(kind, base_url, "bench_enqueue")
    queue = readyq.Queue(url)
    queue.create_schema()
    n = 20_000
    rates = []
    for _ in range(repeat):
        specs = [
            JobSpec("noop", {"i": i}, key=f"k{i}", depends_on=[f"k{i - 1}"] if i % 10 else [])
            for i in range(n)
        ]
        t = time.perf_counter()
        queue.enqueue_many(specs)
        rates.append(n / (time.perf_counter() - t))
    m = 500
    t = time.perf_counter()
    for i in range(m):
        queue.enqueue("noop", {"i": i})
    single = m / (time.perf_counter() - t)
    queue.close()
    return statistics.median(rates), single


# -- memory ------------------------------------------------------------------------------

MEMORY_SCRIPT = r"""
import sys, threading, time, readyq
url, n = sys.argv[1], int(sys.argv[2])
queue = readyq.Queue(url)
@queue.handler("noop")
def noop(job): return {"ok": True}
def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
samples = []
worker = queue.worker(concurrency=100, poll_interval=0.05)
def watch():
    while t.is_alive():
        samples.append((worker.stats.done, rss()))
        time.sleep(0.2)
t = threading.Thread(target=worker.run, kwargs={"until_idle": True})
t.start(); watch(); t.join()
early = [r for d, r in samples if d >= n * 0.1]
print(early[0] if early else samples[0][1], max(r for _, r in samples))
"""


def memory_growth(jobs: int) -> tuple[float, float]:
    url = fresh_database("sqlite", "", "bench_memory")
    queue = readyq.Queue(url)
    queue.create_schema()
    fill_noop(queue, jobs)
    queue.close()
    out = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, url, str(jobs)],
        capture_output=True, text=True, check=True, timeout=3600,
    ).stdout.split()
    return float(out[0]), float(out[1])


# -- main --------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer jobs, one run each")
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--batch", type=int, default=100, help="readyq jobs per process at once")
    ap.add_argument("--done-rows", type=int, default=1_000_000)
    ap.add_argument("--waiting-rows", type=int, default=100_000)
    ap.add_argument("--other-ready", type=int, default=50_000,
                    help="ready jobs of another type in the scan section's third table")
    ap.add_argument("--memory-jobs", type=int, default=200_000)
    ap.add_argument("--deep-jobs", type=int, default=100_000,
                    help="jobs in the deep-backlog drain (1 process, one run each)")
    ap.add_argument("--pg-url", default=DEFAULT_PG)
    ap.add_argument("--mariadb-url", default=DEFAULT_MARIADB)
    ap.add_argument("--skip", nargs="*", default=[],
                    help="parts to skip: peers throughput deep scan enqueue isolation "
                    "memory resources")
    ap.add_argument("--only", nargs="*", default=[], metavar="LABEL",
                    help="in the throughput part, run only the configurations of these labels "
                    "(as the progress lines name them: 'readyq postgresql', "
                    "'readyq postgresql 500', pgq500, 'chancy postgresql' ...)")
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0",
                    help="the Redis of RQ's isolated-jobs row")
    args = ap.parse_args(argv)
    if args.quick:
        args.jobs, args.repeat = 5_000, 1
        args.done_rows, args.waiting_rows, args.memory_jobs = 200_000, 20_000, 50_000
        args.other_ready = 20_000
        args.deep_jobs = 30_000
    dbs = [("postgresql", args.pg_url), ("sqlite", ""), ("mariadb", args.mariadb_url)]
    started = time.monotonic()
    rows: list[Row] = []
    # jobs/s of each round, by (system, database, processes): the ratios are also given
    # round by round, as the noise between rounds can be as large as a ratio's distance
    # from 1.
    rounds: dict[tuple[str, str, int], list[float]] = {}
    # Peers that could not run, or failed the checks of their run (a job lost, run twice
    # or left unfinished), with the reason.
    failed: dict[str, str] = {}

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if "throughput" not in args.skip:
        pg = peers.libpq_url(args.pg_url)
        for p in args.processes:
            # Every configuration runs once per round, the rounds one after another: a
            # machine that slows down or speeds up during the benchmark then weighs on
            # every system alike, and the ratios of the medians stay comparable.
            configs: list[tuple[str, Callable[[], Row]]] = []
            for kind, url in dbs:
                configs.append((f"readyq {kind}", lambda kind=kind, url=url, p=p: run_readyq(
                    kind, url, args.jobs, p, args.batch)))
                configs.append((f"chains {kind}", lambda kind=kind, url=url, p=p: run_readyq(
                    kind, url, args.jobs, p, args.batch, chains=True)))
                if "resources" not in args.skip:
                    # Every job takes one unit of a resource as large as the global cap:
                    # the claim that weighs costs, at a capacity that binds no more than
                    # the cap does.
                    configs.append((f"readyq resource {kind}",
                                    lambda kind=kind, url=url, p=p: run_readyq(
                                        kind, url, args.jobs, p, args.batch,
                                        resource=args.batch * p)))
                minimal_url = loop_url(kind, url)
                for form in peers.FORMS:
                    configs.append((f"{form} loop {kind}", lambda u=minimal_url, p=p, f=form:
                                    from_peer(peers.run_minimal_loop(u, args.jobs, p, 100,
                                                                     form=f))))
            if "peers" not in args.skip:
                configs += [
                    ("pgq100", lambda p=p: from_peer(peers.run_pgqueuer(pg, args.jobs, p, 100))),
                    ("pgq10", lambda p=p: from_peer(peers.run_pgqueuer(pg, args.jobs, p, 10))),
                    # PGQueuer runs faster still with larger batches on this machine: both
                    # systems again, at LARGE_BATCH.
                    (f"pgq{LARGE_BATCH}", lambda p=p: from_peer(
                        peers.run_pgqueuer(pg, args.jobs, p, LARGE_BATCH))),
                    (f"readyq postgresql {LARGE_BATCH}", lambda p=p: run_readyq(
                        "postgresql", args.pg_url, args.jobs, p, LARGE_BATCH)),
                    # The same without Worker.prepare() before the clock starts: the
                    # first claim also compiles the loop's SQL.
                    (f"readyq postgresql {LARGE_BATCH} cold", lambda p=p: run_readyq(
                        "postgresql", args.pg_url, args.jobs, p, LARGE_BATCH, prepared=False)),
                    ("proc", lambda p=p: from_peer(
                        peers.run_procrastinate(pg, PROCRASTINATE_JOBS, p, 10))),
                ]
                # readyq at LARGE_BATCH on SQLite too: huey claims one task at a time
                # and has no batch setting, so readyq's larger claim is compared with it.
                configs.append((f"readyq sqlite {LARGE_BATCH}", lambda p=p: run_readyq(
                    "sqlite", "", args.jobs, p, LARGE_BATCH)))
                # The queues a user would pick on each database, at the settings given in
                # bench/peers.py, with the same jobs as readyq.
                for kind, url in dbs:
                    peer_url = loop_url(kind, url)
                    if kind == "sqlite":
                        configs.append(("huey sqlite", lambda p=p: from_peer(
                            peers.run_huey(args.jobs, p))))
                    configs.append((f"django-tasks {kind}", lambda u=peer_url, p=p: from_peer(
                        peers.run_django_tasks(u, args.jobs, p))))
                    if kind != "mariadb":
                        configs.append((f"dbos {kind}", lambda u=peer_url, p=p: from_peer(
                            peers.run_dbos(u, args.jobs, p))))
                configs.append(("chancy postgresql", lambda p=p: from_peer(
                    peers.run_chancy(pg, args.jobs, p))))
            if args.only:
                unknown = set(args.only) - {label for label, _ in configs}
                if unknown:
                    ap.error(f"--only: no configuration named {', '.join(sorted(unknown))}")
                configs = [(label, fn) for label, fn in configs if label in args.only]
            runs: dict[str, list[Row]] = {label: [] for label, _ in configs}
            skipped: set[str] = set()
            for _ in range(args.repeat):
                for label, fn in configs:
                    if label in skipped:
                        continue
                    try:
                        runs[label].append(fn())
                    except Exception as exc:  # a peer not installed or failing
                        # readyq's own runs (the chains too) and the loops must run.
                        if label.startswith(("readyq", "chains")) or " loop " in label:
                            raise
                        log(f"  {label}: skipped ({exc.__class__.__name__}: {exc})")
                        skipped.add(label)
                        failed[f"{label}, {p} proc"] = f"{exc.__class__.__name__}: {exc}"
                        continue
                    log(f"  {label} {p} proc: {runs[label][-1].jobs_per_s:,.0f} jobs/s")
            for label, _ in configs:
                if runs[label] and label not in skipped:
                    row = median_row(runs[label])
                    rows.append(row)
                    rounds[row.system, row.database, row.processes] = [
                        r.jobs_per_s for r in runs[label]
                    ]

    with_procrastinate = any(r.system.startswith("Procrastinate") for r in rows)
    slow = f" (Procrastinate: {PROCRASTINATE_JOBS:,})" if with_procrastinate else ""
    print(f"\nreadyq benchmark, median of {args.repeat} run(s), {args.jobs:,} no-op jobs"
          f"{slow}, {os.cpu_count()} cores")
    print(f"{'system':40} {'database':10} {'procs':>5} {'jobs/s':>9} {'CPU us/job':>10}"
          f" {'server us/job':>13} {'commits/job':>11} {'claim p50/p99 ms':>17}")
    for r in rows:
        lat = f"{r.p50_ms:.1f} / {r.p99_ms:.1f}" if r.p50_ms is not None else ""
        commits = f"{r.commits_per_job:.3f}" if r.commits_per_job is not None else ""
        server = (f"{r.server_cpu_us_per_job:,.0f}" if r.server_cpu_us_per_job is not None
                  else "")
        print(f"{r.system:40} {r.database:10} {r.processes:>5} {r.jobs_per_s:>9,.0f}"
              f" {r.cpu_us_per_job:>10,.0f} {server:>13} {commits:>11} {lat:>17}")
    if rows:
        print("\nratios (same run): of the medians, then round by round")

        def by_round(a: Row, b: Row) -> str:
            ra = rounds.get((a.system, a.database, a.processes), [])
            rb = rounds.get((b.system, b.database, b.processes), [])
            if len(ra) < 2 or len(ra) != len(rb):
                return ""
            return "  (" + ", ".join(f"{x / y:.2f}" for x, y in zip(ra, rb, strict=True)) + ")"

        main_system = f"readyq (batch {args.batch}/process)"
        large_system = f"readyq (batch {LARGE_BATCH}/process)"
        for p in args.processes:
            mine = {r.database: r for r in rows if r.system == main_system
                    and r.processes == p}
            large = {r.database: r for r in rows if r.system == large_system
                     and r.processes == p}
            for r in rows:
                if r.processes != p:
                    continue
                # A run of chosen configurations (--only) may leave out either of readyq's
                # rows: each ratio is printed where the row it divides by ran.
                ours, big = mine.get(r.database), large.get(r.database)
                if r.resource_cap is not None:
                    if ours is not None:
                        print(f"  {r.system} / readyq without resources ({r.database}, "
                              f"{p} proc): {r.jobs_per_s / ours.jobs_per_s:.2f}x"
                              f"{by_round(r, ours)}")
                elif r.system.startswith("readyq,"):
                    if ours is not None:
                        print(f"  readyq, chains / readyq, independent jobs ({r.database}, "
                              f"{p} proc): {r.jobs_per_s / ours.jobs_per_s:.2f}x"
                              f"{by_round(r, ours)}")
                elif r.system.endswith(f"(batch {LARGE_BATCH})") and big is not None:
                    for mine_large in [big] + [
                        c for c in rows if c.system == f"{large_system}, cold"
                        and c.processes == p and c.database == r.database
                    ]:
                        print(f"  {mine_large.system} / {r.system} ({r.database}, {p} proc): "
                              f"{mine_large.jobs_per_s / r.jobs_per_s:.2f}x"
                              f"{by_round(mine_large, r)}")
                elif not r.system.startswith("readyq"):
                    if ours is not None:
                        print(f"  readyq / {r.system} ({r.database}, {p} proc): "
                              f"{ours.jobs_per_s / r.jobs_per_s:.2f}x{by_round(ours, r)}")
                    # The same peer against readyq at its larger claim (not a batch
                    # variant of a peer or a loop, which is compared at its own size).
                    if big is not None and "(batch " not in r.system:
                        print(f"  {big.system} / {r.system} ({r.database}, {p} proc): "
                              f"{big.jobs_per_s / r.jobs_per_s:.2f}x{by_round(big, r)}")

    if failed:
        print("\npeers left out of the table (not installed, or a run that failed its checks):")
        for label, why in failed.items():
            print(f"  {label}: {why[:300]}")

    checked = [r for r in rows if r.peak is not None]
    if checked:
        total = sum(GROUPS.values())
        expected = " ".join(f"{g[-1]} {w / total:.1%}" for g, w in GROUPS.items())
        print(f"\nguarantees at full speed (readyq rows above): peak in flight against the "
              f"global cap; share of the starts per group in the claims that started the "
              f"first 40% of jobs, weights 3:2:1:1 "
              f"(expected {expected}); for the chains, dependencies whose job started "
              f"before the job it depends on finished (expected 0)")
        for r in checked:
            verdict = "ok" if r.peak is not None and r.cap is not None and r.peak <= r.cap \
                else "CAP EXCEEDED"
            if r.shares is None:  # the chains: the dependency order instead of the shares
                print(f"  {r.database:10} {r.processes} proc, chains: peak {r.peak} / cap "
                      f"{r.cap} {verdict}; {r.early} of {r.edges:,} dependencies started "
                      f"before their upstream job finished")
                continue
            measured = " ".join(f"{g[-1]} {s:.1%}" for g, s in r.shares.items())
            worst = max(abs(s - GROUPS[g] / total) for g, s in r.shares.items())
            batch = "" if r.system.startswith(f"readyq (batch {args.batch}/process)") else \
                f", batch {LARGE_BATCH}" + (", cold" if r.system.endswith(", cold") else "")
            if r.resource_cap is not None:
                over = "ok" if (r.resource_peak or 0) <= r.resource_cap else "OVERSUBSCRIBED"
                batch += (f", 1 {RESOURCE} per job: peak {r.resource_peak} / capacity "
                          f"{r.resource_cap} {over}")
            print(f"  {r.database:10} {r.processes} proc{batch}: peak {r.peak} / cap {r.cap} "
                  f"{verdict}; shares {measured} (largest gap {worst:.1%})")

    if "deep" not in args.skip:
        # A backlog ten times the size: every claim walks past the index entries of the
        # jobs already claimed (PostgreSQL keeps them until a vacuum), and the planner's
        # statistics may not have caught up with the backlog.
        print(f"\ndeep backlog: {args.deep_jobs:,} no-op jobs drained by 1 process, one run "
              f"each; against the same system's median with {args.jobs:,} jobs above")
        deep: list[tuple[str, Callable[[], Row]]] = [
            (kind, lambda kind=kind, url=url: run_readyq(
                kind, url, args.deep_jobs, 1, args.batch)) for kind, url in dbs
        ]
        # The correct loop too: the throughput table's yardstick should be flat as well.
        for kind, url in dbs:
            minimal_url = loop_url(kind, url)
            deep.append((f"correct loop {kind}", lambda u=minimal_url: from_peer(
                peers.run_minimal_loop(u, args.deep_jobs, 1, 100, form="correct"))))
        if "peers" not in args.skip:
            pg = peers.libpq_url(args.pg_url)
            deep += [
                (f"pgq{b}", lambda b=b: from_peer(peers.run_pgqueuer(pg, args.deep_jobs, 1, b)))
                for b in (100, LARGE_BATCH)
            ]
        for label, fn in deep:
            try:
                r = fn()
            except Exception as exc:  # a peer not installed or failing
                if not label.startswith("pgq"):
                    raise
                log(f"  {label}: skipped ({exc.__class__.__name__}: {exc})")
                continue
            same = next((x for x in rows if x.system == r.system and x.database == r.database
                         and x.processes == 1), None)
            versus = f"   {r.jobs_per_s / same.jobs_per_s:.2f}x its {args.jobs:,}-job rate" \
                if same is not None else ""
            print(f"  {r.system:32} {r.database:10} {r.jobs_per_s:9,.0f} jobs/s{versus}",
                  flush=True)
    if "enqueue" not in args.skip:
        print("\nenqueue: enqueue_many of 20,000 jobs with dependencies (median of 3 batches) / "
              "single enqueue")
        for kind, url in dbs:
            bulk, single = enqueue_rates(kind, url)
            print(f"  {kind:10} {bulk:9,.0f} jobs/s bulk   {single:7,.0f} jobs/s single")
    if "scan" not in args.skip:
        print(f"\nscan flatness: each step's median of 60, on a table with 200 jobs, on "
              f"one with +{args.done_rows:,} done rows, +{args.waiting_rows:,} waiting rows, "
              f"and on one with +{args.other_ready:,} ready jobs of another type ahead of "
              f"the 200 in the same groups, measured in alternation (claim: one transaction "
              f"that takes 10 jobs; idle check: whether a type still has unfinished jobs; "
              f"2-type claim: the claim of a worker of two types; failed page: "
              f"Queue.jobs(state='failed', limit=50) over {FAILED_ROWS} failed jobs older "
              f"than every other row, and the page after it by its cursor; ready page: "
              f"Queue.jobs(state='ready', type='noop', limit=50))")
        for kind, url in dbs:
            empty, full, mixed = scan_flatness(
                kind, url, args.done_rows, args.waiting_rows, args.other_ready
            )
            for i, op in enumerate(OPERATIONS):
                name = kind if i == 0 else ""
                print(f"  {name:10} {op:12} empty {empty[op] * 1000:6.2f} ms   "
                      f"full {full[op] * 1000:6.2f} ms   ratio {full[op] / empty[op]:.2f}   "
                      f"other type {mixed[op] * 1000:6.2f} ms   ratio "
                      f"{mixed[op] / empty[op]:.2f}")
    if "isolation" not in args.skip:
        import isolation

        jobs = 500 if args.quick else 2000
        print(f"\nisolated jobs: {jobs:,} no-op jobs, 1 worker process with a pool of 2 "
              "children (readyq, isolation=\"process\", SQLite), its thread rate in the "
              "same run, and RQ's forking worker on Redis (see bench/isolation.py)")
        iso = isolation.run_readyq(f"sqlite:///{tempfile.mkdtemp()}/iso.db", jobs, "process")
        thr = isolation.run_readyq(f"sqlite:///{tempfile.mkdtemp()}/iso.db", jobs, "thread")
        print(f"  readyq isolated {iso:9,.0f} jobs/s, in threads {thr:9,.0f} jobs/s: "
              f"{1e6 / iso - 1e6 / thr:,.0f} us per job for isolation")
        try:
            rq_rate = isolation.run_rq(args.redis_url, jobs, 0)
        except ImportError:
            print("  RQ: not installed (pip install -e '.[bench]')")
        except Exception as exc:  # Redis down: say so, the rest of the run stands
            print(f"  RQ: not measured ({exc.__class__.__name__}: {exc})")
        else:
            print(f"  RQ forking worker {rq_rate:9,.0f} jobs/s: readyq isolated "
                  f"{iso / rq_rate:.1f}x")
    if "memory" not in args.skip:
        first, peak = memory_growth(args.memory_jobs)
        print(f"\nmemory: worker RSS over {args.memory_jobs:,} jobs (SQLite): "
              f"{first:.1f} MB after 10%, peak {peak:.1f} MB, growth {peak - first:.1f} MB")
    print(f"\n({time.monotonic() - started:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
