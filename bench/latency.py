"""Enqueue-to-start latency on PostgreSQL: LISTEN/NOTIFY against polling.

    python bench/latency.py [--url postgresql+psycopg://postgres@127.0.0.1:5432/test]
                            [--jobs 50]

One idle worker (poll_interval 1 s, the default) in a thread; jobs are enqueued one at a
time at random intervals (0-200 ms, so they fall at every phase of the poll), each from
its own committed transaction, and the handler records when it starts. Three rows:

* ``listen``: the worker LISTENs and enqueue NOTIFYs (the default on PostgreSQL);
* ``notifications lost``: enqueue NOTIFYs, but the worker's listener is off, so every
  notification is lost and the worker only polls;
* ``polling only``: ``listen=False`` on both sides.

Each row runs in its own schema, created and dropped here.
"""

from __future__ import annotations

import argparse
import random
import statistics
import threading
import time
import uuid

import sqlalchemy as sa

import readyq

DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(url: str, *, producer_listen: bool, worker_listen: bool, jobs: int) -> list[float]:
    schema = "bench_" + uuid.uuid4().hex[:10]
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    scoped = sa.make_url(url).update_query_dict({"options": f"-csearch_path={schema}"})
    producer = readyq.Queue(scoped, listen=producer_listen)
    consumer = readyq.Queue(scoped, listen=worker_listen)
    started: dict[int, float] = {}
    try:
        producer.create_schema()
        consumer.handler("mark")(lambda job: started.setdefault(job.args["n"], time.monotonic()))
        worker = consumer.worker(concurrency=4, poll_interval=1.0)
        thread = threading.Thread(target=worker.run, kwargs={"handle_signals": False})
        thread.start()
        time.sleep(1.5)  # connected, listening, idle
        sent: dict[int, float] = {}
        for n in range(jobs):
            time.sleep(random.uniform(0.0, 0.2))
            sent[n] = time.monotonic()
            producer.enqueue("mark", {"n": n})
        end = time.monotonic() + 5
        while len(started) < jobs and time.monotonic() < end:
            time.sleep(0.01)
        worker.stop()
        thread.join()
        return [started[n] - sent[n] for n in sent if n in started]
    finally:
        producer.close()
        consumer.close()
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        admin.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=DEFAULT_URL)
    parser.add_argument("--jobs", type=int, default=50)
    args = parser.parse_args()
    rows = [
        ("listen (poll 1 s)", True, True),
        ("notifications lost (poll 1 s)", True, False),
        ("polling only (poll 1 s)", False, False),
    ]
    print(f"enqueue-to-start latency, PostgreSQL, {args.jobs} jobs per row")
    print(f"{'mode':<32} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'n':>4}")
    for name, producer_listen, worker_listen in rows:
        lat = measure(args.url, producer_listen=producer_listen, worker_listen=worker_listen,
                      jobs=args.jobs)
        ms = [x * 1000 for x in lat]
        print(f"{name:<32} {percentile(ms, 0.5):>8.1f} {percentile(ms, 0.99):>8.1f} "
              f"{statistics.fmean(ms):>8.1f} {len(ms):>4}")


if __name__ == "__main__":
    main()
