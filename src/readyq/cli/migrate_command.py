"""`readyq migrate`: create or upgrade readyq's tables."""

from __future__ import annotations

import argparse
import sys

from readyq.cli.connection import database_url, open_queue, parse_url, table_prefix
from readyq.cli.errors import CLIError
from readyq.cli.options import Subparsers, connection_options, json_option
from readyq.cli.output import print_json, say


def add_migrate_parser(subparsers: Subparsers) -> None:
    """Add `readyq migrate` to the subparsers."""
    p = subparsers.add_parser(
        "migrate",
        parents=[connection_options(), json_option()],
        help="create or upgrade readyq's tables (Alembic, own version table)",
        description="Upgrade readyq's tables for the prefix to the newest revision, "
        "recording it in <prefix>alembic_version. Running it again changes nothing.",
    )
    p.add_argument("--revision", default="head", help="target revision (default head)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--stamp",
        action="store_true",
        help="record the revision without running it (adopt tables made by Queue.create_schema())",
    )
    mode.add_argument(
        "--sql",
        action="store_true",
        help="print the SQL for a fresh database of the URL's kind; run nothing",
    )
    p.set_defaults(run=cmd_migrate)


def cmd_migrate(args: argparse.Namespace) -> int:
    from alembic.util.exc import CommandError

    from readyq import admin

    url = parse_url(database_url(args))
    prefix = table_prefix(args)
    try:
        if args.sql:
            sys.stdout.write(admin.migration_sql(url, prefix, args.revision))
            return 0
        queue = open_queue(args, create=True)
        try:
            _ = queue.database  # connects: checks the driver, the server and its version
        finally:
            queue.close()
        engine_url = url.render_as_string(hide_password=False)
        before = admin.current_revision(engine_url, prefix)
        if args.stamp:
            after = admin.stamp(engine_url, prefix, args.revision)
        else:
            after = admin.migrate(engine_url, prefix, args.revision)
    except CommandError as exc:
        raise CLIError(f"migration: {exc}", code=2) from None
    if args.json:
        print_json(
            {"prefix": prefix, "previous": before, "revision": after, "stamped": bool(args.stamp)}
        )
    elif before == after:
        say(f"readyq tables (prefix {prefix}) already at revision {after}")
    else:
        verb = "stamped" if args.stamp else "migrated"
        say(f"readyq tables (prefix {prefix}) {verb}: {before or 'none'} -> {after}")
    return 0
