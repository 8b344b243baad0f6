"""What N single ``Queue.enqueue`` calls cost, on each database; two versions compared.

    python bench/enqueue_one.py [--n 1000] [--rounds 5] [--sources OLD/src NEW/src]
                                [--postgresql URL] [--mariadb URL]

Each call is its own transaction, as an application enqueueing one job at a time makes
it: half the jobs plain, half depending on the job before (the dependency's row is read
and locked, and the job is born waiting). With ``--sources`` every round runs each
source tree once per database, in a fresh process and a fresh schema or database file,
which goes first alternating, so that the versions share the same load; the medians and
the ratio of the second to the first are printed. Without it the installed readyq is timed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
MARIADB = "mysql+pymysql://root@127.0.0.1:3306/test"
KINDS = ("sqlite", "postgresql", "mariadb")


@contextmanager
def fresh_url(kind: str, url: str, tmp: str) -> Iterator[str | sa.URL]:
    """A URL to an empty place of ``kind``, removed afterwards."""
    if kind == "sqlite":
        yield f"sqlite:///{os.path.join(tmp, uuid.uuid4().hex)}.db"
        return
    name = "bench_" + uuid.uuid4().hex[:10]
    word = "SCHEMA" if kind == "postgresql" else "DATABASE"
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE {word} {name}")
    try:
        if kind == "postgresql":
            yield sa.make_url(url).update_query_dict({"options": f"-csearch_path={name}"})
        else:
            yield sa.make_url(url).set(database=name)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(
                f"DROP {word} {name}" + (" CASCADE" if kind == "postgresql" else ""))
        admin.dispose()


def timed(kind: str, url: str, n: int) -> tuple[float, float]:
    """Seconds for ``n`` single enqueues in a fresh place (after a few to warm up): the
    wall clock's, and this process's CPU time (readyq's own work, without the waits for
    the database or the disk, which vary most on a busy machine)."""
    import readyq

    with (
        tempfile.TemporaryDirectory() as tmp,
        fresh_url(kind, url, tmp) as place,
        readyq.Queue(place) as queue,
    ):
        queue.create_schema()
        queue.handler("bench")(lambda job: None)
        last = queue.enqueue("bench", {"i": -1})
        for i in range(20):
            queue.enqueue("bench", {"i": i})
        start, cpu = time.perf_counter(), time.process_time()
        for i in range(n):
            if i % 2:
                last = queue.enqueue("bench", {"i": i}, depends_on=[last])
            else:
                last = queue.enqueue("bench", {"i": i})
        return time.perf_counter() - start, time.process_time() - cpu


def run_in(source: str, kind: str, url: str, n: int) -> tuple[float, float]:
    """``timed`` in a fresh process that imports readyq from ``source``."""
    env = {**os.environ, "PYTHONPATH": source}
    out = subprocess.run(
        [sys.executable, __file__, "--one", kind, "--url", url, "--n", str(n)],
        env=env, check=True, capture_output=True, text=True,
    ).stdout
    wall, cpu = out.split()[-2:]
    return float(wall), float(cpu)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--sources", nargs=2, metavar=("FIRST", "SECOND"))
    p.add_argument("--postgresql", default=PG)
    p.add_argument("--mariadb", default=MARIADB)
    p.add_argument("--one", choices=KINDS, help=argparse.SUPPRESS)
    p.add_argument("--url", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(*timed(args.one, args.url, args.n))
        return
    urls = {"sqlite": "", "postgresql": args.postgresql, "mariadb": args.mariadb}
    if not args.sources:
        for kind in KINDS:
            times = [timed(kind, urls[kind], args.n) for _ in range(args.rounds)]
            wall = statistics.median(t[0] for t in times) / args.n * 1e6
            cpu = statistics.median(t[1] for t in times) / args.n * 1e6
            print(f"{kind:<12}{wall:>10.1f}µs/job{cpu:>10.1f}µs CPU/job")
        return
    first, second = (os.path.abspath(s) for s in args.sources)
    print(f"{args.n} single enqueues, median of {args.rounds} alternating rounds")
    print(f"{'database':<12}{'µs/job: first':>14}{'second':>8}{'ratio':>7}"
          f"{'CPU µs/job: first':>19}{'second':>8}{'ratio':>7}")
    for kind in KINDS:
        a: list[tuple[float, float]] = []
        b: list[tuple[float, float]] = []
        for round_ in range(args.rounds):
            # Which goes first alternates, so that neither always runs after the other.
            if round_ % 2:
                b.append(run_in(second, kind, urls[kind], args.n))
                a.append(run_in(first, kind, urls[kind], args.n))
            else:
                a.append(run_in(first, kind, urls[kind], args.n))
                b.append(run_in(second, kind, urls[kind], args.n))
        wa, wb = (statistics.median(t[0] for t in x) / args.n * 1e6 for x in (a, b))
        ca, cb = (statistics.median(t[1] for t in x) / args.n * 1e6 for x in (a, b))
        print(f"{kind:<12}{wa:>14.1f}{wb:>8.1f}{wb / wa:>7.3f}"
              f"{ca:>19.1f}{cb:>8.1f}{cb / ca:>7.3f}")


if __name__ == "__main__":
    main()
