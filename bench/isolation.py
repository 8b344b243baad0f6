"""Isolated jobs per second: readyq's handlers in child processes against RQ's forking worker.

    python bench/isolation.py                 # 2,000 jobs, 3 rounds
    python bench/isolation.py --jobs 500 --rounds 1

One worker process each, the same no-op job, rounds run one after another so that a
machine that slows down weighs on both alike:

* readyq, ``isolation="process"``, a pool of 2 children (``concurrency=2``), on SQLite (a
  file in a temporary directory) and, with ``--pg-url``, on PostgreSQL; its
  ``isolation="thread"`` rate in the same round gives the overhead per isolated job.
* RQ's default ``Worker`` on the machine's Redis (``--redis-url``), in burst mode: it
  forks a work horse for every job, which is the isolation RQ offers. Its fastest setting
  for isolated jobs is that one; ``SimpleWorker`` runs jobs in the worker's own process
  and is not isolation, so it is not measured.

Every run is checked: each job ended done once (readyq's table; RQ's finished registry).
Prints one table; compare ratios within a run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import isolation_jobs

import readyq


def run_readyq(url: str, jobs: int, isolation: str) -> float:
    queue = readyq.Queue(url, prefix="bench_iso_")
    try:
        queue.drop_schema()
        queue.create_schema()
        queue.handler("noop", isolation=isolation)(isolation_jobs.noop)
        queue.enqueue_many([readyq.JobSpec("noop") for _ in range(jobs)])
        worker = queue.worker(concurrency=2, poll_interval=0.05)
        worker.prepare()
        began = time.perf_counter()
        stats = worker.run(until_idle=True, handle_signals=False)
        elapsed = time.perf_counter() - began
        counts = queue.counts()
        if counts != {"done": jobs} or stats.done != jobs:
            raise SystemExit(f"readyq {isolation}: {counts}, {stats.done} done")
        return jobs / elapsed
    finally:
        queue.close()


def run_rq(redis_url: str, jobs: int, round_: int) -> float:
    import redis
    from rq import Queue, Worker
    from rq.registry import FinishedJobRegistry

    conn = redis.Redis.from_url(redis_url)
    name = f"bench_iso_{os.getpid()}_{round_}"  # a fresh queue and registry per round
    q = Queue(name, connection=conn)
    with conn.pipeline() as pipe:
        for _ in range(jobs):
            q.enqueue(isolation_jobs.noop, pipeline=pipe, result_ttl=600)
        pipe.execute()
    worker = Worker([q], connection=conn)
    began = time.perf_counter()
    worker.work(burst=True, logging_level="WARNING", with_scheduler=False)
    elapsed = time.perf_counter() - began
    finished = FinishedJobRegistry(name, connection=conn)
    done = len(finished.get_job_ids())
    if done != jobs or len(q) != 0:
        raise SystemExit(f"rq: {done} finished of {jobs}, {len(q)} left")
    q.empty()
    for key in conn.scan_iter("rq:job:*"):
        conn.delete(key)
    return jobs / elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--pg-url", default=None,
                    help="also measure readyq on this PostgreSQL (postgresql+psycopg://...)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="readyq-iso-")
    dbs = [("sqlite", f"sqlite:///{tmp}/bench.db")]
    if args.pg_url:
        dbs.append(("postgresql", args.pg_url))
    rates: dict[str, list[float]] = {}
    for r in range(args.rounds):
        for kind, url in dbs:
            for isolation in ("process", "thread"):
                key = f"readyq {isolation} {kind}"
                rates.setdefault(key, []).append(run_readyq(url, args.jobs, isolation))
        rates.setdefault("rq forking worker (redis)", []).append(run_rq(args.redis_url,
                                                                       args.jobs, r))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in rates.items()),
              file=sys.stderr)
    rq = statistics.median(rates["rq forking worker (redis)"])
    print(f"{args.jobs:,} no-op jobs, 1 worker process, 2 children (readyq) / a work horse "
          f"per job (RQ); medians of {args.rounds} rounds")
    print(f"{'system':<34} {'jobs/s':>10} {'vs RQ':>8}")
    for key, values in rates.items():
        rate = statistics.median(values)
        print(f"{key:<34} {rate:>10,.0f} {rate / rq:>7.1f}x")
    for kind, _ in dbs:
        iso = statistics.median(rates[f"readyq process {kind}"])
        thr = statistics.median(rates[f"readyq thread {kind}"])
        print(f"overhead of isolation on {kind}: {1e6 / iso - 1e6 / thr:,.0f} µs per job "
              f"({1e6 / iso:,.0f} against {1e6 / thr:,.0f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
