"""`readyq enqueue`: add a job or a container."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import Any

from readyq.cli.connection import load_app, open_queue
from readyq.cli.errors import CLIError
from readyq.cli.options import Subparsers, connection_options, json_option
from readyq.cli.output import print_json, say


def add_enqueue_parser(subparsers: Subparsers) -> None:
    """Add `readyq enqueue` to the subparsers."""
    p = subparsers.add_parser(
        "enqueue",
        parents=[connection_options(), json_option()],
        help="add a job; prints its id",
        description="Add a job (or, with --container, a container) and print its id.",
    )
    p.add_argument("type", metavar="TYPE", help="the job type (handler name)")
    p.add_argument("--args", default=None, metavar="JSON", help="the job's args as JSON")
    p.add_argument("--group", default="default", help="fair-share group (default: default)")
    p.add_argument("--weight", type=int, default=1, help="the group's weight (default 1)")
    p.add_argument(
        "--priority", type=int, default=None, help="higher runs first within the group (default 0)"
    )
    p.add_argument(
        "--after",
        type=int,
        nargs="+",
        action="extend",
        default=[],
        metavar="ID",
        help="job ids this job depends on",
    )
    p.add_argument(
        "--parent", type=int, default=None, metavar="ID", help="the container this job belongs to"
    )
    p.add_argument(
        "--run-after",
        default=None,
        metavar="SECONDS|ISO8601",
        help="a delay in seconds, or an ISO 8601 time with its offset (Z for UTC)",
    )
    p.add_argument("--max-attempts", type=int, default=None, help="attempts before failing")
    p.add_argument(
        "--uses",
        nargs="+",
        action="extend",
        default=None,
        metavar="NAME=UNITS",
        help="units of resources the job holds while it runs, such as gpu=2 (default: its "
        "handler's)",
    )
    p.add_argument(
        "--timeout", type=float, default=None, metavar="SECONDS", help="per-attempt timeout"
    )
    p.add_argument(
        "--unique-key",
        default=None,
        metavar="KEY",
        help="deduplicate: if a job holding KEY has not ended, print its id and add nothing",
    )
    p.add_argument(
        "--container",
        action="store_true",
        help="add a container (never runs; ends when its last child ends)",
    )
    p.add_argument(
        "--app",
        default=None,
        metavar="MODULE:ATTR",
        help="enqueue through the application's Queue (e.g. myapp.jobs:queue): its URL, "
        "prefix and handlers, so unknown types are refused and args are validated against "
        "the handler's args_model; --db and --prefix are then ignored",
    )
    p.set_defaults(run=cmd_enqueue)


def _run_after(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise CLIError(
            f"--run-after {text!r} is neither a number of seconds nor an ISO 8601 "
            "time (e.g. 2030-01-31T09:00:00+00:00)",
            code=2,
        ) from None
    if value.tzinfo is None:
        raise CLIError(
            f"--run-after {text!r} has no time zone: add one (2030-01-31T09:00:00+09:00, "
            "or Z for UTC) or give a number of seconds",
            code=2,
        )
    return value


def cmd_enqueue(args: argparse.Namespace) -> int:
    payload = None
    if args.args is not None:
        try:
            payload = json.loads(args.args)
        except json.JSONDecodeError as exc:
            raise CLIError(f"--args is not valid JSON: {exc}", code=2) from None
    run_after = _run_after(args.run_after)
    if args.container:
        _refuse_job_options(args)
    # The app's queue belongs to the app: used, never closed here.
    owned = args.app is None
    queue = open_queue(args) if owned else _app_queue(args)
    try:
        job_id, created = _enqueue(queue, args, payload, run_after)
        if args.json:
            data = {"id": job_id, "state": queue.get(job_id).state.value}
            if args.unique_key is not None:
                data["created"] = created
            print_json(data)
        else:
            say(str(job_id))
    finally:
        if owned:
            queue.close()
    return 0


def _refuse_job_options(args: argparse.Namespace) -> None:
    """Refuse, for a container, the options of a job that runs."""
    given = [
        name
        for name, value in (
            ("--priority", args.priority),
            ("--run-after", args.run_after),
            ("--max-attempts", args.max_attempts),
            ("--timeout", args.timeout),
            ("--unique-key", args.unique_key),
            ("--uses", args.uses),
        )
        if value is not None
    ]
    if given:
        raise CLIError(f"{', '.join(given)} cannot be used with --container", code=2)


def _app_queue(args: argparse.Namespace) -> Any:
    """The Queue of --app, refused unless it has a handler for the job's type."""
    queue = load_app(args.app)
    handled = queue.handlers
    # The queue refuses unknown types only once it has handlers; the app is named to
    # check the job against them, so an app without any (or without this type) is
    # refused here too. Containers have no handler.
    if not args.container and args.type not in handled:
        registered = ", ".join(sorted(handled)) or "none"
        raise CLIError(
            f"no handler for job type {args.type!r} in --app {args.app} (registered: "
            f"{registered}); nothing was enqueued",
            code=2,
        )
    if getattr(args, "db", None) or args.db_global:
        say(
            "readyq: note: --db is ignored with --app; the app's queue uses its own URL",
            file=sys.stderr,
        )
    return queue


def _enqueue(queue: Any, args: argparse.Namespace, payload: Any, run_after: Any) -> Any:
    """Add the job (or container); its id, and whether it was added (False: a job holding
    its unique key had not ended)."""
    if args.container:
        job_id = queue.enqueue_container(
            args.type,
            payload,
            group=args.group,
            weight=args.weight,
            depends_on=args.after,
            parent=args.parent,
        )
        return job_id, True
    options = {
        "group": args.group,
        "weight": args.weight,
        "priority": args.priority or 0,
        "depends_on": args.after,
        "parent": args.parent,
        "run_after": run_after,
        "max_attempts": args.max_attempts,
        "timeout": args.timeout,
        "uses": None if args.uses is None else _uses(args.uses),
    }
    if args.unique_key is not None:
        return queue.enqueue_unique(args.type, payload, unique_key=args.unique_key, **options)
    return queue.enqueue(args.type, payload, **options), True


def _uses(items: list[str]) -> dict[str, int]:
    from readyq.resources import parse_cli_uses

    return parse_cli_uses(items)
