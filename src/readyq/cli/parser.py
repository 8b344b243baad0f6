"""The ``readyq`` argument parser: the root parser with the global options, to which
each command module adds its own subparser."""

from __future__ import annotations

import argparse

from readyq.cli import (
    completion_command,
    dashboard_command,
    demo_command,
    enqueue_command,
    job_actions,
    job_views,
    jobs_command,
    migrate_command,
    pause_commands,
    prune_command,
    schedules_command,
    status_commands,
    worker_command,
)
from readyq.cli.connection import DEFAULT_DB

DESCRIPTION = """\
Operate readyq, a database-backed, dependency-aware job scheduler: create its tables,
add jobs, run workers, and inspect, retry, cancel or prune jobs."""
EPILOG = """\
The database is --db URL, else $READYQ_DATABASE_URL, else sqlite:///readyq.db; --db and
--prefix may go before or after the command. Exit status: 0 done, 1 the operation could
not be done (missing job or schema, job not retryable, database error), 2 bad usage (bad
arguments, JSON, URL or option values; no command), 130 interrupted, 141 the reader of
the output went away (e.g. piped into head). `readyq COMMAND --help` describes a command."""

# In the order `readyq --help` lists them.
ADD_COMMANDS = (
    demo_command.add_demo_parser,
    migrate_command.add_migrate_parser,
    enqueue_command.add_enqueue_parser,
    worker_command.add_worker_parser,
    status_commands.add_status_parser,
    job_views.add_show_parser,
    job_views.add_dag_parser,
    jobs_command.add_jobs_parser,
    job_actions.add_retry_parser,
    job_actions.add_cancel_parser,
    pause_commands.add_pause_parser,
    pause_commands.add_resume_parser,
    pause_commands.add_pauses_parser,
    schedules_command.add_schedules_parser,
    job_actions.add_close_parser,
    prune_command.add_prune_parser,
    status_commands.add_top_parser,
    dashboard_command.add_dashboard_parser,
    completion_command.add_completion_parser,
)


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command; each subparser's ``run`` default is its command."""
    from readyq import __version__

    parser = argparse.ArgumentParser(
        prog="readyq",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"readyq {__version__}",
        help="print readyq's version and exit",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    parser.add_argument(
        "--db",
        dest="db_global",
        metavar="URL",
        help=f"database URL (env READYQ_DATABASE_URL; default {DEFAULT_DB})",
    )
    parser.add_argument(
        "--prefix", dest="prefix_global", metavar="PREFIX", help="table prefix (default readyq_)"
    )
    # Not required: a bare `readyq` gets the whole help rather than a one-line usage error.
    subparsers = parser.add_subparsers(
        dest="command",
        metavar="COMMAND",
        title="commands",
        help="`readyq COMMAND --help` describes each",
    )
    for add in ADD_COMMANDS:
        add(subparsers)
    return parser
