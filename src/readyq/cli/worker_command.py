"""`readyq worker`: run the handlers of an application's Queue; its flags, shared
with Django's `readyq_worker` command."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from typing import Any

from readyq.cli.connection import load_app
from readyq.cli.errors import EXIT_INTERRUPTED, CLIError
from readyq.cli.options import Subparsers
from readyq.cli.output import print_json, say


def add_worker_parser(subparsers: Subparsers) -> None:
    """Add `readyq worker` to the subparsers."""
    p = subparsers.add_parser(
        "worker",
        help="run the handlers of an application's Queue",
        description="Import the application's readyq.Queue (which carries the handlers and "
        "its own database URL) and run queue.run_worker(). --db and --prefix are ignored "
        "here: the queue object already has its URL and prefix.",
    )
    p.add_argument(
        "--app",
        required=True,
        metavar="MODULE:ATTR",
        help="where the Queue is, e.g. myapp.jobs:queue (or a function returning one)",
    )
    add_worker_flags(p)
    p.add_argument("--db", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    p.add_argument("--prefix", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    p.set_defaults(run=cmd_worker)


def add_worker_flags(
    p: argparse.ArgumentParser,
    *,
    types_flag: str = "--type",
    types_help: str = "run only this job type (repeatable; default: every handler)",
) -> None:
    """The flags of ``readyq worker`` that shape the worker (all but ``--app``), shared
    with Django's ``readyq_worker`` command, which names ``--type`` ``--queue``."""
    p.add_argument(
        "--concurrency",
        type=int,
        default=1,
        help="global cap on jobs in flight across all workers (default 1)",
    )
    p.add_argument(
        "--lease-ttl",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="lease lifetime without a heartbeat (default 30)",
    )
    p.add_argument(
        "--heartbeat-interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how often leases are extended; at most half the TTL (default 10)",
    )
    p.add_argument(
        "--poll-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="longest wait between looks for work (default 1)",
    )
    p.add_argument(
        "--until-idle",
        action="store_true",
        help="return once every job of the worker's types has ended",
    )
    p.add_argument(
        types_flag,
        dest="types",
        action="append",
        default=None,
        metavar="TYPE",
        help=types_help,
    )
    p.add_argument(
        "--max-running",
        type=int,
        default=None,
        metavar="N",
        help="most jobs this process runs at once, to spread the cap over processes or "
        "hosts (default: the whole cap)",
    )
    p.add_argument(
        "--shutdown-grace",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="how long SIGTERM/SIGINT let running jobs finish before they are handed back "
        "(default 0)",
    )
    p.add_argument(
        "--no-freeze-gc",
        dest="freeze_gc",
        action="store_false",
        help="leave the objects that exist at start in the garbage collector's passes "
        "(by default they are frozen out of them, which shortens the pauses of a long-lived "
        "worker)",
    )
    p.add_argument(
        "--no-schedules",
        dest="fire_schedules",
        action="store_false",
        help="fire none of the app's schedules, leaving them to other workers (by default "
        "every worker fires them)",
    )
    _add_isolation_flags(p)
    p.add_argument("--worker-id", default=None, help="worker id (default host:pid:random)")
    p.add_argument("--json", action="store_true", help="print the final stats as JSON")


def _add_isolation_flags(p: argparse.ArgumentParser) -> None:
    """Where handlers run, and the limits of the child processes that run them."""
    p.add_argument(
        "--isolation",
        choices=("thread", "process"),
        default="thread",
        help="where handlers that do not choose run: in threads, or in child processes "
        "killed at their timeout (default thread)",
    )
    p.add_argument(
        "--kill-grace",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="seconds between SIGTERM and SIGKILL of a child at its timeout (default 5)",
    )
    p.add_argument(
        "--max-jobs-per-child",
        type=int,
        default=None,
        metavar="N",
        help="replace a child process after N jobs (default: never)",
    )
    p.add_argument(
        "--max-memory-per-child",
        type=int,
        default=None,
        metavar="MIB",
        help="kill a child process whose resident memory passes MIB mebibytes, failing "
        "its attempt (default: no limit)",
    )


def cmd_worker(args: argparse.Namespace) -> int:
    if args.concurrency < 1:
        raise CLIError("--concurrency must be at least 1", code=2)
    queue = load_app(args.app)
    if getattr(args, "db", None) or args.db_global:
        say(
            "readyq: note: --db is ignored by `worker`; the app's queue uses its own URL",
            file=sys.stderr,
        )
    return run_worker(queue, args)


def run_worker(queue: Any, args: argparse.Namespace) -> int:
    """Run a worker of ``queue`` with the flags of :func:`add_worker_flags` (``args``),
    as ``readyq worker`` does: the tables checked, the SQL prepared, SIGTERM and SIGINT
    stopping it gracefully; returns the exit code."""
    from readyq import admin

    if args.concurrency < 1:
        raise CLIError("--concurrency must be at least 1", code=2)
    worker = queue.worker(
        concurrency=args.concurrency,
        lease_ttl=args.lease_ttl,
        heartbeat_interval=args.heartbeat_interval,
        poll_interval=args.poll_interval,
        types=args.types,
        worker_id=args.worker_id,
        max_running=args.max_running,
        shutdown_grace=args.shutdown_grace,
        freeze_gc=args.freeze_gc,
        fire_schedules=args.fire_schedules,
        isolation=args.isolation,
        kill_grace=args.kill_grace,
        max_jobs_per_child=args.max_jobs_per_child,
        max_memory_per_child=None if args.max_memory_per_child is None
        else args.max_memory_per_child * 2**20,
    )
    from readyq.transient import describe, waited_out

    try:
        admin.check_schema(queue)  # connects: missing tables fail here, once
        # Builds and compiles the loop's SQL (a dry run of a cycle, rolled back) before the
        # first claim, and fails here on tables that do not match this readyq.
        worker.prepare()
        database = queue.database
    except Exception as exc:
        # A database that is down (or still starting) is waited for: the worker backs
        # off and starts once it answers; missing tables are reported then.
        if not waited_out(exc, queue.store.connected_dialect):
            raise
        database = queue.store.url.get_backend_name()
        say(
            f"readyq: note: the database is not reachable yet ({describe(exc)}); the "
            "worker keeps trying",
            file=sys.stderr,
        )
    say(
        f"readyq worker {worker.worker_id} on {database} (prefix {queue.prefix}): "
        f"types {', '.join(worker.types)}, cap {args.concurrency}"
        + ("" if args.until_idle else "; Ctrl-C to stop"),
        file=sys.stderr,
    )
    code = 0
    try:
        stats = worker.run(until_idle=args.until_idle)
    except KeyboardInterrupt:  # stopped gracefully on Ctrl-C: the stats, then 130
        stats, code = worker.stats, EXIT_INTERRUPTED
    if args.json:
        print_json({"worker_id": worker.worker_id, **asdict(stats)})
    else:
        say(
            f"worker {worker.worker_id} stopped: claimed {stats.claimed}, done {stats.done}, "
            f"retried {stats.retried}, failed {stats.failed}, cancelled {stats.cancelled}, "
            f"reclaimed {stats.reclaimed}"
        )
    return code
