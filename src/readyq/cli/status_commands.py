"""`readyq status` and its live view `readyq top`."""

from __future__ import annotations

import argparse
import time
from typing import Any

from readyq.cli.connection import open_queue
from readyq.cli.errors import CLIError, db_message
from readyq.cli.options import Subparsers, connection_options, duration_arg, json_option
from readyq.cli.output import make_console, print_json, styled
from readyq.cli.status_view import render_progress, render_status


def add_status_parser(subparsers: Subparsers) -> None:
    """Add `readyq status` to the subparsers."""
    p = subparsers.add_parser(
        "status",
        parents=[connection_options(), json_option()],
        help="jobs per state and group, in flight, oldest ready, workers, stuck jobs",
        description="Counts per state and per group, jobs in flight, how long the "
        "oldest runnable job has waited, the workers holding leases (with "
        "their latest heartbeat), the job types that no worker seems to run, and the "
        "jobs and containers that cannot progress on their own (stuck), all judged by "
        "the database clock.",
    )
    p.add_argument(
        "--unclaimed-after",
        type=duration_arg,
        default=60.0,
        metavar="DURATION",
        help="list the types whose runnable jobs waited longer than this with none of "
        "them in flight (default 60s; e.g. 90, 5m)",
    )
    p.add_argument(
        "--empty-after",
        type=duration_arg,
        default=60.0,
        metavar="DURATION",
        help="list as stuck the containers with no child and nothing to wait for, "
        "unchanged for longer than this (default 60s)",
    )
    p.set_defaults(run=cmd_status)


def cmd_status(args: argparse.Namespace) -> int:
    from readyq import admin

    queue = open_queue(args)
    try:
        st = admin.status(
            queue, unclaimed_after=args.unclaimed_after, empty_after=args.empty_after
        )
        if args.json:
            print_json({"database": queue.database, "prefix": queue.prefix, **st.to_json()})
        else:
            make_console().print(render_status(st, queue.database, queue.prefix))
    finally:
        queue.close()
    return 0


def add_top_parser(subparsers: Subparsers) -> None:
    """Add `readyq top` to the subparsers."""
    p = subparsers.add_parser(
        "top",
        parents=[connection_options()],
        help="a live status view (Ctrl-C to quit)",
        description="The view of `readyq status`, redrawn in the whole terminal until Ctrl-C.",
    )
    p.add_argument(
        "--interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="seconds between refreshes (default 1)",
    )
    p.add_argument("--once", action="store_true", help="render one frame and exit")
    p.set_defaults(run=cmd_top)


def cmd_top(args: argparse.Namespace) -> int:
    import sqlalchemy as sa
    from rich.live import Live

    from readyq import admin

    if args.interval <= 0:
        raise CLIError("--interval must be positive", code=2)
    queue = open_queue(args)
    console = make_console()
    try:

        def frame() -> Any:
            from rich.console import Group

            rows = max(3, (console.height - 14) // 2)
            status = render_status(admin.status(queue), queue.database, queue.prefix,
                                   max_rows=rows)
            moving = admin.in_flight_progress(queue, limit=rows + 1)
            return Group(status, render_progress(moving, rows)) if moving else status

        first = frame()
        if args.once:
            console.print(first)
            return 0
        with Live(first, console=console, auto_refresh=False, screen=True) as live:
            try:
                while True:
                    time.sleep(args.interval)
                    try:
                        live.update(frame(), refresh=True)
                    except sa.exc.DBAPIError as exc:
                        live.update(
                            styled(f"database error, retrying: {db_message(exc)}", "bold red"),
                            refresh=True,
                        )
            except KeyboardInterrupt:
                pass
    finally:
        queue.close()
    return 0
