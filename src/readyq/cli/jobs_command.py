"""`readyq jobs`: a page of the jobs matching the filter options."""

from __future__ import annotations

import argparse
from typing import Any

from readyq.cli.connection import open_queue
from readyq.cli.filters import describe_filter, filter_options, job_filter
from readyq.cli.options import Subparsers, connection_options, json_option
from readyq.cli.output import (
    error_line,
    make_console,
    print_json,
    progress_cell,
    say,
    state_text,
    styled,
)
from readyq.reports import ago


def add_jobs_parser(subparsers: Subparsers) -> None:
    """Add `readyq jobs` to the subparsers."""
    p = subparsers.add_parser(
        "jobs",
        parents=[connection_options(), json_option(), filter_options()],
        help="list jobs by state, type, group, container, time or key",
        description="A page of the jobs that match every filter given, newest first. "
        "The last line gives the --cursor of the next page (with --json: next_cursor). "
        "Pages are read through an index by keyset, so a deep page costs what the first "
        "does.",
    )
    p.add_argument(
        "--order",
        choices=("newest", "oldest"),
        default="newest",
        help="newest or oldest job first, by id (default newest)",
    )
    p.add_argument("--limit", type=int, default=50, help="jobs per page, 1 to 1000 (default 50)")
    p.add_argument("--cursor", default=None, help="continue a listing from its last page")
    p.set_defaults(run=cmd_jobs)


def _attempts_cell(j: Any) -> str:
    """Attempts made of those allowed; a container never runs, and a job enqueued
    without a limit learns its handler's when it first runs."""
    if j.is_container:
        return "-"
    if j.max_attempts is None:
        return f"{j.attempts} (handler's)"
    return f"{j.attempts}/{j.max_attempts}"


def cmd_jobs(args: argparse.Namespace) -> int:
    from rich.table import Table

    from readyq.model import IN_FLIGHT_STATES
    from readyq.reports import pauses_of

    flt = job_filter(args)
    queue = open_queue(args)
    try:
        page = queue.jobs(flt, order=args.order, limit=args.limit, cursor=args.cursor)
        pauses = queue.pauses()
    finally:
        queue.close()
    if args.json:
        from readyq.reports import pause_json

        paused = [
            j.id for j in page.jobs
            if j.state.value == "ready" and pauses_of(pauses, j.group, j.type)
        ]
        print_json({**page.to_json(), "paused_ids": paused,
                    "pauses": [pause_json(p) for p in pauses]})
        return 0
    console = make_console()
    table = Table(
        title=f"{len(page.jobs)} job(s) matching {describe_filter(page.filter)}, "
        f"{page.order} first",
        title_justify="left",
    )
    # The progress of the jobs in flight that report it; the column only when one does.
    moving = {j.id: j.progress for j in page.jobs
              if j.progress is not None and j.state.value in IN_FLIGHT_STATES}
    for name, justify in (
        ("id", "right"), ("type", "left"), ("state", "left"), ("group", "left"),
        ("attempts", "right"), ("progress", "left"), ("created", "left"),
        ("finished", "left"), ("error", "left"),
    ):
        if name != "progress" or moving:
            table.add_column(name, justify=justify)  # type: ignore[arg-type]
    now = page.now
    for j in page.jobs:
        created = None if j.created_at is None else now - j.created_at.timestamp()
        finished = None if j.finished_at is None else now - j.finished_at.timestamp()
        p = moving.get(j.id)
        progress = [progress_cell(p) if p is not None else styled("")] if moving else []
        table.add_row(
            styled(j.id),
            styled(j.type + (" (container)" if j.is_container else "")),
            styled(f"{j.state.value} (paused)", "yellow")
            if j.state.value == "ready" and pauses_of(pauses, j.group, j.type)
            else state_text(j.state.value),
            styled(j.group),
            styled(_attempts_cell(j)),
            *progress,
            styled("-" if created is None else f"{ago(created)} ago"),
            styled("-" if finished is None else f"{ago(finished)} ago"),
            styled(error_line(j.error)),
        )
    console.print(table)
    if page.next_cursor is not None:
        say(f"next page: --cursor {page.next_cursor}")
    return 0
