"""Long chaos runs: worker processes over many short jobs and a DAG while a nemesis kills
(SIGKILL, also mid-claim), freezes (SIGSTOP past the lease), cuts connections from the
server side, kills SQLite write-lock holders and, if asked, restarts the database server;
some workers run with their clock shifted by minutes. Then every job must be terminal and
the recorded history must pass the checker of ``tests/chaos/history.py``.

    python bench/chaos.py --minutes 10                                  # SQLite file
    python bench/chaos.py --minutes 10 --db postgresql+psycopg://postgres@127.0.0.1/test
    python bench/chaos.py --minutes 10 --db mysql+pymysql://root@127.0.0.1/test --restarts 3

A server URL names an existing database: the run creates a schema (PostgreSQL) or a
database (MariaDB/MySQL) of its own in it and drops it afterwards (``--keep`` keeps it).
``--restarts`` restarts the server (``pg_ctlcluster`` / ``mariadb-admin shutdown`` and
``start-stop-daemon``): only use it on a server of your own. Prints the figures; exits 1
if an invariant was violated.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "chaos"))

from nemesis import Config, run_chaos

FAULTS = {
    "sqlite": ("kill", "freeze", "lockkill", "claimkill"),
    "postgresql": ("kill", "freeze", "connkill", "claimkill"),
    "mariadb": ("kill", "freeze", "connkill", "claimkill"),
}


def fresh_database(url: str | None, workdir: Path) -> tuple[str, str, str, sa.Engine | None]:
    """(url, dialect, label, admin engine to drop it with) for a new, empty database."""
    if url is None:
        return f"sqlite:///{workdir / 'chaos.db'}", "sqlite", "sqlite", None
    parsed = sa.make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        path = Path(parsed.database or "")
        if not parsed.database or path.exists():
            raise SystemExit(f"give the path of a new SQLite file, not {url!r}")
        return url, "sqlite", "sqlite", None
    label = "chaos_" + uuid.uuid4().hex[:10]
    admin = sa.create_engine(parsed, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    with admin.connect() as conn:
        if backend == "postgresql":
            conn.exec_driver_sql(f"CREATE SCHEMA {label}")
            made = parsed.update_query_dict({"options": f"-csearch_path={label}"})
        else:
            conn.exec_driver_sql(f"CREATE DATABASE {label}")
            made = parsed.set(database=label)
    dialect = "postgresql" if backend == "postgresql" else "mariadb"
    return made.render_as_string(hide_password=False), dialect, label, admin


def drop(dialect: str, label: str, admin: sa.Engine | None) -> None:
    if admin is None:
        return
    with admin.connect() as conn:
        if dialect == "postgresql":
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {label} CASCADE")
        else:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {label}")
    admin.dispose()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, required=True, help="length of the fault phase")
    p.add_argument("--db", help="database URL (default: a new SQLite file)")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--cap", type=int, default=8, help="global concurrency cap")
    p.add_argument("--max-running", type=int, default=4, help="per worker process")
    p.add_argument("--jobs-per-minute", type=int, default=2400, help="plain jobs (+ a DAG)")
    p.add_argument("--lease-ttl", type=float, default=2.0)
    p.add_argument("--faults", help="comma-separated; default: all that apply")
    p.add_argument("--restarts", type=int, default=0, help="database server restarts")
    p.add_argument("--seed", type=int, default=int(time.time()))
    p.add_argument("--keep", action="store_true", help="keep the database and the logs")
    args = p.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="readyq-chaos-"))
    url, dialect, label, admin = fresh_database(args.db, workdir)
    faults = tuple(args.faults.split(",")) if args.faults else FAULTS[dialect]
    if args.restarts and dialect == "sqlite":
        raise SystemExit("--restarts needs a database server")
    cfg = Config(
        url=url, dialect=dialect, workdir=workdir, label=label,
        fault_seconds=args.minutes * 60, jobs=int(args.jobs_per_minute * args.minutes),
        workers=args.workers, cap=args.cap, max_running=args.max_running,
        lease_ttl=args.lease_ttl, heartbeat=args.lease_ttl / 4, faults=faults,
        restarts=args.restarts, seed=args.seed, upfront=0.3,
        drain_timeout=max(120.0, args.minutes * 30),
        log=lambda line: print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True),
    )
    print(f"chaos on {dialect} for {args.minutes:g} min, seed {args.seed}, logs in {workdir}",
          flush=True)
    try:
        result = run_chaos(cfg)
    finally:
        if not args.keep:
            drop(dialect, label, admin)
    print("\n".join(result.lines()))
    print("PASS" if result.ok else "FAIL")
    if not args.keep and result.ok:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
