"""What a job's memory costs a handler: one ``save_state``, one ``step``, one throttled
``progress`` call and the first read of ``state``, in µs, on each database.

    python bench/memory.py [--sqlite PATH] [--postgresql URL] [--mariadb URL] [--n 300]

Each row claims one job with the store and drives the attempt's memory exactly as a
handler's ``Job`` does (``AttemptMemory`` over the store), in its own schema or
database file, created and dropped here. ``save_state`` and ``step`` are one fenced
write transaction each (the lease extended, the row written); a ``progress`` call is
mostly in memory, with one write a second at most.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid

import sqlalchemy as sa

import readyq
from readyq.checkpoints import AttemptMemory, StoreBackend
from readyq.claim_order import ClaimOrder
from readyq.store.memory import Holder

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
MARIADB = "mysql+pymysql://root@127.0.0.1:3306/test"


def per_call(fn: object, n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        fn(i)  # type: ignore[operator]
    return (time.perf_counter() - start) / n * 1e6


def measure(queue: readyq.Queue, n: int) -> dict[str, float]:
    queue.create_schema()
    store = queue.store
    jid = queue.enqueue("b", {})
    (c,) = store.claim_jobs(ClaimOrder(
        owner="bench", cap=1, limit=1, lease_ttl=600.0, types=["b"],
    ))
    holder = Holder(jid, c.attempt, "bench", c.lease_token, 600.0)
    out: dict[str, float] = {}
    mem = AttemptMemory(StoreBackend(store, holder), job_id=jid, max_payload_bytes=1 << 20)
    out["first state read"] = per_call(lambda i: (setattr(mem, "loaded", False),
                                                  mem.state()), 50)
    out["save_state"] = per_call(lambda i: mem.save_state({"i": i, "file": "x" * 40}), n)
    out["step (stored)"] = per_call(lambda i: mem.step(f"s{i}", lambda: [i, i + 1], (), {}), n)
    out["step (already stored)"] = per_call(
        lambda i: (mem.names.discard(f"s{i}"), mem.step(f"s{i}", lambda: 0, (), {})), n)
    out["progress (throttled)"] = per_call(lambda i: mem.progress(i, 1e9, "item"), 200_000)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sqlite", default=None, help="a SQLite file (default: a temporary one)")
    p.add_argument("--postgresql", default=PG)
    p.add_argument("--mariadb", default=MARIADB)
    p.add_argument("--n", type=int, default=300, help="calls per write measured")
    args = p.parse_args()

    rows: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = args.sqlite or os.path.join(tmp, "memory.db")
        with readyq.Queue(f"sqlite:///{path}") as q:
            rows["SQLite"] = measure(q, args.n)

    schema = "bench_" + uuid.uuid4().hex[:10]
    admin = sa.create_engine(args.postgresql, isolation_level="AUTOCOMMIT",
                             poolclass=sa.NullPool)
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    try:
        url = sa.make_url(args.postgresql).update_query_dict(
            {"options": f"-csearch_path={schema}"})
        with readyq.Queue(url) as q:
            rows["PostgreSQL"] = measure(q, args.n)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
        admin.dispose()

    name = "bench_" + uuid.uuid4().hex[:10]
    admin = sa.create_engine(args.mariadb, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    try:
        with readyq.Queue(sa.make_url(args.mariadb).set(database=name)) as q:
            rows["MariaDB"] = measure(q, args.n)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE {name}")
        admin.dispose()

    names = list(next(iter(rows.values())))
    print(f"{'µs per call':<22}" + "".join(f"{db:>12}" for db in rows))
    for what in names:
        print(f"{what:<22}" + "".join(f"{rows[db][what]:>12.1f}" for db in rows))


if __name__ == "__main__":
    main()
