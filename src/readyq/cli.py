"""The ``readyq`` command line."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from readyq.errors import ReadyqError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="readyq", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo",
        help="run a small pipeline end to end and check it",
        description="Run a DAG pipeline (fetch → parse → a container of transforms for two "
        "tenants weighted 3:1 → report) under a global cap, then check dependency order, "
        "the cap and the tenants' slot-time shares from the database.",
    )
    demo.add_argument(
        "--db",
        default=os.environ.get("READYQ_DATABASE_URL", "sqlite:///readyq-demo.db"),
        help="database URL (default: an SQLite file readyq-demo.db; env READYQ_DATABASE_URL)",
    )
    demo.add_argument("--workers", type=int, default=3, help="worker loops (default 3)")
    demo.add_argument("--cap", type=int, default=4, help="global concurrency cap (default 4)")
    demo.add_argument("--chunks", type=int, default=48, help="transforms in the batch (default 48)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        if args.command == "demo":
            from readyq.demo import run_demo

            if args.workers < 1 or args.cap < 1 or args.chunks < 4:
                raise SystemExit("readyq: --workers and --cap must be >= 1, --chunks >= 4")
            report = run_demo(args.db, workers=args.workers, cap=args.cap, chunks=args.chunks)
            return 0 if report.ok else 1
    except ReadyqError as exc:
        print(f"readyq: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
