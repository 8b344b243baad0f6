"""`retry` and `cancel` over the jobs matching filter options: preview, confirmation, result."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from readyq.cli.connection import open_queue
from readyq.cli.errors import CLIError
from readyq.cli.filters import describe_filter, given_filters, job_filter
from readyq.cli.output import print_json, say


def add_bulk_flags(p: argparse.ArgumentParser, verb: str) -> None:
    p.add_argument(
        "--dry-run",
        action="store_true",
        help=f"with filter options: count the jobs {verb} would change; change nothing",
    )
    p.add_argument(
        "--yes",
        "-y",
        action="store_true",
        help="with filter options: do not ask before changing more than one job",
    )


def filter_mode(args: argparse.Namespace, verb: str) -> bool:
    """Whether `retry`/`cancel` acts on a filter (or, with --dry-run, on its ID as a
    filter) rather than on one job."""
    given = given_filters(args)
    if args.id is not None and given:
        raise CLIError(
            f"give `readyq {verb}` a job ID or filter options ({', '.join(given)}), not both",
            code=2,
        )
    if args.id is None and not given:
        raise CLIError(
            f"`readyq {verb}` needs a job ID or filter options (--state, --type, --group, "
            "--parent, --since, --until, --unique-key, --id)",
            code=2,
        )
    return bool(given) or args.dry_run


def _confirm(question: str, count: int) -> None:
    """Ask on the terminal before changing ``count`` (> 1) jobs; refuse without one."""
    if not sys.stdin.isatty():
        raise CLIError(
            f"this would change {count} jobs and stdin is not a terminal to ask on: pass "
            "--yes to go ahead (--dry-run shows what would change)",
            code=2,
        )
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        raise CLIError("nothing was changed", code=1)


def run_bulk(args: argparse.Namespace, action: str) -> int:
    from readyq import admin
    from readyq.listing import CANCEL_STATES, RETRY_STATES, JobFilter

    if args.id is not None:  # `retry ID --dry-run`: that one job, whatever its state
        flt = JobFilter(id=args.id, state=RETRY_STATES if action == "retry" else CANCEL_STATES)
    else:
        flt = job_filter(args)
    run = admin.retry_many if action == "retry" else admin.cancel_many
    options: dict[str, Any] = (
        {"extra_attempts": args.extra_attempts} if action == "retry" else {"by": "cli"}
    )
    queue = open_queue(args)
    try:
        if args.dry_run or not args.yes:
            preview = run(queue, flt, dry_run=True, **options)
            count = preview.changed + preview.requested
            if args.dry_run:
                _print_bulk(preview, args.json)
                return 0
            if count > 1:
                verb = "retry" if action == "retry" else "cancel"
                _confirm(
                    f"{verb} {preview.matched} job(s) matching "
                    f"{describe_filter(preview.filter)}, changing {count} job(s)?",
                    count,
                )
        result = run(queue, flt, **options)
    finally:
        queue.close()
    _print_bulk(result, args.json)
    return 0


def _print_bulk(result: Any, as_json: bool) -> None:
    if as_json:
        print_json(result.to_json())
        return
    done = {"retry": "retried", "cancel": "cancelled"}[result.action]
    would = {"retry": "would retry", "cancel": "would cancel"}[result.action]
    head = f"dry run: {would}" if result.dry_run else done
    extra = f", {result.requested} running asked to stop" if result.requested else ""
    say(
        f"{head} {result.changed} job(s){extra} of {result.matched} matching "
        f"{describe_filter(result.filter)}; {result.skipped} skipped"
        + ("; nothing was changed" if result.dry_run else "")
    )
    for job_id, reason in result.reasons:
        say(f"  skipped job {job_id}: {reason}")
    if result.skipped > len(result.reasons):
        say(f"  ... and {result.skipped - len(result.reasons)} more skipped")
