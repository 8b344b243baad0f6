"""What ``Job.spawn`` costs against ``enqueue_many`` of the same specs, on each database.

    python bench/spawn.py [--postgresql URL] [--mariadb URL] [--sizes 10 10000] [--repeat 3]

For each size N: ``enqueue_many`` of N + 1 specs (a fan-out of N parts and a merge
that depends on all of them, as a splitting handler would spawn); and what the same
specs add to a running spawner's end: checking them (``Queue.spawn_of``, what
``Job.spawn`` calls) and recording its ``done`` with them (``join=True``, one waiting
dependent joined), less recording a ``done`` that spawns nothing. Both write the same
rows. Medians of ``--repeat`` runs, each in a fresh schema or database file.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import sqlalchemy as sa

import readyq
from readyq import JobSpec
from readyq.claim_order import ClaimOrder, StartPolicy
from readyq.store import Outcome, OutcomeKind

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
MARIADB = "mysql+pymysql://root@127.0.0.1:3306/test"


def specs(n: int) -> list[JobSpec]:
    return [JobSpec("part", {"p": p}, key=f"p{p}") for p in range(n)] + [
        JobSpec("merge", {}, depends_on=[f"p{p}" for p in range(n)])
    ]


def timed_enqueue(queue: readyq.Queue, n: int) -> float:
    for other in ("part", "merge"):
        queue.handler(other)(lambda job: None)
    batch = specs(n)
    start = time.perf_counter()
    queue.enqueue_many(batch)
    return time.perf_counter() - start


def timed_spawn(queue: readyq.Queue, n: int) -> float:
    """A handler's share of a spawn: checking the specs (``Job.spawn``), then recording
    its ``done`` with them, less recording a ``done`` that spawns nothing."""
    for other in ("split", "after", "part", "merge"):
        queue.handler(other)(lambda job: None)
    store = queue.store
    total = 0.0
    for spawning in (True, False):
        spawner = queue.enqueue("split", {})
        queue.enqueue("after", {}, depends_on=[spawner])
        (c,) = store.claim_jobs(ClaimOrder(
            owner="bench", cap=1, limit=1, lease_ttl=600.0, types=["split"],
        ))
        store.start_jobs("bench", [(c, StartPolicy(None))])
        batch = specs(n)
        start = time.perf_counter()
        staged = (queue.spawn_of(batch, join=True),) if spawning else ()
        applied = store.record_outcomes("bench", [
            Outcome(job=c, kind=OutcomeKind.DONE, result_json="null", spawns=staged)])
        elapsed = time.perf_counter() - start
        assert all(applied.values())
        total += elapsed if spawning else -elapsed
    return total


@contextmanager
def fresh(kind: str, url: str, tmp: str) -> Iterator[readyq.Queue]:
    if kind == "sqlite":
        path = os.path.join(tmp, f"{uuid.uuid4().hex}.db")
        with readyq.Queue(f"sqlite:///{path}") as q:
            q.create_schema()
            yield q
        return
    name = "bench_" + uuid.uuid4().hex[:10]
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE {'SCHEMA' if kind == 'postgresql' else 'DATABASE'} {name}")
    try:
        if kind == "postgresql":
            scoped = sa.make_url(url).update_query_dict({"options": f"-csearch_path={name}"})
        else:
            scoped = sa.make_url(url).set(database=name)
        with readyq.Queue(scoped) as q:
            q.create_schema()
            yield q
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(
                f"DROP {'SCHEMA' if kind == 'postgresql' else 'DATABASE'} {name}"
                + (" CASCADE" if kind == "postgresql" else ""))
        admin.dispose()


def measure_in(
    place: AbstractContextManager[readyq.Queue], fn: Callable[[readyq.Queue, int], float],
    n: int,
) -> float:
    with place as queue:
        return fn(queue, n)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--postgresql", default=PG)
    p.add_argument("--mariadb", default=MARIADB)
    p.add_argument("--sizes", type=int, nargs="+", default=[10, 10_000])
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    print(f"{'database':<12}{'jobs':>8}{'enqueue_many':>14}{'spawn':>10}{'ratio':>8}"
          f"{'µs/job (spawn)':>16}")
    with tempfile.TemporaryDirectory() as tmp:
        for kind, url in (("sqlite", ""), ("postgresql", args.postgresql),
                          ("mariadb", args.mariadb)):
            for n in args.sizes:
                many = statistics.median(
                    measure_in(fresh(kind, url, tmp), timed_enqueue, n)
                    for _ in range(args.repeat))
                spawn = statistics.median(
                    measure_in(fresh(kind, url, tmp), timed_spawn, n)
                    for _ in range(args.repeat))
                print(f"{kind:<12}{n + 1:>8}{many * 1e3:>12.1f}ms{spawn * 1e3:>8.1f}ms"
                      f"{spawn / many:>8.2f}{spawn / (n + 1) * 1e6:>16.1f}")

if __name__ == "__main__":
    main()
