"""`readyq prune`: delete finished jobs older than a cutoff."""

from __future__ import annotations

import argparse
from typing import Any

from readyq.cli.connection import open_queue
from readyq.cli.errors import CLIError
from readyq.cli.options import Subparsers, connection_options, json_option
from readyq.cli.output import make_console, print_json, say

# Prunes of fewer jobs than this show no progress bar.
PROGRESS_THRESHOLD = 1000


def add_prune_parser(subparsers: Subparsers) -> None:
    """Add `readyq prune` to the subparsers."""
    p = subparsers.add_parser(
        "prune",
        parents=[connection_options(), json_option()],
        help="delete finished jobs older than a cutoff",
        description="Delete jobs that finished more than --older-than ago, "
        "except those a remaining job depends on or is inside.",
    )
    p.add_argument(
        "--older-than",
        required=True,
        metavar="DURATION",
        help="e.g. 7d, 12h, 30m, 1w, 1d12h or seconds",
    )
    p.add_argument("--batch-size", type=int, default=500, help="jobs per transaction (default 500)")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="count what would be deleted; delete nothing",
    )
    p.set_defaults(run=cmd_prune)


class _PruneProgress:
    """A progress bar on stderr, shown only for prunes of many jobs."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.progress: Any = None
        self.task: Any = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total < PROGRESS_THRESHOLD:
            return
        if self.progress is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self.progress = Progress(
                TextColumn("pruning"),
                BarColumn(),
                MofNCompleteColumn(),
                console=make_console(stderr=True),
                transient=True,
            )
            self.progress.start()
            self.task = self.progress.add_task("prune", total=total)
        self.progress.update(self.task, completed=done, total=total)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def cmd_prune(args: argparse.Namespace) -> int:
    from readyq import admin

    try:
        seconds = admin.parse_duration(args.older_than)
    except ValueError as exc:
        raise CLIError(f"--older-than: {exc}", code=2) from None
    if args.batch_size < 1:
        raise CLIError("--batch-size must be at least 1", code=2)
    if args.dry_run:
        return _prune_dry_run(args, seconds)
    queue = open_queue(args)
    bar = _PruneProgress(enabled=not args.json)
    try:
        result = admin.prune(queue, seconds, batch_size=args.batch_size, progress=bar)
    finally:
        bar.close()
        queue.close()
    if args.json:
        print_json(result.to_json())
    else:
        kept = (
            f"; kept {result.kept} that remaining jobs still depend on or contain"
            if result.kept
            else ""
        )
        say(
            f"pruned {result.deleted} job(s) and {result.edges} dependency row(s) finished "
            f"before {admin.iso(result.cutoff)}{kept}"
        )
    return 0


def _prune_dry_run(args: argparse.Namespace, seconds: float) -> int:
    from readyq import admin

    queue = open_queue(args)
    try:
        result = admin.prune(queue, seconds, dry_run=True)
    finally:
        queue.close()
    if args.json:
        print_json(result.to_json())
        return 0
    kept = (
        f"; {result.kept} would stay, as remaining jobs depend on them or are inside them"
        if result.kept
        else ""
    )
    say(
        f"dry run: would prune {result.deleted} job(s) and {result.edges} dependency row(s) "
        f"finished before {admin.iso(result.cutoff)}{kept}; nothing was deleted"
    )
    return 0
