"""`readyq retry`, `readyq cancel` and `readyq close`: change one job (or, with filter
options, many: bulk_actions)."""

from __future__ import annotations

import argparse

from readyq.cli.bulk_actions import add_bulk_flags, filter_mode, run_bulk
from readyq.cli.connection import open_queue
from readyq.cli.errors import CLIError
from readyq.cli.filters import filter_options
from readyq.cli.options import Subparsers, connection_options, json_option
from readyq.cli.output import print_json, say


def add_retry_parser(subparsers: Subparsers) -> None:
    """Add `readyq retry` to the subparsers."""
    p = subparsers.add_parser(
        "retry",
        parents=[connection_options(), json_option(), filter_options()],
        help="put a failed/cancelled/upstream_failed job back (with its dependents)",
        description="The job goes back to ready (or waiting if its dependencies are "
        "unfinished), its error cleared and its attempts kept; dependents that ended "
        "upstream_failed only because of it are revived too, and containers it belongs to "
        "reopen. Retrying a container retries its failed and cancelled jobs. A job that has "
        "not finished, is done, or failed because a job it depends on failed is refused "
        "(the message names the job to retry instead), and nothing changes. With filter "
        "options instead of an ID, every matching job is retried (failed jobs unless "
        "--state says otherwise); it asks before changing more than one job unless --yes.",
    )
    p.add_argument(
        "id", type=int, nargs="?", metavar="ID", help="the job (or container) to retry"
    )
    add_bulk_flags(p, "retry")
    p.add_argument(
        "--fresh", action="store_true",
        help="delete what the job's attempts kept (stored steps, saved state, progress): "
        "it starts from the beginning instead of resuming (with an ID only)",
    )
    p.add_argument(
        "--extra-attempts",
        type=int,
        default=1,
        metavar="N",
        help="attempts granted on top of those used (default 1)",
    )
    p.set_defaults(run=cmd_retry)


def cmd_retry(args: argparse.Namespace) -> int:
    from readyq import admin

    if args.extra_attempts < 1:
        raise CLIError("--extra-attempts must be at least 1", code=2)
    if filter_mode(args, "retry"):
        if args.fresh:
            raise CLIError("--fresh retries one job, by its ID: not with a filter", code=2)
        return run_bulk(args, "retry")
    queue = open_queue(args)
    try:
        result = admin.retry(queue, args.id, extra_attempts=args.extra_attempts,
                             fresh=args.fresh)
    finally:
        queue.close()
    if args.json:
        print_json(result.to_json())
        return 0
    lines = [f"job {i} -> {state}" for i, state in result.revived]
    if result.reopened:
        lines.append("containers reopened: " + ", ".join(str(i) for i in result.reopened))
    say(f"retried job {args.id}: {len(result.revived)} job(s) revived")
    for line in lines:
        say(f"  {line}")
    return 0


def add_cancel_parser(subparsers: Subparsers) -> None:
    """Add `readyq cancel` to the subparsers."""
    p = subparsers.add_parser(
        "cancel",
        parents=[connection_options(), json_option(), filter_options()],
        help="cancel a job (Queue.cancel)",
        description="A waiting or ready job ends cancelled at once and its dependents end "
        "upstream_failed. A running job is asked to stop: its handler sees job.cancelled "
        "at its next heartbeat, and the job ends cancelled unless the handler returns a "
        "result first. Cancelling a container cancels its children. With filter options "
        "instead of an ID, every matching job that has not ended is cancelled; it asks "
        "before changing more than one job unless --yes.",
    )
    p.add_argument("id", type=int, nargs="?", metavar="ID", help="the job to cancel")
    add_bulk_flags(p, "cancel")
    p.set_defaults(run=cmd_cancel)


def cmd_cancel(args: argparse.Namespace) -> int:
    from readyq import admin

    if filter_mode(args, "cancel"):
        return run_bulk(args, "cancel")
    queue = open_queue(args)
    try:
        result = admin.cancel(queue, args.id, by="cli")
    finally:
        queue.close()
    if args.json:
        print_json(result.to_json())
    elif result.requested:
        say(
            f"job {args.id} is {result.after}: cancel requested; the handler sees "
            "job.cancelled at its next heartbeat"
        )
    elif result.after == "active":  # a container: it ends when its children have
        say(
            f"container {args.id}: {result.ended} waiting or ready job(s) cancelled, cancel "
            f"requested for {result.stopping} running job(s); it ends cancelled once they "
            "have stopped"
        )
    else:
        say(f"job {args.id} cancelled ({result.before} -> {result.after})")
    return 0


def add_close_parser(subparsers: Subparsers) -> None:
    """Add `readyq close` to the subparsers."""
    p = subparsers.add_parser(
        "close",
        parents=[connection_options(), json_option()],
        help="end an empty container done (Queue.close_container)",
        description="End done a container that has no children and waits for no "
        "dependency, as if its last child had ended done; its dependents follow. Refused, "
        "changing nothing, for a container with children that have not ended or with "
        "dependencies that are not done, and for anything else.",
    )
    p.add_argument("id", type=int, metavar="ID", help="the container to close")
    p.set_defaults(run=cmd_close)


def cmd_close(args: argparse.Namespace) -> int:
    queue = open_queue(args)
    try:
        queue.close_container(args.id)
        state = queue.get(args.id).state.value
    finally:
        queue.close()
    if args.json:
        print_json({"id": args.id, "state": state})
    else:
        print(f"container {args.id} closed: {state}")
    return 0
