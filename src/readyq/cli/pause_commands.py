"""`readyq pause`, `readyq resume` and `readyq pauses`: pauses of groups, types and schedules."""

from __future__ import annotations

import argparse

from readyq.cli.connection import open_queue
from readyq.cli.errors import CLIError
from readyq.cli.options import Subparsers, connection_options, duration_arg, json_option
from readyq.cli.output import print_json, say


def add_pause_parser(subparsers: Subparsers) -> None:
    """Add `readyq pause` to the subparsers."""
    p = subparsers.add_parser(
        "pause",
        parents=[connection_options()],
        help="stop workers claiming a group's or a type's jobs (Queue.pause)",
        description="From the moment it commits, no worker on any host claims the ready "
        "jobs of the group, of the type, or of the type within the group. Jobs already "
        "running go on. The global cap is shared among the groups not paused. With "
        "--until the pause ends by itself (database clock).",
    )
    p.add_argument("--group", default=None, help="the group to pause")
    p.add_argument("--type", default=None, help="the job type to pause")
    p.add_argument(
        "--schedule", default=None, metavar="NAME",
        help="pause a periodic schedule instead: its occurrences are skipped until resumed "
        "(Queue.pause_schedule)",
    )
    p.add_argument(
        "--until", type=duration_arg, default=None, metavar="DURATION",
        help="end the pause after this long (90, 30m, 1h30m); default: until resumed",
    )
    p.set_defaults(run=cmd_pause)


def _schedule_only(args: argparse.Namespace, *others: str) -> str | None:
    """The --schedule of pause/resume, refused with the options of a job pause."""
    if args.schedule is None:
        return None
    if any(getattr(args, o) is not None for o in others):
        raise CLIError(f"--schedule takes no --{' or --'.join(others)}", code=2)
    return str(args.schedule)


def cmd_pause(args: argparse.Namespace) -> int:
    schedule = _schedule_only(args, "group", "type", "until")
    if schedule is not None:
        queue = open_queue(args)
        try:
            queue.pause_schedule(schedule)
        finally:
            queue.close()
        say(f"schedule {schedule} paused")
        return 0
    queue = open_queue(args)
    try:
        queue.pause(group=args.group, type=args.type, until=args.until)
        (shown,) = [
            p for p in queue.pauses() if (p.group, p.type) == (args.group, args.type)
        ] or [None]
    finally:
        queue.close()
    from readyq.reports import pause_line

    say(pause_line(shown) if shown is not None else "paused (the pause has ended already)")
    return 0


def add_resume_parser(subparsers: Subparsers) -> None:
    """Add `readyq resume` to the subparsers."""
    p = subparsers.add_parser(
        "resume",
        parents=[connection_options()],
        help="end a pause (Queue.resume)",
        description="End the pause of exactly this group, type, or type within a group.",
    )
    p.add_argument("--group", default=None, help="the paused group")
    p.add_argument("--type", default=None, help="the paused job type")
    p.add_argument(
        "--schedule", default=None, metavar="NAME",
        help="resume a paused periodic schedule instead; it fires from its next "
        "occurrence on (Queue.resume_schedule)",
    )
    p.set_defaults(run=cmd_resume)


def cmd_resume(args: argparse.Namespace) -> int:
    schedule = _schedule_only(args, "group", "type")
    if schedule is not None:
        queue = open_queue(args)
        try:
            was_paused = queue.resume_schedule(schedule)
        finally:
            queue.close()
        if not was_paused:
            raise CLIError(f"schedule {schedule} is not paused")
        say(f"schedule {schedule} resumed")
        return 0
    queue = open_queue(args)
    try:
        resumed = queue.resume(group=args.group, type=args.type)
    finally:
        queue.close()
    if not resumed:
        raise CLIError("no such pause stands")
    say("resumed")
    return 0


def add_pauses_parser(subparsers: Subparsers) -> None:
    """Add `readyq pauses` to the subparsers."""
    p = subparsers.add_parser(
        "pauses",
        parents=[connection_options(), json_option()],
        help="the pauses in force (Queue.pauses)",
        description="Each pause in force: the group, the type, when it was made and "
        "when it ends (database clock).",
    )
    p.set_defaults(run=cmd_pauses)


def cmd_pauses(args: argparse.Namespace) -> int:
    from readyq.reports import pause_json, pause_line

    queue = open_queue(args)
    try:
        pauses = queue.pauses()
    finally:
        queue.close()
    if args.json:
        print_json([pause_json(p) for p in pauses])
        return 0
    if not pauses:
        say("no pauses")
    for p in pauses:
        say(pause_line(p))
    return 0
