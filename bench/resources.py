"""Resources under load, on each database, from the run's own rows.

Two worker processes share a resource of 4 units ("gpu") and a global cap of 8:

1. DRF: groups "a" (weight 3, jobs of 1 unit) and "b" (weight 1, jobs of 2 units), both
   backlogged, jobs of 0.1 s. Each group's share of the unit-seconds while both had work
   (expected 0.75 / 0.25), the peak units in flight against the capacity.
2. Reservation: two groups keep the 4 units busy with 1-unit jobs of 0.05 to 0.25 s; then
   one job of 4 units is enqueued in a third group. Its wait from the moment it was
   reserved to its start, against the bound: the latest end of the jobs that held units
   when it was reserved. Repeated a few times; the longest wait and its bound are shown.
3. Throughput (with --throughput N): N rounds of 5,000 no-op jobs, batch 100 per process,
   with one unit of a resource per job (its capacity the global cap, so that it binds no
   more than the cap) and without resources, each first in every other round, on 1 and 2
   processes (bench/run.py's run_readyq); the median ratio of the rates, with every
   round's.

Run: python bench/resources.py [--pg-url URL] [--mariadb-url URL] [--throughput 5]
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import statistics
import tempfile
import time
from typing import Any

import sqlalchemy as sa
from run import DEFAULT_MARIADB, DEFAULT_PG, peak_of, run_readyq

import readyq
from readyq.resources import decode

CAPACITY = 4
CAP = 8


def make_queue(url: str) -> readyq.Queue:
    queue = readyq.Queue(url, prefix="rbench_")
    queue.resource("gpu", capacity=CAPACITY)

    @queue.handler("work")
    def work(job: readyq.Job) -> None:
        time.sleep(job.args["s"])

    return queue


def worker_main(url: str, seconds: float) -> None:
    queue = make_queue(url)
    worker = queue.worker(concurrency=CAP, max_running=CAP // 2, poll_interval=0.01)
    stop = time.monotonic() + seconds

    def watch() -> None:
        while time.monotonic() < stop:
            time.sleep(0.05)
        worker.stop(grace=5.0)

    import threading

    threading.Thread(target=watch, daemon=True).start()
    worker.run()
    queue.close()


def run_workers(url: str, seconds: float) -> list[multiprocessing.Process]:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=worker_main, args=(url, seconds)) for _ in range(2)]
    for p in procs:
        p.start()
    return procs


def rows(queue: readyq.Queue) -> list[Any]:
    j = queue.store.tables.jobs
    with queue.engine.connect() as conn:
        return conn.execute(
            sa.select(j.c.id, j.c.group_key, j.c.uses, j.c.started_at, j.c.finished_at)
            .where(j.c.started_at.is_not(None))
        ).all()


def peak_use(found: list[Any]) -> int:
    """The most units of "gpu" held at one instant, from the rows' intervals."""
    events = []
    for r in found:
        units = decode(r.uses).get("gpu", 0)
        events += [(r.started_at, units), (r.finished_at or float("inf"), -units)]
    return peak_of(events)


def fresh(url: str) -> readyq.Queue:
    queue = make_queue(url)
    queue.drop_schema()
    queue.create_schema()
    return queue


def drf(url: str) -> tuple[float, float, int]:
    queue = fresh(url)
    specs = [readyq.JobSpec("work", {"s": 0.1}, group="a", weight=3, uses={"gpu": 1})
             for _ in range(400)]
    specs += [readyq.JobSpec("work", {"s": 0.1}, group="b", weight=1, uses={"gpu": 2})
              for _ in range(200)]
    queue.enqueue_many(specs)
    for p in run_workers(url, 8.0):
        p.join()
    found = rows(queue)
    queue.close()
    # The window in which both groups still had work: up to the first group's last start.
    last = {g: max(r.started_at for r in found if r.group_key == g) for g in ("a", "b")}
    first = min(r.started_at for r in found)
    end = min(last.values())
    used = {"a": 0.0, "b": 0.0}
    for r in found:
        lo, hi = max(r.started_at, first), min(r.finished_at or end, end)
        if hi > lo:
            used[r.group_key] += (hi - lo) * decode(r.uses)["gpu"]
    total = sum(used.values())
    return used["a"] / total, used["b"] / total, peak_use(found)


def reservation(url: str, rounds: int) -> tuple[float, float, int, int]:
    """(longest wait, its bound, rounds where the big job was seen reserved, peak)."""
    queue = fresh(url)
    rnd = random.Random(7)
    smalls = [readyq.JobSpec("work", {"s": rnd.uniform(0.05, 0.25)}, group=f"s{i % 2}",
                             uses={"gpu": 1}) for i in range(40 * (rounds + 2))]
    queue.enqueue_many(smalls)
    procs = run_workers(url, 4.0 * rounds + 6.0)
    r, j = queue.store.tables.reservations, queue.store.tables.jobs
    waits: list[tuple[float, float]] = []
    seen = 0
    time.sleep(1.0)
    for _ in range(rounds):
        big = queue.enqueue("work", {"s": 0.1}, group="big", uses={"gpu": 4})
        reserved_at = None
        with queue.engine.connect() as conn:
            while True:
                now = float(conn.execute(sa.select(queue.store.now())).scalar_one())
                state = conn.execute(sa.select(j.c.state).where(j.c.id == big)).scalar_one()
                conn.rollback()
                if state != "ready":
                    break
                held = conn.execute(sa.select(r.c.job_id).where(r.c.job_id == big)).first()
                conn.rollback()
                if held is not None and reserved_at is None:
                    reserved_at = now
                time.sleep(0.005)
        queue.wait(big, timeout=30)
        if reserved_at is None:
            continue  # it fitted at once
        seen += 1
        found = {x.id: x for x in rows(queue)}
        start = found[big].started_at
        holders = [x for x in found.values() if x.id != big and x.started_at <= reserved_at
                   and (x.finished_at or 0) > reserved_at]
        bound = max((x.finished_at for x in holders), default=reserved_at) - reserved_at
        # The poll sees the reservation up to one poll late: the wait is an upper bound.
        waits.append((start - reserved_at, bound))
        time.sleep(0.5)
    for p in procs:
        p.join()
    peak = peak_use(rows(queue))
    queue.close()
    worst = max(waits, key=lambda w: w[0] - w[1]) if waits else (0.0, 0.0)
    return worst[0], worst[1], seen, peak


def throughput(kind: str, base_url: str, processes: int, rounds: int) -> list[tuple[float, float]]:
    """(jobs/s with resources, without) of each round, taken alternately: the run with
    resources goes first in even rounds and second in odd ones, so that whatever the
    first run of a pair pays (a cold cache, a database just created) falls on both."""
    out = []
    for i in range(rounds):
        pair: dict[bool, float] = {}
        for on in (True, False) if i % 2 == 0 else (False, True):
            row = run_readyq(kind, base_url, 5000, processes, 100,
                             resource=100 * processes if on else None)
            pair[on] = row.jobs_per_s
        out.append((pair[True], pair[False]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1/postgres")
    ap.add_argument("--mariadb-url", default="mysql+pymysql://root@127.0.0.1/test")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--throughput", type=int, default=0, metavar="ROUNDS",
                    help="also compare throughput with and without resources")
    ap.add_argument("--only-throughput", action="store_true")
    args = ap.parse_args()
    dbs = [("SQLite", f"sqlite:///{tempfile.mkdtemp()}/resources.db"),
           ("PostgreSQL", args.pg_url), ("MariaDB", args.mariadb_url)]
    if args.only_throughput:
        dbs = []
    else:
        print(f"resources: capacity {CAPACITY}, global cap {CAP}, 2 worker processes")
    for name, url in dbs:
        a, b, peak = drf(url)
        wait, bound, seen, peak2 = reservation(url, args.rounds)
        print(f"  {name:10} DRF a (w3, 1 unit) {a:.3f} b (w1, 2 units) {b:.3f} (expected "
              f"0.750 / 0.250); peak {max(peak, peak2)} / {CAPACITY}; big job reserved in "
              f"{seen} of {args.rounds} rounds, longest wait {wait:.3f}s against a bound "
              f"of {bound:.3f}s (the last holder's end; the rest is the next claim's "
              f"latency, {1000 * (wait - bound):.0f} ms)", flush=True)
    if args.throughput:
        print("throughput with 1 unit per job against none (5,000 no-op jobs, batch 100; "
              "median of the rounds' ratios)")
        for name, kind, base in (("SQLite", "sqlite", ""), ("PostgreSQL", "postgresql", DEFAULT_PG),
                                 ("MariaDB", "mariadb", DEFAULT_MARIADB)):
            for processes in (1, 2):
                found = throughput(kind, base, processes, args.throughput)
                ratios = [on / off for on, off in found]
                rounds = ", ".join(f"{on:,.0f}/{off:,.0f}" for on, off in found)
                print(f"  {name:10} {processes} proc: {statistics.median(ratios):.2f}x "
                      f"(rounds {min(ratios):.2f}x to {max(ratios):.2f}x; jobs/s with/without: "
                      f"{rounds})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
