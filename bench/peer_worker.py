"""Worker process for the peer benchmarks in ``bench/peers.py``.

Run as ``python bench/peer_worker.py KIND CONFIG_JSON``; ``peers.py`` starts
one of these per worker process.  The protocol with the parent is three lines and
an end of file:

1. the worker connects and builds everything it needs, then prints ``READY``;
2. it blocks until the parent writes ``GO`` on its stdin (the parent starts its
   clock just before), so interpreter start-up, imports and connecting stay
   outside the timed window;
3. it works until the queue is drained (each system stops itself when it finds
   nothing left to claim; readyq's is done at that moment, see ``_readyq``), then
   prints one JSON line::

       {"done": <time.monotonic() when it found nothing left>,
        "cpu": <user+system CPU seconds of this process between GO and done>,
        "executed": <jobs the no-op body ran>, "commits": <commits it counted or null>}

4. it exits once its stdin is closed: the parent reads the machine's CPU counters
   when every worker has reported, before any of them shuts down.

``time.monotonic()`` is the system-wide CLOCK_MONOTONIC on Linux, so the
parent can compare it with its own start time.

KIND is one of ``readyq``, ``pgqueuer``, ``procrastinate``, ``huey``, ``django-tasks``,
``dbos``, ``chancy``, ``minimal-postgresql``, ``minimal-mariadb``, ``minimal-sqlite``;
or ``django-tasks-setup`` / ``dbos-setup``, which set up a peer's database, enqueue its
jobs and exit, outside the protocol above.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import secrets
import sys
import time


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _wait_for_go() -> None:
    print("READY", flush=True)
    line = sys.stdin.readline()
    if line.strip() != "GO":  # the parent gave up before starting
        sys.exit(3)


def _report(done: float, cpu: float, executed: int, commits: int | None) -> None:
    print(
        json.dumps({"done": done, "cpu": cpu, "executed": executed, "commits": commits}),
        flush=True,
    )


# --------------------------------------------------------------------------- PGQueuer


async def _pgqueuer(cfg: dict) -> None:
    import asyncpg
    from pgqueuer import AsyncpgDriver, QueueManager
    from pgqueuer.domain.types import QueueExecutionMode
    from pgqueuer.queries import Queries

    conn = await asyncpg.connect(cfg["dsn"])
    # Flush this backend's setup transactions into pg_stat_database now, so
    # they do not land in the parent's commit count for the run.
    with contextlib.suppress(asyncpg.PostgresError):
        await conn.execute("SELECT pg_stat_force_next_flush()")  # PostgreSQL 15+
    qm = QueueManager(Queries(AsyncpgDriver(conn)))
    executed = 0

    @qm.entrypoint(cfg["entrypoint"])
    async def noop(job) -> None:
        nonlocal executed
        executed += 1

    # run() starts by checking the schema (a dozen catalog queries): do that
    # now, outside the timed window, and skip it inside run().
    await qm.verify_structure()

    async def _already_verified() -> None:
        return None

    qm.verify_structure = _already_verified  # type: ignore[method-assign]

    _wait_for_go()
    cpu0 = _cpu()
    # drain: dequeue in batches of batch_size until nothing is queued and
    # this worker's in-flight jobs are logged, then return.
    await qm.run(batch_size=cfg["batch_size"], mode=QueueExecutionMode.drain)
    done = time.monotonic()
    cpu = _cpu() - cpu0
    await conn.close()
    _report(done, cpu, executed, None)


# ------------------------------------------------------------------------ Procrastinate


async def _procrastinate(cfg: dict) -> None:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=cfg["dsn"]))
    executed = 0

    @app.task(name=cfg["task_name"])
    async def noop() -> None:
        nonlocal executed
        executed += 1

    async with app.open_async():
        _wait_for_go()
        cpu0 = _cpu()
        # wait=False: the worker returns once it finds no job to fetch and its
        # in-flight jobs have finished.
        await app.run_worker_async(concurrency=cfg["concurrency"], wait=False)
        done = time.monotonic()
        cpu = _cpu() - cpu0
    _report(done, cpu, executed, None)


# ------------------------------------------------------------------------ minimal loops
#
# Two forms, cfg["form"]:
#
# "bare": table bench_jobs(id, state, locked_by, result). A round claims up to `batch`
#   ready rows in one transaction, runs the no-op for each, then marks them all done
#   with one UPDATE guarded by state = 'running' AND locked_by = me. No lease expiry
#   (a crashed worker's jobs stay running forever) and no per-job result: the least
#   work any claim/finish loop can do, not a queue anyone could run.
# "correct": table bench_jobs(id, state, payload, attempts, lease_token, lease_expires,
#   result), with the index a reclaimer needs on the leases. The claim takes a lease
#   with a fresh token and an expiry and reads the jobs' payloads; each job's payload is
#   decoded, the no-op runs on it, its result is encoded; one transaction then writes
#   each job's own result with its own UPDATE, fenced by the job's lease token (the
#   driver's executemany). What a queue needs at least to survive a crashed or stalled
#   worker without losing or double-finishing a job.

LEASE_SECONDS = 60
# The correct loop's finish of one job (result, id, token), fenced by its lease token.
FINISH_ONE = (
    "UPDATE bench_jobs SET state = 'done', result = %s, lease_token = NULL,"
    " lease_expires = NULL WHERE id = %s AND lease_token = %s AND state = 'running'"
)


def _noop(args: object) -> None:
    return None


def _run_claimed(rows: list, token: int) -> list[tuple[str, int, int]]:
    """Decode each claimed job's payload, run the no-op, encode its result."""
    return [(json.dumps(_noop(json.loads(payload))), job_id, token) for job_id, payload in rows]


def _minimal_postgresql(cfg: dict) -> None:
    import psycopg

    me, batch, correct = cfg["worker_id"], cfg["batch"], cfg["form"] == "correct"
    conn = psycopg.connect(cfg["dsn"], autocommit=True)  # one statement = one transaction
    with contextlib.suppress(psycopg.Error):
        conn.execute("SELECT pg_stat_force_next_flush()")  # PostgreSQL 15+
    if correct:
        claim = (
            "WITH c AS (SELECT id FROM bench_jobs WHERE state = 'ready' ORDER BY id"
            " LIMIT %s FOR UPDATE SKIP LOCKED)"
            " UPDATE bench_jobs j SET state = 'running', attempts = j.attempts + 1,"
            " lease_token = %s, lease_expires = now() + make_interval(secs => %s)"
            " FROM c WHERE j.id = c.id RETURNING j.id, j.payload"
        )
    else:
        claim = (
            "WITH c AS (SELECT id FROM bench_jobs WHERE state = 'ready' ORDER BY id"
            " LIMIT %s FOR UPDATE SKIP LOCKED)"
            " UPDATE bench_jobs j SET state = 'running', locked_by = %s"
            " FROM c WHERE j.id = c.id RETURNING j.id"
        )
    finish_set = (
        "UPDATE bench_jobs SET state = 'done', result = 'ok'"
        " WHERE id = ANY(%s) AND state = 'running' AND locked_by = %s"
    )
    executed = lost = commits = 0
    _wait_for_go()
    cpu0 = _cpu()
    while True:
        token = secrets.randbits(62) if correct else 0
        params = (batch, token, LEASE_SECONDS) if correct else (batch, me)
        rows = conn.execute(claim, params).fetchall()
        commits += 1
        if not rows:
            break
        if correct:
            results = _run_claimed(rows, token)
            executed += len(results)
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(FINISH_ONE, results)
                n = cur.rowcount
        else:
            ids = [r[0] for r in rows]
            executed += len(ids)  # the no-op job bodies
            n = conn.execute(finish_set, (ids, me)).rowcount
        commits += 1
        lost += len(rows) - n
    done = time.monotonic()
    cpu = _cpu() - cpu0
    conn.close()
    if lost:
        print(f"lost {lost} finish updates", file=sys.stderr)
    _report(done, cpu, executed - lost, commits)


def _minimal_mariadb(cfg: dict) -> None:
    import pymysql

    me, batch, correct = cfg["worker_id"], cfg["batch"], cfg["form"] == "correct"
    conn = pymysql.connect(**cfg["connect"], autocommit=False)
    cur = conn.cursor()
    cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    select = (
        f"SELECT id{', payload' if correct else ''} FROM bench_jobs WHERE state = 'ready'"
        " ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED"
    )
    executed = lost = commits = 0
    _wait_for_go()
    cpu0 = _cpu()
    while True:
        cur.execute(select, (batch,))
        rows = cur.fetchall()
        if not rows:
            conn.commit()
            commits += 1
            break
        ids = [r[0] for r in rows]
        marks = ",".join(["%s"] * len(ids))
        if correct:
            token = secrets.randbits(62)
            cur.execute(
                "UPDATE bench_jobs SET state = 'running', attempts = attempts + 1,"
                " lease_token = %s, lease_expires = NOW(6) + INTERVAL %s SECOND"
                f" WHERE id IN ({marks})",
                (token, LEASE_SECONDS, *ids),
            )
        else:
            cur.execute(
                f"UPDATE bench_jobs SET state = 'running', locked_by = %s WHERE id IN ({marks})",
                (me, *ids),
            )
        conn.commit()
        commits += 1
        if correct:
            results = _run_claimed(rows, token)
            executed += len(results)
            n = cur.executemany(FINISH_ONE, results)  # one UPDATE per job
        else:
            executed += len(ids)  # the no-op job bodies
            n = cur.execute(
                "UPDATE bench_jobs SET state = 'done', result = 'ok'"
                f" WHERE id IN ({marks}) AND state = 'running' AND locked_by = %s",
                (*ids, me),
            )
        conn.commit()
        commits += 1
        lost += len(ids) - n
    done = time.monotonic()
    cpu = _cpu() - cpu0
    conn.close()
    if lost:
        print(f"lost {lost} finish updates", file=sys.stderr)
    _report(done, cpu, executed - lost, commits)


# The SQLite loops' claims. The ready rows are read through the ready index, named: the
# table is analyzed while every row is ready, and with those statistics SQLite's planner
# reads the table in id order instead, past every row already done (at 60,000 jobs the
# correct loop's claim cost 8.6 us per job that way, against 1.1 through the index).
SQLITE_READY = (
    "SELECT id FROM bench_jobs INDEXED BY bench_jobs_ready WHERE state = 'ready'"
    " ORDER BY id LIMIT ?"
)
SQLITE_CLAIM = {
    "correct": (
        "UPDATE bench_jobs SET state = 'running', attempts = attempts + 1,"
        " lease_token = ?, lease_expires = (julianday('now') - 2440587.5) * 86400.0 + ?"
        f" WHERE id IN ({SQLITE_READY}) RETURNING id, payload"
    ),
    "bare": (
        "UPDATE bench_jobs SET state = 'running', locked_by = ?"
        f" WHERE id IN ({SQLITE_READY}) RETURNING id"
    ),
}


def _minimal_sqlite(cfg: dict) -> None:
    import sqlite3

    me, batch, correct = cfg["worker_id"], cfg["batch"], cfg["form"] == "correct"
    # isolation_level=None: no implicit transactions, we issue BEGIN/COMMIT.
    conn = sqlite3.connect(cfg["path"], timeout=60, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")  # already WAL; synchronous left at default
    claim = SQLITE_CLAIM[cfg["form"]]
    finish_one = FINISH_ONE.replace("%s", "?")  # sqlite3's placeholders
    executed = lost = commits = 0
    _wait_for_go()
    cpu0 = _cpu()
    while True:
        token = secrets.randbits(62) if correct else 0
        conn.execute("BEGIN IMMEDIATE")
        params = (token, LEASE_SECONDS, batch) if correct else (me, batch)
        rows = conn.execute(claim, params).fetchall()
        conn.execute("COMMIT")
        commits += 1
        if not rows:
            break
        conn.execute("BEGIN IMMEDIATE")
        if correct:
            results = _run_claimed(rows, token)
            executed += len(results)
            n = conn.executemany(finish_one, results).rowcount  # summed over the jobs
        else:
            ids = [r[0] for r in rows]
            executed += len(ids)  # the no-op job bodies
            marks = ",".join("?" * len(ids))
            n = conn.execute(
                "UPDATE bench_jobs SET state = 'done', result = 'ok'"
                f" WHERE id IN ({marks}) AND state = 'running' AND locked_by = ?",
                (*ids, me),
            ).rowcount
        conn.execute("COMMIT")
        commits += 1
        lost += len(rows) - n
    done = time.monotonic()
    cpu = _cpu() - cpu0
    conn.close()
    if lost:
        print(f"lost {lost} finish updates", file=sys.stderr)
    _report(done, cpu, executed - lost, commits)


# --------------------------------------------------------------------------------- huey


def _huey(cfg: dict) -> None:
    import threading

    import peer_tasks
    from huey.consumer import Worker

    huey, _ = peer_tasks.make_huey(cfg["path"])
    # One huey consumer worker per process, as `huey_consumer -k process -w N` runs N of
    # them: each process's storage has one SQLite connection behind a lock, so worker
    # threads of one process would take turns on it. The consumer's own loop body,
    # Worker.loop(), runs the worker: dequeue one task and execute it. The consumer runs
    # it forever; here the worker stops once a dequeue finds the queue empty (its own
    # task, if any, already executed and its result stored: loop() runs one at a time).
    stop = threading.Event()
    drained: list[float] = []
    dequeue = huey.dequeue

    def watched_dequeue():  # type: ignore[no-untyped-def]
        task = dequeue()
        if task is None and not drained:
            drained.append(time.monotonic())
            stop.set()  # loop() then returns at once instead of sleeping
        return task

    huey.dequeue = watched_dequeue  # type: ignore[method-assign]
    # The consumer's defaults: 0.1 s first delay when the queue is empty, backoff 1.15.
    worker = Worker(huey, stop, default_delay=0.1, max_delay=10.0, backoff=1.15)
    worker.initialize()
    huey.storage.conn.execute("SELECT 1")  # connect before the clock starts
    _wait_for_go()
    cpu0 = _cpu()
    while not stop.is_set():
        worker.loop()
    done = drained[0]
    cpu = _cpu() - cpu0
    huey.storage.close()
    _report(done, cpu, peer_tasks.EXECUTED, None)


# -------------------------------------------------------------------------- django-tasks


def _django_setup(cfg: dict) -> None:
    """Not a timed worker: migrate django_tasks_db's table and enqueue the jobs."""
    import peer_django

    peer_django.setup(cfg["database"])
    from django.core.management import call_command
    from django.db import transaction

    call_command("migrate", "django_tasks_database", verbosity=0)
    import peer_django_task

    # The backend's own enqueue, one job at a time; one transaction, as setting up
    # is not measured.
    for start in range(0, cfg["jobs"], 5000):
        with transaction.atomic():
            for i in range(start, min(start + 5000, cfg["jobs"])):
                peer_django_task.bench_noop.enqueue(i)


def _django_tasks(cfg: dict) -> None:
    import peer_django

    peer_django.setup(cfg["database"])
    import peer_django_task  # noqa: F401 - db_worker imports it by path; cached now
    import peer_tasks
    from django.core.management import call_command
    from django.db import connection

    connection.ensure_connection()
    _wait_for_go()
    cpu0 = _cpu()
    # The db_worker command itself: --batch runs until it finds no task ready, then
    # returns; --no-startup-delay skips the random pause of up to a second that spreads
    # out workers started together. One task per claim, one worker per process (the
    # command has no threads).
    call_command(
        "db_worker", batch=True, startup_delay=False, worker_id=cfg["worker_id"],
        queue_name=peer_tasks.QUEUE, verbosity=0, reload=False,
    )
    done = time.monotonic()
    cpu = _cpu() - cpu0
    connection.close()
    _report(done, cpu, peer_tasks.EXECUTED, None)


# --------------------------------------------------------------------------------- DBOS


def _dbos_config(cfg: dict) -> dict:
    return {
        "name": "bench",
        "system_database_url": cfg["url"],
        # Fixed, so that the workers run the version the jobs were enqueued under.
        "application_version": "bench",
        # Each process its own executor, as DBOS needs of the processes it runs on.
        "executor_id": cfg["executor_id"],
        "log_level": "WARNING",
    }


def _dbos_setup(cfg: dict) -> None:
    """Not a timed worker: create the system database, register the queue, enqueue."""
    import peer_tasks
    from dbos import DBOS

    DBOS(config=_dbos_config(cfg))  # type: ignore[arg-type]
    noop = peer_tasks.register_dbos_workflow()
    DBOS.listen_queues([])  # this process must not run the jobs it enqueues
    DBOS.launch()
    try:
        queue = DBOS.register_queue(
            peer_tasks.QUEUE, worker_concurrency=cfg["worker_concurrency"],
            polling_interval_sec=cfg["polling_interval"], on_conflict="always_update",
        )
        for i in range(cfg["jobs"]):
            queue.enqueue(noop, i)
    finally:
        DBOS.destroy()


def _dbos(cfg: dict) -> None:
    import threading

    import peer_tasks
    from dbos import DBOS
    from dbos._dbos import _get_dbos_instance
    from dbos._queue import queue_worker_thread

    DBOS(config=_dbos_config(cfg))  # type: ignore[arg-type]
    peer_tasks.register_dbos_workflow()
    # Launched before the clock starts, with the benchmark queue's polling thread held
    # back: DBOS's queue manager would start it at launch and it would begin to dequeue
    # at once. At GO this process starts that thread itself, with DBOS's own function
    # for it (queue_worker_thread, what the manager runs for each queue).
    DBOS.listen_queues([])
    DBOS.launch()
    dbos = _get_dbos_instance()
    queue = DBOS.retrieve_queue(peer_tasks.QUEUE)
    sys_db = dbos._sys_db
    # Done when a poll has found nothing left to claim and every workflow this process
    # claimed has recorded its outcome (DBOS then drops it from its active set).
    lock = threading.Lock()
    seen: dict[str, float | None] = {"empty": None, "outcome": 0.0}
    claim, record = sys_db.start_queued_workflows, sys_db.update_workflow_outcome

    def watched_claim(polled, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        ids, reason = claim(polled, *args, **kwargs)
        if polled.name != queue.name:  # DBOS's internal queue, polled by its own thread
            return ids, reason
        with lock:
            if ids:
                seen["empty"] = None
            elif reason is None and seen["empty"] is None:
                seen["empty"] = time.monotonic()
        return ids, reason

    def watched_record(*args: object, **kwargs: object) -> bool:
        out = record(*args, **kwargs)
        with lock:
            seen["outcome"] = time.monotonic()
        return out

    sys_db.start_queued_workflows = watched_claim  # type: ignore[method-assign]
    sys_db.update_workflow_outcome = watched_record  # type: ignore[method-assign]
    stop = threading.Event()
    poller = threading.Thread(
        target=queue_worker_thread, args=(stop, dbos, queue), daemon=True
    )
    _wait_for_go()
    cpu0 = _cpu()
    poller.start()
    while True:
        with lock:
            empty = seen["empty"]
        if empty is not None and dbos._active_workflows_set.count_for_queue(queue.name) == 0:
            break
        time.sleep(0.002)
    done = max(empty, seen["outcome"] or 0.0)
    cpu = _cpu() - cpu0
    stop.set()
    poller.join(timeout=30)
    DBOS.destroy()
    _report(done, cpu, peer_tasks.EXECUTED, None)


# ------------------------------------------------------------------------------- Chancy


async def _chancy(cfg: dict) -> None:
    import logging

    import peer_tasks
    from chancy import Chancy, Queue, Worker

    # Chancy's default logger prints every job it pulls (INFO) on stdout; warnings and
    # errors only, on stderr, as the other peers run.
    log = logging.getLogger("chancy")
    log.setLevel(logging.WARNING)
    log.addHandler(logging.StreamHandler(sys.stderr))
    chancy = Chancy(cfg["dsn"], log=log)  # with its default plugins
    async with chancy:
        worker = Worker(chancy, worker_id=cfg["worker_id"], register_signal_handlers=False)
        done_event = asyncio.Event()
        fetch = worker.fetch_jobs

        async def watched_fetch(queue, conn, *, up_to=1):  # type: ignore[no-untyped-def]
            jobs = await fetch(queue, conn, up_to=up_to)
            executor = worker.executors.get(queue.name)
            # Nothing left to claim and none of its own jobs still running: their
            # updates are queued, and flushed below.
            if queue.name == peer_tasks.QUEUE and not jobs and executor is not None \
                    and len(executor) == 0:
                done_event.set()
            return jobs

        worker.fetch_jobs = watched_fetch  # type: ignore[method-assign]
        await worker.start()
        # Settled before the clock starts: the queue list read once (start() declares
        # the "default" queue), so that the worker now waits for a declaration's
        # notification. One arriving before that wait began would only be seen at the
        # next periodic check, up to 10 s later.
        while "default" not in worker:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        _wait_for_go()
        cpu0 = _cpu()
        if cfg["declare"]:
            # The queue is declared at GO, by the first worker: every worker picks it up
            # from the declaration's notification and starts polling it at once. The
            # jobs were pushed to it, not yet declared, before the clock started.
            await chancy.declare(Queue(
                peer_tasks.QUEUE,
                concurrency=cfg["concurrency"],
                executor=Chancy.Executor.Async,
                polling_interval=cfg["polling_interval"],
                eager_polling=cfg["eager_polling"],
            ))
        await done_event.wait()
        # A worker writes its jobs' outcomes in batches, once a second; the last batch
        # is written now, as Chancy's flush() does on demand.
        await worker.flush()
        done = time.monotonic()
        cpu = _cpu() - cpu0
        await worker.stop()
    _report(done, cpu, peer_tasks.EXECUTED, None)


# ------------------------------------------------------------------------------ readyq


def _readyq(cfg: dict) -> None:
    import statistics

    import sqlalchemy as sa

    import readyq

    queue = readyq.Queue(cfg["url"], prefix=cfg.get("prefix", "readyq_"))
    executed = 0
    lock = __import__("threading").Lock()

    # The "resources" configuration: one unit of a resource per job, from the handler.
    uses = None
    if cfg.get("resource") is not None:
        queue.resource("slots", capacity=int(cfg["resource"]))
        uses = {"slots": 1}

    @queue.handler("noop", uses=uses)
    def noop(job: readyq.Job) -> None:
        nonlocal executed
        with lock:
            executed += 1

    commits = 0

    def count_commit(_conn: object) -> None:
        nonlocal commits
        commits += 1

    sa.event.listen(queue.engine, "commit", count_commit)
    store = queue.store
    timings: list[float] = []
    cycle = store.finish_and_claim

    # Done, as for the other systems, when the worker first finds nothing left to claim
    # with its own jobs recorded: the first idle check after its last claim. (With
    # until_idle it then also waits, one poll at a time, for the jobs other workers are
    # still running, which PGQueuer's drain and the minimal loops do not.)
    drained: list[float] = []
    has_unfinished = store.has_unfinished

    def timed_cycle(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        try:
            out = cycle(*args, **kwargs)
        finally:
            timings.append(time.perf_counter() - t)
        if out[1]:  # claimed again: not drained yet
            drained.clear()
        return out

    def first_idle_check(*args: object, **kwargs: object) -> bool:
        if not drained:
            drained.extend((time.monotonic(), _cpu()))
        return has_unfinished(*args, **kwargs)

    store.finish_and_claim = timed_cycle  # type: ignore[method-assign]
    store.has_unfinished = first_idle_check  # type: ignore[method-assign]
    worker = queue.worker(
        concurrency=cfg["cap"],
        max_running=cfg.get("max_running"),
        poll_interval=cfg.get("poll", 0.05),
        lease_ttl=60,
        heartbeat_interval=20,
    )
    # Start-up before GO, as PGQueuer's schema check: connect, check the tables and
    # build the loop's statements (a rehearsed claim and finish, rolled back). Without
    # it ("prepare": false), only connect: the first claim then compiles the SQL.
    if cfg.get("prepare", True):
        worker.prepare()
    else:
        with queue.engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    commits = 0
    _wait_for_go()
    cpu0 = _cpu()
    worker.run(until_idle=True)
    done, cpu1 = drained if drained else (time.monotonic(), _cpu())
    cpu = cpu1 - cpu0
    if cfg.get("timings_file") and timings:
        q = statistics.quantiles(timings, n=100) if len(timings) > 1 else timings * 99
        with open(cfg["timings_file"], "w") as f:
            json.dump({"p50": q[49], "p99": q[98], "cycles": len(timings)}, f)
    queue.close()
    _report(done, cpu, executed, commits)


# Set-up steps that must run in a process of their own (Django's settings and DBOS are
# configured once per process): they exit when done.
SETUPS = {"django-tasks-setup": _django_setup, "dbos-setup": _dbos_setup}


def main(argv: list[str]) -> None:
    kind, cfg = argv[1], json.loads(argv[2])
    if kind == "readyq":
        _readyq(cfg)
    elif kind == "pgqueuer":
        asyncio.run(_pgqueuer(cfg))
    elif kind == "procrastinate":
        asyncio.run(_procrastinate(cfg))
    elif kind == "minimal-postgresql":
        _minimal_postgresql(cfg)
    elif kind == "minimal-mariadb":
        _minimal_mariadb(cfg)
    elif kind == "minimal-sqlite":
        _minimal_sqlite(cfg)
    elif kind == "huey":
        _huey(cfg)
    elif kind == "django-tasks":
        _django_tasks(cfg)
    elif kind == "dbos":
        _dbos(cfg)
    elif kind == "chancy":
        asyncio.run(_chancy(cfg))
    elif kind in SETUPS:
        SETUPS[kind](cfg)
        return  # not a timed worker: no report, no wait for the parent
    else:
        raise SystemExit(f"unknown worker kind {kind!r}")
    # Stay until the parent has read the machine's CPU counters: a worker that exits
    # while another still runs would add its interpreter shutdown to the run.
    sys.stdin.readline()


if __name__ == "__main__":
    main(sys.argv)
