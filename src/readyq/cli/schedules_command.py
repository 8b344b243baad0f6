"""`readyq schedules`: the periodic schedules, and forgetting one."""

from __future__ import annotations

import argparse

from readyq.cli.connection import open_queue
from readyq.cli.errors import CLIError
from readyq.cli.options import Subparsers, connection_options, json_option
from readyq.cli.output import make_console, print_json, say, styled


def add_schedules_parser(subparsers: Subparsers) -> None:
    """Add `readyq schedules` to the subparsers."""
    p = subparsers.add_parser(
        "schedules",
        parents=[connection_options(), json_option()],
        help="the periodic schedules: last and next fire times (Queue.schedules)",
        description="Each stored schedule: the definition that stands, when it fired last "
        "and fires next (UTC, database clock), whether it is paused, and a different "
        "definition some worker's queue gave it (that worker fires nothing of it). A "
        "schedule is stored by the first worker that fires it.",
    )
    p.add_argument(
        "--forget", default=None, metavar="NAME",
        help="remove NAME's stored definition and progress, so that the next worker "
        "stores its own (Queue.forget_schedule); fired occurrences never fire again",
    )
    p.set_defaults(run=cmd_schedules)


def cmd_schedules(args: argparse.Namespace) -> int:
    from rich.table import Table

    from readyq.reports import schedule_json

    queue = open_queue(args)
    try:
        if args.forget is not None:
            if not queue.forget_schedule(args.forget):
                raise CLIError(f"no schedule named {args.forget!r} is stored")
            say(f"schedule {args.forget} forgotten")
            return 0
        schedules = queue.schedules()
    finally:
        queue.close()
    if args.json:
        print_json([schedule_json(s) for s in schedules])
        return 0
    if not schedules:
        say("no schedules (a schedule is stored by the first worker that fires it)")
        return 0
    table = Table(title="Schedules", title_justify="left")
    for col in ("schedule", "definition", "last fire (UTC)", "next fire (UTC)", "state"):
        table.add_column(col)
    for s in schedules:
        last = "-" if s.last_fire is None else s.last_fire.strftime("%Y-%m-%d %H:%M:%S")
        table.add_row(
            styled(s.name), styled(s.definition), styled(last),
            styled(s.next_fire.strftime("%Y-%m-%d %H:%M:%S")),
            styled("paused", "yellow") if s.paused else styled("active"),
        )
    console = make_console()
    console.print(table)
    for s in schedules:
        if s.conflict is not None:
            seen = "" if s.conflict_at is None else (
                f" (seen {s.conflict_at.strftime('%Y-%m-%d %H:%M:%S')} UTC)"
            )
            console.print(styled(
                f"schedule {s.name}: a worker defines it differently: {s.conflict}{seen}; "
                "it fires nothing of it (readyq schedules --forget to let a new definition "
                "stand)", "bold yellow",
            ))
    return 0
