"""Peer job queues on the same databases, for comparison with readyq.

Adapters, each a plain function returning a :class:`PeerResult`:

``run_pgqueuer(pg_url, jobs, processes, batch_size)``
    PGQueuer (asyncpg driver).  Installs its schema in a fresh database
    (``bench_pgq`` next to the one ``pg_url`` names), bulk-enqueues ``jobs``
    no-op jobs, then runs ``processes`` worker processes, each a
    ``QueueManager`` with a no-op entrypoint, ``run(batch_size=batch_size,
    mode=drain)`` and otherwise PGQueuer's default settings.

``run_procrastinate(pg_url, jobs, processes, concurrency=10)``
    Procrastinate (``PsycopgConnector``).  Fresh database ``bench_proc``,
    schema applied, ``jobs`` no-op tasks deferred in one batch, then
    ``processes`` workers each running ``run_worker_async(concurrency=...,
    wait=False)`` with the other options at their defaults.

``run_huey(jobs, processes)``
    huey's ``SqliteHuey`` (SQLite, WAL, its defaults): ``processes`` processes, each
    one huey consumer worker (what ``huey_consumer -k process -w N`` runs N of: a
    process's worker threads would share its one SQLite connection, behind a lock, so
    processes are how huey runs more than one job at a time on SQLite). Results stored
    (``store_none=True``): a huey task that ran leaves no other trace to check.

``run_django_tasks(url, jobs, processes)``
    django-tasks with its database backend (``django-tasks-db``) on SQLite,
    PostgreSQL (psycopg) or MariaDB (PyMySQL, standing in for mysqlclient, which needs
    the client headers to build): its own ``db_worker`` command in each process, with
    ``--batch`` (exit when no task is ready) and ``--no-startup-delay``; the one
    setting changed from Django's defaults is ``CONN_MAX_AGE = None``, persistent
    connections, as Django's documentation advises where connecting costs (db_worker
    closes connections older than ``CONN_MAX_AGE`` after every task: reconnecting per
    job otherwise). The worker claims one task per transaction; it has no setting for
    more.

``run_dbos(url, jobs, processes)``
    DBOS queues, system database on SQLite or PostgreSQL: ``processes`` DBOS processes
    (each its own executor id), queue registered with ``worker_concurrency=100`` and
    ``polling_interval_sec=0.05``. Without a worker concurrency, the first process to
    poll claims the whole backlog and a second process has nothing to do; with it, each
    poll claims up to 100 workflows, as readyq's workers and the loops claim 100. The
    default polling interval of 1 s would cap a process at 100 workflows a second;
    0.05 s is the interval readyq's workers poll at when idle. Measured here before
    choosing: worker concurrency 10, 30, 100, 1000 and none, intervals 0.01, 0.05 and
    1 s; 100 at 0.05 s was as fast as any within the noise on both databases. DBOS
    itself calls its SQLite system database one for development and testing.

``run_chancy(pg_url, jobs, processes)``
    Chancy (PostgreSQL, psycopg), its default plugins: ``processes`` workers, the queue
    on Chancy's ``AsyncExecutor`` (the no-op is a coroutine) at its default
    concurrency of 100 per worker, with ``eager_polling=True``: Chancy's documentation
    offers it where jobs are expected to be continuously available (it names queues
    of low concurrency), as they are here, and without it a worker
    fetches only every ``polling_interval`` (here 1 s; 5 by default), at most 100 jobs
    per fetch (measured: about 100 jobs/s against 2,700). Chancy writes its workers'
    job outcomes in batches once a second; a worker's last batch is written when it
    finds nothing left (``Worker.flush()``) and counted in its time.

``run_minimal_loop(url, jobs, processes, batch, *, form="bare")``
    A claim/finish loop written directly against the driver, on PostgreSQL
    (psycopg, fresh database ``bench_min``), MariaDB/MySQL (pymysql, READ
    COMMITTED, fresh database ``bench_min``) or SQLite (sqlite3, WAL, default
    ``synchronous``; the file named in the URL, or a temporary one).  A round
    claims up to ``batch`` ready rows in one transaction (PostgreSQL: ``UPDATE
    ... FROM (SELECT ... FOR UPDATE SKIP LOCKED) RETURNING``; MariaDB: ``SELECT
    ... FOR UPDATE SKIP LOCKED`` then ``UPDATE`` by id; SQLite: ``BEGIN
    IMMEDIATE`` + ``UPDATE ... RETURNING``), runs the no-op for each, and
    finishes them in one transaction.  ``form="correct"``: the claim takes a
    lease with a fresh token and an expiry (indexed, for a reclaimer) and reads
    each job's JSON payload; the payload is decoded, the no-op's result encoded,
    and each job's result is written with its own UPDATE fenced by its lease
    token (the driver's ``executemany``): the least a queue can do and still
    survive a crashed worker.  ``form="bare"``: no payload, no lease expiry, the
    batch marked done with one UPDATE guarded by ``locked_by = me``: a floor,
    not a queue (a crashed worker's jobs would stay running).  ``batch=1`` is
    the per-job loop.

URLs: ``postgresql://user@host:port/db`` (``postgresql+psycopg://`` is
accepted too), ``mysql+pymysql://root@host:3306/db`` (or ``mysql://``,
``mariadb://``), ``sqlite:///relative.db`` / ``sqlite:////abs/path.db`` /
``sqlite://`` (temporary file).  For PostgreSQL and MariaDB the database in
the URL is only used to drop and create the benchmark's own database (name
overridable with ``db_name=``), which is left in place after the run.

What is measured, the same way for every system:

* Enqueueing, schema set-up, interpreter start-up, imports and connecting
  (and PGQueuer's schema check at the top of ``QueueManager.run``) are not
  timed: each worker process gets ready, prints ``READY`` and waits for a
  ``GO`` line on stdin (see ``bench/peer_worker.py``).
* ``seconds``: from just before the parent sends ``GO`` to the moment the last
  worker's loop returned, having found nothing left to claim and its own jobs
  recorded as finished.  ``jobs_per_s = jobs / seconds``.
* ``cpu_us_per_job``: the worker processes' user+system CPU time between
  ``GO`` and the end of their loop (``getrusage(RUSAGE_SELF)`` in each),
  summed, in microseconds per job.  Database server CPU is not included.
* ``server_cpu_us_per_job``: the whole machine's busy CPU time over the same
  window (``/proc/stat``; None where there is none) minus the workers' own, per
  job: the database server and the kernel's work for it (about 0 on SQLite,
  which runs inside the workers), plus whatever else the machine ran.
* ``commits_per_job``: PostgreSQL: ``pg_stat_database.xact_commit`` delta of
  the benchmark database over the run (read from a connection to another
  database, after the workers have disconnected so their stats are flushed),
  divided by ``jobs``.  It counts every transaction, read-only ones too (for
  Procrastinate half of its 4 per job are the connection pool's empty
  health-check queries), plus a handful of worker start-up / shut-down ones.
  MariaDB and SQLite: the commits the loop issued.
* After each run the database is checked: every job finished exactly once (a
  run that did not drain raises ``RuntimeError``). Every job's row (huey: its stored
  result) must say it finished, and the no-op bodies the workers ran must add up to
  the job count, so that none ran twice; where the peer's table also counts a job's
  claims (django-tasks' ``worker_ids``, DBOS's ``recovery_attempts``, Chancy's
  ``attempts``), each must have been claimed once.
* The peers whose set-up needs a process of its own (Django's settings and DBOS are
  set once per process) set up in a child process; set-up is never timed.

``python bench/peers.py --jobs 10000 --processes 1 2 --repeat 3`` prints the
medians of all configurations it can run; see ``--help``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

WORKER = Path(__file__).resolve().with_name("peer_worker.py")

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_MYSQL_URL = "mysql+pymysql://root@127.0.0.1:3306/test"

PGQ_ENTRYPOINT = "bench_noop"
PROC_TASK = "bench_noop"


@dataclass
class PeerResult:
    system: str
    database: str
    processes: int
    jobs: int
    seconds: float
    jobs_per_s: float
    cpu_us_per_job: float
    commits_per_job: float | None
    server_cpu_us_per_job: float | None = None


# ----------------------------------------------------------------------------- helpers


class _Lines:
    """Lines from a worker's stdout, read from the file descriptor itself: a buffered
    reader could hold a line that ``select`` then never reports."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self._fd = proc.stdout.fileno()
        self._buf = b""

    def next(self, deadline: float) -> str | None:
        """The next line, "" at end of file, None if the deadline passes first."""
        while b"\n" not in self._buf:
            left = max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(self._fd, 65536)
            if not chunk:
                line, self._buf = self._buf, b""
                return line.decode()
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode() + "\n"


def _machine_busy() -> float | None:
    """Seconds of CPU time the machine has spent busy since boot (user, nice, system,
    irq and softirq over every core, from /proc/stat), or None where it cannot say."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def libpq_url(url: str, db: str | None = None) -> str:
    """``url`` as a libpq URL (driver suffix dropped), optionally naming ``db``."""
    parts = urlsplit(url)
    scheme = parts.scheme.split("+", 1)[0]
    if scheme not in ("postgresql", "postgres"):
        raise ValueError(f"not a PostgreSQL URL: {url!r}")
    path = f"/{db}" if db is not None else parts.path
    return urlunsplit(("postgresql", parts.netloc, path, parts.query, ""))


def _pg_dbname(url: str) -> str:
    return unquote(urlsplit(url).path.lstrip("/")) or "postgres"


def _fresh_pg_database(admin_url: str, name: str) -> str:
    """Drop and create database ``name`` on the server of ``admin_url``; return its URL."""
    import psycopg
    from psycopg import sql

    if _pg_dbname(admin_url) == name:
        raise ValueError(f"the URL must name another database than {name!r}")
    with psycopg.connect(libpq_url(admin_url), autocommit=True) as conn:
        drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
        conn.execute(drop.format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return libpq_url(admin_url, name)


class PgCommits:
    """Reads ``xact_commit`` of one database from a connection to another one."""

    def __init__(self, admin_url: str, dbname: str):
        import psycopg

        self.dbname = dbname
        self.conn = psycopg.connect(libpq_url(admin_url), autocommit=True)

    def backends(self) -> int:
        return self.conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (self.dbname,)
        ).fetchone()[0]

    def wait_no_backends(self, timeout: float = 15.0) -> None:
        """Wait until nobody is connected to the database: their stats are flushed on exit."""
        deadline = time.monotonic() + timeout
        while self.backends() and time.monotonic() < deadline:
            time.sleep(0.02)

    def read(self) -> int:
        # autocommit: every statement is a new snapshot of the (cached) stats.
        return self.conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (self.dbname,)
        ).fetchone()[0]

    def close(self) -> None:
        self.conn.close()


@dataclass
class WorkerRun:
    startup: float  # spawn of the first worker to the last READY (not in ``seconds``)
    seconds: float
    cpu: float
    executed: int
    commits: int | None
    machine_cpu: float | None = None  # the machine's busy CPU seconds over the run


def run_workers(
    kind: str, configs: list[dict], timeout: float, on_ready: Callable[[], None] | None = None
) -> WorkerRun:
    """Start one worker process per config, release them together, collect results.

    ``on_ready`` runs once every worker is connected and waiting, just before GO.
    """
    procs: list[subprocess.Popen] = []
    errs: list = []
    spawned = time.monotonic()
    try:
        for cfg in configs:
            err = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in finally
            errs.append(err)
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(WORKER), kind, json.dumps(cfg)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                )
            )
        lines = [_Lines(p) for p in procs]
        deadline = time.monotonic() + 120
        for i, p in enumerate(procs):
            line = lines[i].next(deadline)
            if line is None or line.strip() != "READY":
                raise RuntimeError(f"{kind} worker {i} did not start: {_tail(p, errs[i])}")
        if on_ready is not None:
            on_ready()
        busy0 = _machine_busy()
        t0 = time.monotonic()
        for p in procs:
            p.stdin.write("GO\n")
            p.stdin.flush()
        deadline = t0 + timeout
        results = []
        for i, p in enumerate(procs):
            # Each worker reports one JSON line when its loop is done, then waits for
            # its stdin to close (see peer_worker.main).
            line = ""
            while not line.startswith("{"):
                got = lines[i].next(deadline)
                if got is None:
                    raise RuntimeError(
                        f"{kind} worker {i} still running after {timeout:.0f}s (queue not "
                        f"drained?)"
                    )
                if not got:
                    raise RuntimeError(
                        f"{kind} worker {i} failed (exit {p.wait()}): {_tail(p, errs[i])}"
                    )
                line = got
            results.append(json.loads(line))
        busy1 = _machine_busy()
        for i, p in enumerate(procs):
            p.stdin.close()
            if p.wait(timeout=60) != 0:
                raise RuntimeError(
                    f"{kind} worker {i} failed (exit {p.returncode}): {_tail(p, errs[i])}"
                )
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            for pipe in (p.stdin, p.stdout):
                if pipe is not None:
                    pipe.close()
        for err in errs:
            err.close()
    commits = [r["commits"] for r in results]
    return WorkerRun(
        startup=t0 - spawned,
        seconds=max(r["done"] for r in results) - t0,
        cpu=sum(r["cpu"] for r in results),
        executed=sum(r["executed"] for r in results),
        commits=None if None in commits else sum(commits),
        machine_cpu=None if busy0 is None or busy1 is None else busy1 - busy0,
    )


def _tail(p: subprocess.Popen, err) -> str:
    if p.poll() is None:
        p.kill()
        p.wait()
    err.seek(0)
    text = err.read().strip()
    return text[-2000:] or "(no stderr)"


def run_timeout(jobs: int) -> float:
    return 120.0 + jobs / 20.0


def _result(
    system: str, database: str, processes: int, jobs: int, run: WorkerRun, commits: int | None
) -> PeerResult:
    return PeerResult(
        system=system,
        database=database,
        processes=processes,
        jobs=jobs,
        seconds=run.seconds,
        jobs_per_s=jobs / run.seconds,
        cpu_us_per_job=run.cpu * 1e6 / jobs,
        commits_per_job=None if commits is None else commits / jobs,
        server_cpu_us_per_job=server_cpu(run, jobs),
    )


def server_cpu(run: WorkerRun, jobs: int) -> float | None:
    """The machine's CPU per job beyond the workers' own (see the module docstring)."""
    if run.machine_cpu is None:
        return None
    return max(0.0, run.machine_cpu - run.cpu) * 1e6 / jobs


def _check(system: str, what: str, got: int, want: int) -> None:
    if got != want:
        raise RuntimeError(f"{system}: {what} is {got}, expected {want}")


# ---------------------------------------------------------------------------- PGQueuer


def run_pgqueuer(
    pg_url: str, jobs: int, processes: int, batch_size: int, *, db_name: str = "bench_pgq"
) -> PeerResult:
    """PGQueuer throughput: ``processes`` QueueManager workers, ``batch_size`` per dequeue."""
    import asyncpg
    from pgqueuer import AsyncpgDriver
    from pgqueuer.queries import Queries

    system = f"PGQueuer (batch {batch_size})"
    url = _fresh_pg_database(pg_url, db_name)

    async def setup() -> None:
        conn = await asyncpg.connect(url)
        try:
            q = Queries(AsyncpgDriver(conn))
            await q.install()
            for start in range(0, jobs, 50_000):
                n = min(50_000, jobs - start)
                await q.enqueue([PGQ_ENTRYPOINT] * n, [None] * n, [0] * n)
        finally:
            await conn.close()

    asyncio.run(setup())
    stats = PgCommits(pg_url, db_name)
    try:
        stats.wait_no_backends()
        cfg = {"dsn": url, "entrypoint": PGQ_ENTRYPOINT, "batch_size": batch_size}
        before = None

        # read the counter once every worker is connected and waiting
        def start_hook() -> None:
            nonlocal before
            before = stats.read()

        run = run_workers("pgqueuer", [cfg] * processes, run_timeout(jobs), start_hook)
        stats.wait_no_backends()
        commits = stats.read() - before
    finally:
        stats.close()

    async def verify() -> tuple[int, int]:
        conn = await asyncpg.connect(url)
        try:
            names = Queries(AsyncpgDriver(conn)).qbe.qualified
            left = await conn.fetchval(f"SELECT count(*) FROM {names.queue_table}")
            ok = await conn.fetchval(
                f"SELECT count(*) FROM {names.queue_table_log} WHERE status = 'successful'"
            )
            return left, ok
        finally:
            await conn.close()

    left, ok = asyncio.run(verify())
    _check(system, "jobs left in the queue table", left, 0)
    _check(system, "successful jobs logged", ok, jobs)
    _check(system, "no-op executions", run.executed, jobs)
    return _result(system, "PostgreSQL", processes, jobs, run, commits)


# ------------------------------------------------------------------------ Procrastinate


def run_procrastinate(
    pg_url: str, jobs: int, processes: int, concurrency: int = 10, *, db_name: str = "bench_proc"
) -> PeerResult:
    """Procrastinate throughput: ``processes`` workers, ``concurrency`` jobs in flight each."""
    import procrastinate

    system = f"Procrastinate (concurrency {concurrency})"
    url = _fresh_pg_database(pg_url, db_name)

    async def setup() -> None:
        app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

        @app.task(name=PROC_TASK)
        async def noop() -> None:
            pass

        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            for start in range(0, jobs, 50_000):
                n = min(50_000, jobs - start)
                await noop.batch_defer_async(*({} for _ in range(n)))

    asyncio.run(setup())
    stats = PgCommits(pg_url, db_name)
    try:
        stats.wait_no_backends()
        before = None

        def start_hook() -> None:
            nonlocal before
            before = stats.read()

        cfg = {"dsn": url, "task_name": PROC_TASK, "concurrency": concurrency}
        run = run_workers("procrastinate", [cfg] * processes, run_timeout(jobs), start_hook)
        stats.wait_no_backends()
        commits = stats.read() - before
    finally:
        stats.close()

    import psycopg

    with psycopg.connect(url) as conn:
        rows = dict(
            conn.execute(
                "SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY 1"
            ).fetchall()
        )
    _check(system, "succeeded jobs", rows.get("succeeded", 0), jobs)
    _check(system, "no-op executions", run.executed, jobs)
    return _result(system, "PostgreSQL", processes, jobs, run, commits)


# ------------------------------------------------------------------ peers set up in a child


def _setup_child(kind: str, cfg: dict, timeout: float) -> None:
    """Run a set-up step of ``peer_worker.py`` in a process of its own (Django's settings
    and DBOS are configured once per process); raise with its stderr if it fails."""
    out = subprocess.run(
        [sys.executable, str(WORKER), kind, json.dumps(cfg)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{kind} failed (exit {out.returncode}): {out.stderr[-2000:]}")


def _scheme(url: str) -> str:
    return urlsplit(url).scheme.split("+", 1)[0]


def _database_name(url: str) -> str:
    """``PostgreSQL``, ``MariaDB`` or ``SQLite``, from a URL's scheme."""
    scheme = _scheme(url)
    if scheme in ("postgresql", "postgres"):
        return "PostgreSQL"
    if scheme in ("mysql", "mariadb"):
        return "MariaDB"
    if scheme == "sqlite":
        return "SQLite"
    raise ValueError(f"unsupported URL scheme in {url!r}")


def _fresh_mariadb_database(url: str, name: str) -> dict:
    """Drop and create database ``name`` on the server of ``url``; return pymysql's
    connect arguments for it."""
    import pymysql

    args = _mysql_connect_args(url)
    conn = pymysql.connect(**args, autocommit=True)
    try:
        cur = conn.cursor()
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        cur.execute(f"CREATE DATABASE `{name}`")
    finally:
        conn.close()
    return {**args, "database": name}


def _query(where: str | dict, sql: str) -> list[tuple]:
    """The rows of ``sql``, read from a SQLite file (a path), a PostgreSQL database (a
    libpq URL) or a MariaDB database (pymysql's connect arguments)."""
    if isinstance(where, dict):
        import pymysql

        conn = pymysql.connect(**where)
        try:
            cur = conn.cursor()
            cur.execute(sql)
            return [tuple(r) for r in cur.fetchall()]
        finally:
            conn.close()
    if where.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(where) as conn:
            return [tuple(r) for r in conn.execute(sql).fetchall()]
    import sqlite3

    conn = sqlite3.connect(where)
    try:
        return [tuple(r) for r in conn.execute(sql).fetchall()]
    finally:
        conn.close()


def _sqlite_file(name: str) -> tuple[Path, tempfile.TemporaryDirectory]:
    tmp = tempfile.TemporaryDirectory(prefix=f"{name}_")
    return Path(tmp.name) / f"{name}.db", tmp


def _pg_run(
    url: str, db_name: str, kind: str, cfgs: list[dict], jobs: int
) -> tuple[WorkerRun, int]:
    """Run the workers on PostgreSQL database ``db_name``, counting its commits."""
    stats = PgCommits(url, db_name)
    try:
        stats.wait_no_backends()
        before = 0

        def start_hook() -> None:
            nonlocal before
            before = stats.read()

        run = run_workers(kind, cfgs, run_timeout(jobs), start_hook)
        stats.wait_no_backends()
        return run, stats.read() - before
    finally:
        stats.close()


# ------------------------------------------------------------------------------- huey


def run_huey(jobs: int, processes: int) -> PeerResult:
    """huey's ``SqliteHuey`` (SQLite only): ``processes`` worker processes, each one huey
    consumer worker (see ``bench/peer_worker.py``), results stored (``store_none``)."""
    import peer_tasks

    system = "huey (SqliteHuey)"
    path, tmp = _sqlite_file("bench_huey")
    try:
        # Enqueued through huey's own API; with fsync off for this one connection only,
        # as setting up is not measured (the workers run at SQLite's default).
        huey, noop = peer_tasks.make_huey(str(path), fsync=False)
        ids = {noop(i).id for i in range(jobs)}
        huey.storage.close()
        cfgs = [{"path": str(path)} for _ in range(processes)]
        run = run_workers("huey", cfgs, run_timeout(jobs))
        left = _query(str(path), "SELECT count(*) FROM task")[0][0]
        results = {k for (k,) in _query(str(path), "SELECT key FROM kv WHERE queue = 'bench'")}
        scheduled = _query(str(path), "SELECT count(*) FROM schedule")[0][0]
    finally:
        tmp.cleanup()
    _check(system, "tasks left in the queue", left, 0)
    _check(system, "tasks scheduled for later (retries)", scheduled, 0)
    _check(system, "enqueued tasks without a stored result", len(ids - results), 0)
    _check(system, "stored results", len(results), jobs)
    _check(system, "no-op executions", run.executed, jobs)
    return _result(system, "SQLite", processes, jobs, run, None)


# ------------------------------------------------------------------------ django-tasks

DJANGO_TABLE = "django_tasks_database_dbtaskresult"  # the app label is django_tasks_database


def run_django_tasks(
    url: str, jobs: int, processes: int, *, db_name: str = "bench_django"
) -> PeerResult:
    """django-tasks with its database backend (``django-tasks-db``): ``processes``
    ``db_worker --batch`` workers, on SQLite, PostgreSQL or MariaDB."""
    import peer_django

    system = "django-tasks (db_worker)"
    database = _database_name(url)
    tmp = None
    if database == "SQLite":
        path, tmp = _sqlite_file(db_name)
        settings, where = peer_django.database_settings("sqlite", str(path)), str(path)
    elif database == "PostgreSQL":
        where = _fresh_pg_database(url, db_name)
        settings = peer_django.database_settings("postgresql", where)
    else:
        where = _fresh_mariadb_database(url, db_name)
        server = _mysql_connect_args(url)
        settings = peer_django.database_settings(
            "mariadb", f"mysql://{server['user']}@{server['host']}:{server['port']}/{db_name}"
        )
        settings["PASSWORD"] = server["password"]
    try:
        _setup_child("django-tasks-setup", {"database": settings, "jobs": jobs},
                     run_timeout(jobs))
        cfgs = [{"database": settings, "worker_id": f"w{i}-{os.getpid()}"}
                for i in range(processes)]
        if database == "PostgreSQL":
            run, commits = _pg_run(url, db_name, "django-tasks", cfgs, jobs)
        else:
            run, commits = run_workers("django-tasks", cfgs, run_timeout(jobs)), None
        states = dict(_query(
            where, f"SELECT status, count(*) FROM {DJANGO_TABLE} GROUP BY status"))
        claims = [json.loads(w) if isinstance(w, str) else w
                  for (w,) in _query(where, f"SELECT worker_ids FROM {DJANGO_TABLE}")]
    finally:
        if tmp is not None:
            tmp.cleanup()
    succeeded = states.get("SUCCESSFUL", 0)
    _check(system, "successful tasks", succeeded, jobs)
    _check(system, "tasks in any other state", sum(states.values()) - succeeded, 0)
    # Each claim appends the worker's id to the task's row: one entry, one run.
    _check(system, "tasks claimed other than once", sum(1 for w in claims if len(w) != 1), 0)
    _check(system, "no-op executions", run.executed, jobs)
    return _result(system, database, processes, jobs, run, commits)


# ------------------------------------------------------------------------------- DBOS

# DBOS's queue settings for the benchmark (see run_dbos).
DBOS_POLLING_INTERVAL = 0.05
DBOS_WORKER_CONCURRENCY = 100


def run_dbos(
    url: str, jobs: int, processes: int, *, db_name: str = "bench_dbos",
    worker_concurrency: int | None = DBOS_WORKER_CONCURRENCY,
    polling_interval: float = DBOS_POLLING_INTERVAL,
) -> PeerResult:
    """DBOS queues (SQLite or PostgreSQL system database): ``processes`` DBOS processes,
    each polling the queue every ``polling_interval`` seconds and running up to
    ``worker_concurrency`` of its workflows at once."""
    system = f"DBOS (worker concurrency {worker_concurrency})"
    database = _database_name(url)
    tmp = None
    if database == "SQLite":
        path, tmp = _sqlite_file(db_name)
        dbos_url, where, table = f"sqlite:///{path}", str(path), "workflow_status"
    elif database == "PostgreSQL":
        where = _fresh_pg_database(url, db_name)
        dbos_url, table = where.replace("postgresql://", "postgresql+psycopg://", 1), \
            "dbos.workflow_status"
    else:
        raise ValueError("DBOS runs on SQLite and PostgreSQL only")
    try:
        base = {"url": dbos_url, "worker_concurrency": worker_concurrency,
                "polling_interval": polling_interval}
        _setup_child("dbos-setup", {**base, "jobs": jobs, "executor_id": "setup"},
                     run_timeout(jobs) * 2)
        cfgs = [{**base, "executor_id": f"w{i}-{os.getpid()}"} for i in range(processes)]
        if database == "PostgreSQL":
            run, commits = _pg_run(url, db_name, "dbos", cfgs, jobs)
        else:
            run, commits = run_workers("dbos", cfgs, run_timeout(jobs)), None
        rows = _query(where, f"SELECT status, recovery_attempts, count(*) FROM {table}"
                             " WHERE queue_name = 'bench' GROUP BY status, recovery_attempts")
    finally:
        if tmp is not None:
            tmp.cleanup()
    by = {(status, attempts): n for status, attempts, n in rows}
    # The claim counts each dispatch of a workflow in its recovery_attempts.
    _check(system, "workflows succeeded after one dispatch", by.get(("SUCCESS", 1), 0), jobs)
    _check(system, "workflows in any other state or dispatched again",
           sum(by.values()) - by.get(("SUCCESS", 1), 0), 0)
    _check(system, "no-op executions", run.executed, jobs)
    return _result(system, database, processes, jobs, run, commits)


# ----------------------------------------------------------------------------- Chancy

# Chancy's queue settings for the benchmark (see run_chancy).
CHANCY_CONCURRENCY = 100
CHANCY_POLLING_INTERVAL = 1


def run_chancy(
    pg_url: str, jobs: int, processes: int, *, db_name: str = "bench_chancy",
    concurrency: int = CHANCY_CONCURRENCY, eager_polling: bool = True,
    polling_interval: int = CHANCY_POLLING_INTERVAL,
) -> PeerResult:
    """Chancy (PostgreSQL): ``processes`` workers, the queue on Chancy's AsyncExecutor with
    ``concurrency`` jobs in flight per worker."""
    from chancy import Chancy, Job

    system = f"Chancy (concurrency {concurrency})"
    url = _fresh_pg_database(pg_url, db_name)

    async def setup() -> None:
        async with Chancy(url) as chancy:
            await chancy.migrate()
            job = Job(func="peer_tasks.chancy_noop", queue="bench")
            async for _ in chancy.push_many([job.with_kwargs(i=i) for i in range(jobs)]):
                pass

    asyncio.run(setup())
    cfgs = [{"dsn": url, "worker_id": f"w{i}-{os.getpid()}", "declare": i == 0,
             "concurrency": concurrency, "eager_polling": eager_polling,
             "polling_interval": polling_interval} for i in range(processes)]
    run, commits = _pg_run(pg_url, db_name, "chancy", cfgs, jobs)
    rows = _query(url, "SELECT state, attempts, count(*) FROM chancy_jobs GROUP BY state, attempts")
    by = {(state, attempts): n for state, attempts, n in rows}
    _check(system, "jobs succeeded at the first attempt", by.get(("succeeded", 1), 0), jobs)
    _check(system, "jobs in any other state", sum(by.values()) - by.get(("succeeded", 1), 0), 0)
    _check(system, "no-op executions", run.executed, jobs)
    return _result(system, "PostgreSQL", processes, jobs, run, commits)


# ------------------------------------------------------------------------- minimal loop


def run_minimal_loop(
    url: str,
    jobs: int,
    processes: int,
    batch: int,
    *,
    form: str = "bare",
    db_name: str = "bench_min",
) -> PeerResult:
    """Reference claim/no-op/finish loop on PostgreSQL, MariaDB/MySQL or SQLite.

    ``form="bare"`` marks a claimed batch done with one UPDATE and keeps no lease
    expiry; ``form="correct"`` takes leases with a token and an expiry, decodes each
    payload and records each job's own result with its own fenced UPDATE, in one
    transaction (see ``bench/peer_worker.py``).
    """
    if form not in FORMS:
        raise ValueError(f"form must be one of {sorted(FORMS)}, not {form!r}")
    scheme = urlsplit(url).scheme.split("+", 1)[0]
    system = f"{form} loop (batch {batch})"
    base = {"batch": batch, "form": form}
    if scheme in ("postgresql", "postgres"):
        return _minimal_postgresql(url, jobs, processes, base, db_name, system)
    if scheme in ("mysql", "mariadb"):
        return _minimal_mariadb(url, jobs, processes, base, db_name, system)
    if scheme == "sqlite":
        return _minimal_sqlite(url, jobs, processes, base, system)
    raise ValueError(f"unsupported URL scheme in {url!r}")


FORMS = ("bare", "correct")


def _worker_configs(base: dict, processes: int) -> list[dict]:
    return [{**base, "worker_id": f"w{i}-{os.getpid()}"} for i in range(processes)]


def _minimal_postgresql(
    url: str, jobs: int, processes: int, base: dict, db_name: str, system: str
) -> PeerResult:
    import psycopg

    dsn = _fresh_pg_database(url, db_name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        if base["form"] == "correct":
            conn.execute(
                "CREATE TABLE bench_jobs (id bigserial PRIMARY KEY,"
                " state text NOT NULL DEFAULT 'ready', payload text NOT NULL,"
                " attempts integer NOT NULL DEFAULT 0, lease_token bigint,"
                " lease_expires timestamptz, result text)"
            )
            conn.execute(
                "CREATE INDEX bench_jobs_leases ON bench_jobs (lease_expires)"
                " WHERE state = 'running'"
            )
            conn.execute(
                "INSERT INTO bench_jobs (payload) SELECT json_build_object('i', i)::text"
                " FROM generate_series(1, %s) AS i",
                (jobs,),
            )
        else:
            conn.execute(
                "CREATE TABLE bench_jobs (id bigserial PRIMARY KEY,"
                " state text NOT NULL DEFAULT 'ready', locked_by text, result text)"
            )
            conn.execute(
                "INSERT INTO bench_jobs (state) SELECT 'ready' FROM generate_series(1, %s)",
                (jobs,),
            )
        conn.execute("CREATE INDEX bench_jobs_ready ON bench_jobs (id) WHERE state = 'ready'")
        conn.execute("VACUUM ANALYZE bench_jobs")
    stats = PgCommits(url, db_name)
    try:
        stats.wait_no_backends()
        before = None

        def start_hook() -> None:
            nonlocal before
            before = stats.read()

        cfgs = _worker_configs({**base, "dsn": dsn}, processes)
        run = run_workers("minimal-postgresql", cfgs, run_timeout(jobs), start_hook)
        stats.wait_no_backends()
        commits = stats.read() - before
    finally:
        stats.close()
    with psycopg.connect(dsn) as conn:
        done = conn.execute("SELECT count(*) FROM bench_jobs WHERE state = 'done'").fetchone()[0]
    _check(system, "done rows", done, jobs)
    _check(system, "no-op executions", run.executed, jobs)
    return _result(system, "PostgreSQL", processes, jobs, run, commits)


def _mysql_connect_args(url: str) -> dict:
    parts = urlsplit(url)
    return {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 3306,
        "user": unquote(parts.username or "root"),
        "password": unquote(parts.password or ""),
    }


def _minimal_mariadb(
    url: str, jobs: int, processes: int, base: dict, db_name: str, system: str
) -> PeerResult:
    import pymysql

    args = _mysql_connect_args(url)
    conn = pymysql.connect(**args, autocommit=True)
    try:
        cur = conn.cursor()
        cur.execute(f"DROP DATABASE IF EXISTS `{db_name}`")
        cur.execute(f"CREATE DATABASE `{db_name}`")
        cur.execute(f"USE `{db_name}`")
        if base["form"] == "correct":
            # No partial indexes: the leases' index leads with the state.
            cur.execute(
                "CREATE TABLE bench_jobs (id BIGINT AUTO_INCREMENT PRIMARY KEY,"
                " state VARCHAR(16) NOT NULL DEFAULT 'ready', payload TEXT NOT NULL,"
                " attempts INT NOT NULL DEFAULT 0, lease_token BIGINT,"
                " lease_expires DATETIME(6), result TEXT,"
                " KEY bench_jobs_state (state, id),"
                " KEY bench_jobs_leases (state, lease_expires)) ENGINE=InnoDB"
            )
            for start in range(0, jobs, 5000):
                payloads = [json.dumps({"i": i}) for i in range(start, min(start + 5000, jobs))]
                cur.execute(
                    "INSERT INTO bench_jobs (payload) VALUES "
                    + ",".join(["(%s)"] * len(payloads)),
                    payloads,
                )
        else:
            cur.execute(
                "CREATE TABLE bench_jobs (id BIGINT AUTO_INCREMENT PRIMARY KEY,"
                " state VARCHAR(16) NOT NULL DEFAULT 'ready', locked_by VARCHAR(64),"
                " result VARCHAR(64), KEY bench_jobs_state (state, id)) ENGINE=InnoDB"
            )
            for start in range(0, jobs, 5000):
                n = min(5000, jobs - start)
                cur.execute(
                    "INSERT INTO bench_jobs (state) VALUES " + ",".join(["('ready')"] * n)
                )
        cur.execute("ANALYZE TABLE bench_jobs")
        cur.fetchall()
    finally:
        conn.close()
    cfgs = _worker_configs({**base, "connect": {**args, "database": db_name}}, processes)
    run = run_workers("minimal-mariadb", cfgs, run_timeout(jobs))
    conn = pymysql.connect(**args, database=db_name)
    try:
        cur = conn.cursor()
        cur.execute("SELECT count(*) FROM bench_jobs WHERE state = 'done'")
        done = cur.fetchone()[0]
    finally:
        conn.close()
    _check(system, "done rows", done, jobs)
    _check(system, "no-op executions", run.executed, jobs)
    return _result(system, "MariaDB", processes, jobs, run, run.commits)


def _sqlite_path(url: str) -> tuple[Path, tempfile.TemporaryDirectory | None]:
    rest = url[len("sqlite://") :]
    if rest in ("", "/", "/:memory:"):
        tmp = tempfile.TemporaryDirectory(prefix="bench_min_")
        return Path(tmp.name) / "bench_min.db", tmp
    return Path(rest[1:] if rest.startswith("/") else rest), None


def sqlite_loop_table(path: Path, jobs: int, form: str) -> None:
    """A new SQLite file at ``path`` with ``jobs`` ready jobs in the loop's table for
    ``form``, analyzed."""
    import sqlite3

    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("BEGIN")
        if form == "correct":
            conn.execute(
                "CREATE TABLE bench_jobs (id INTEGER PRIMARY KEY,"
                " state TEXT NOT NULL DEFAULT 'ready', payload TEXT NOT NULL,"
                " attempts INTEGER NOT NULL DEFAULT 0, lease_token INTEGER,"
                " lease_expires REAL, result TEXT)"
            )
            conn.execute(
                "CREATE INDEX bench_jobs_leases ON bench_jobs (lease_expires)"
                " WHERE state = 'running'"
            )
            conn.executemany(
                "INSERT INTO bench_jobs (payload) VALUES (?)",
                ((json.dumps({"i": i}),) for i in range(jobs)),
            )
        else:
            conn.execute(
                "CREATE TABLE bench_jobs (id INTEGER PRIMARY KEY,"
                " state TEXT NOT NULL DEFAULT 'ready', locked_by TEXT, result TEXT)"
            )
            conn.executemany(
                "INSERT INTO bench_jobs (state) VALUES ('ready')", ([] for _ in range(jobs))
            )
        conn.execute("CREATE INDEX bench_jobs_ready ON bench_jobs (id) WHERE state = 'ready'")
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
    finally:
        conn.close()


def _minimal_sqlite(url: str, jobs: int, processes: int, base: dict, system: str) -> PeerResult:
    import sqlite3

    path, tmp = _sqlite_path(url)
    try:
        sqlite_loop_table(path, jobs, base["form"])
        cfgs = _worker_configs({**base, "path": str(path)}, processes)
        run = run_workers("minimal-sqlite", cfgs, run_timeout(jobs))
        conn = sqlite3.connect(path)
        done = conn.execute("SELECT count(*) FROM bench_jobs WHERE state = 'done'").fetchone()[0]
        conn.close()
    finally:
        if tmp is not None:
            tmp.cleanup()
    _check(system, "done rows", done, jobs)
    _check(system, "no-op executions", run.executed, jobs)
    return _result(system, "SQLite", processes, jobs, run, run.commits)


# -------------------------------------------------------------------------------- table


def missing_module(*modules: str) -> str | None:
    """None if every module imports, else the name of the first missing one."""
    for m in modules:
        if importlib.util.find_spec(m) is None:
            return m
    return None


def _reachable_pg(url: str) -> str | None:
    try:
        import psycopg

        psycopg.connect(libpq_url(url), connect_timeout=3).close()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".strip()
    return None


def _reachable_mysql(url: str) -> str | None:
    try:
        import pymysql

        pymysql.connect(**_mysql_connect_args(url), connect_timeout=3).close()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".strip()
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=10_000, help="jobs per run (default 10000)")
    ap.add_argument(
        "--processes", type=int, nargs="+", default=[1, 2],
        help="worker-process counts to run each configuration with (default: 1 2)",
    )
    ap.add_argument(
        "--repeat", type=int, default=3, help="runs per configuration; the table shows medians"
    )
    ap.add_argument(
        "--slow-jobs",
        type=int,
        default=2_000,
        help="job count for the configurations that commit per job (Procrastinate,"
        " correct loop batch 1), which run at a few hundred jobs/s: 10,000 of them"
        " would take most of the time budget; 0 = use --jobs for them too (default 2000)",
    )
    ap.add_argument(
        "--pg-url", default=DEFAULT_PG_URL,
        help="PostgreSQL server; bench_pgq / bench_proc / bench_min are (re)created on it",
    )
    ap.add_argument(
        "--mysql-url", default=DEFAULT_MYSQL_URL,
        help="MariaDB/MySQL server; bench_min is (re)created on it",
    )
    ap.add_argument("--sqlite-url", default="sqlite://", help="default: a temporary file")
    ap.add_argument("--only", default="", help="run only configurations whose name contains this")
    args = ap.parse_args(argv)
    slow = args.slow_jobs or args.jobs

    notes: list[str] = []
    configs: list[tuple[str, str, int, object]] = []  # (name, database, jobs, fn(processes))

    pg_down = (
        "psycopg not importable" if missing_module("psycopg") else _reachable_pg(args.pg_url)
    )
    if pg_down:
        notes.append(f"PostgreSQL skipped ({args.pg_url}): {pg_down}")
    my_down = missing_module("pymysql")
    my_down = f"{my_down} not importable" if my_down else _reachable_mysql(args.mysql_url)
    if my_down:
        notes.append(f"MariaDB skipped ({args.mysql_url}): {my_down}")

    if not pg_down:
        missing = missing_module("pgqueuer", "asyncpg")
        if missing:
            notes.append(f"PGQueuer skipped: package {missing!r} is not importable")
        else:
            for b in (10, 100):
                configs.append(
                    (f"PGQueuer (batch {b})", "PostgreSQL", args.jobs,
                     lambda p, n, b=b: run_pgqueuer(args.pg_url, n, p, b))
                )
        missing = missing_module("procrastinate")
        if missing:
            notes.append(f"Procrastinate skipped: package {missing!r} is not importable")
        else:
            configs.append(
                ("Procrastinate (concurrency 10)", "PostgreSQL", slow,
                 lambda p, n: run_procrastinate(args.pg_url, n, p, 10))
            )
    for db, url, down in (
        ("PostgreSQL", args.pg_url, pg_down),
        ("SQLite", args.sqlite_url, None),
        ("MariaDB", args.mysql_url, my_down),
    ):
        if down:
            continue
        for b, form in ((1, "correct"), (100, "bare"), (100, "correct")):
            n = slow if b == 1 else args.jobs
            configs.append(
                (f"{form} loop (batch {b})", db, n,
                 lambda p, n, url=url, b=b, form=form: run_minimal_loop(url, n, p, b, form=form))
            )
    if args.only:
        configs = [c for c in configs if args.only.lower() in f"{c[0]} {c[1]}".lower()]

    for note in notes:
        print(f"note: {note}", file=sys.stderr)

    started = time.monotonic()
    results: dict[tuple[int, int], list[PeerResult]] = {}
    failures: dict[tuple[int, int], str] = {}
    for rep in range(args.repeat):
        for ci, (name, db, n, fn) in enumerate(configs):
            for p in args.processes:
                key = (ci, p)
                if key in failures:
                    continue
                try:
                    r = fn(p, n)
                except Exception as exc:
                    failures[key] = f"{type(exc).__name__}: {exc}"
                    print(f"  {name} / {db} / {p} proc: FAILED {failures[key]}", file=sys.stderr)
                    continue
                results.setdefault(key, []).append(r)
                print(
                    f"  [{rep + 1}/{args.repeat}] {name:42} {db:10} {p} proc"
                    f" {r.jobs:>6} jobs {r.jobs_per_s:>9,.0f} jobs/s",
                    file=sys.stderr,
                    flush=True,
                )

    head = (
        f"{'system':42} {'database':10} {'procs':>5} {'jobs':>6} {'jobs/s':>9}"
        f" {'CPU us/job':>10} {'server us/job':>13} {'commits/job':>11}"
    )
    print(f"\nmedians of {args.repeat} runs ({time.monotonic() - started:.0f}s total)")
    print(head)
    print("-" * len(head))
    for ci, (name, db, n, _) in enumerate(configs):
        for p in args.processes:
            rs = results.get((ci, p))
            if not rs:
                print(f"{name:42} {db:10} {p:>5} {n:>6}  failed: {failures.get((ci, p), '?')}")
                continue
            def med(f: Callable[[Any], float], rs: list[Any] = rs) -> float:
                return statistics.median(f(r) for r in rs)

            commits = [r.commits_per_job for r in rs]
            cpj = "-" if None in commits else f"{statistics.median(commits):.3f}"
            servers = [r.server_cpu_us_per_job for r in rs]
            server = "-" if None in servers else f"{statistics.median(servers):,.0f}"
            print(
                f"{name:42} {db:10} {p:>5} {n:>6} {med(lambda r: r.jobs_per_s):>9,.0f}"
                f" {med(lambda r: r.cpu_us_per_job):>10,.0f} {server:>13} {cpj:>11}"
            )
    for note in notes:
        print(f"note: {note}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
