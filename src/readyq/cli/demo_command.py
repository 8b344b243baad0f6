"""`readyq demo`: a small pipeline run end to end and checked."""

from __future__ import annotations

import argparse
import os

from readyq.cli.connection import parse_url
from readyq.cli.errors import CLIError
from readyq.cli.options import Subparsers
from readyq.cli.output import make_console

# The demo's own defaults (readyq.demo.DEFAULT_DB and DEFAULT_PREFIX, not imported here so
# that the parser stays cheap to build): it drops and recreates its tables, so by default
# they are apart from an application's.
DEMO_DB = "sqlite:///readyq-demo.db"
DEMO_PREFIX = "readyq_demo_"


def add_demo_parser(subparsers: Subparsers) -> None:
    """Add `readyq demo` to the subparsers."""
    p = subparsers.add_parser(
        "demo",
        help="run a small pipeline end to end and check it",
        description="Run a DAG pipeline (fetch → parse → a container of transforms for two "
        "tenants weighted 3:1 → report) under a global cap, then check dependency order, "
        "the cap and the tenants' slot-time shares from the database. The demo drops and "
        "recreates the tables of its prefix, and refuses a prefix whose tables hold jobs it "
        "did not make. It prints the `readyq status` command that finds its tables.",
    )
    p.add_argument(
        "--db",
        default=argparse.SUPPRESS,
        metavar="URL",
        help=f"database URL (env READYQ_DATABASE_URL; default {DEMO_DB})",
    )
    p.add_argument(
        "--prefix",
        default=argparse.SUPPRESS,
        metavar="PREFIX",
        help=f"table prefix (default {DEMO_PREFIX})",
    )
    p.add_argument("--workers", type=int, default=3, help="worker loops (default 3)")
    p.add_argument("--cap", type=int, default=4, help="global concurrency cap (default 4)")
    p.add_argument("--chunks", type=int, default=48, help="transforms in the batch (default 48)")
    p.set_defaults(run=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from readyq.demo import foreign_jobs, run_demo

    if args.workers < 1 or args.cap < 1 or args.chunks < 4:
        raise CLIError("--workers and --cap must be at least 1, --chunks at least 4", code=2)
    url = str(
        getattr(args, "db", None)
        or args.db_global
        or os.environ.get("READYQ_DATABASE_URL")
        or DEMO_DB
    )
    prefix = str(getattr(args, "prefix", None) or args.prefix_global or DEMO_PREFIX)
    parse_url(url)
    found = foreign_jobs(url, prefix)
    if found:
        # The demo starts by dropping its tables: never those of an application.
        raise CLIError(
            f"the tables with prefix {prefix} hold {found} job(s) that the demo did not "
            "make; the demo drops its tables first, so give it another --prefix (default "
            f"{DEMO_PREFIX}) or another --db"
        )
    report = run_demo(
        url, prefix=prefix, workers=args.workers, cap=args.cap, chunks=args.chunks,
        console=make_console(),
    )
    return 0 if report.ok else 1
