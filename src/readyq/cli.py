"""The ``readyq`` command line."""

from __future__ import annotations

import argparse
import errno
import functools
import importlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

from readyq.errors import ReadyqError
from readyq.untrusted import printable

DEFAULT_DB = "sqlite:///readyq.db"
# The demo's own defaults (readyq.demo.DEFAULT_DB and DEFAULT_PREFIX, not imported here so
# that the parser stays cheap to build): it drops and recreates its tables, so by default
# they are apart from an application's.
DEMO_DB = "sqlite:///readyq-demo.db"
DEMO_PREFIX = "readyq_demo_"
STATE_STYLES = {
    "waiting": "bright_black",
    "ready": "cyan",
    "leased": "yellow",
    "running": "bold yellow",
    "active": "magenta",
    "done": "green",
    "failed": "bold red",
    "cancelled": "bright_black",
    "upstream_failed": "red",
}
PROGRESS_THRESHOLD = 1000

DESCRIPTION = """\
Operate readyq, a database-backed, dependency-aware job scheduler: create its tables,
add jobs, run workers, and inspect, retry, cancel or prune jobs."""
EPILOG = """\
The database is --db URL, else $READYQ_DATABASE_URL, else sqlite:///readyq.db; --db and
--prefix may go before or after the command. Exit status: 0 done, 1 the operation could
not be done (missing job or schema, job not retryable, database error), 2 bad usage (bad
arguments, JSON, URL or option values; no command), 130 interrupted, 141 the reader of
the output went away (e.g. piped into head). `readyq COMMAND --help` describes a command."""
# What a shell reports for a process killed by SIGPIPE (128 + 13). Python ignores SIGPIPE,
# so a closed stdout is a BrokenPipeError instead of that death; exiting with the same
# status keeps `set -o pipefail` scripts seeing what they see from cat or grep. Exit 1
# (the Python docs' example) would read as "the operation could not be done" here.
EXIT_BROKEN_PIPE = 141
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a Ctrl-C
# The dependencies and dependents ``readyq show`` lists before it counts the rest.
SHOW_EDGES = 20
SHELLS = ("bash", "zsh", "fish")


class CLIError(Exception):
    """A user mistake or a refusal, reported as one line on stderr."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def _duration_arg(text: str) -> float:
    """An argparse type: seconds in ``90``, ``5m``, ``1h30m`` (see admin.parse_duration)."""
    from readyq.admin import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parser() -> argparse.ArgumentParser:
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
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--db",
        default=argparse.SUPPRESS,
        metavar="URL",
        help=f"database URL (env READYQ_DATABASE_URL; default {DEFAULT_DB})",
    )
    common.add_argument(
        "--prefix",
        default=argparse.SUPPRESS,
        metavar="PREFIX",
        help="table prefix (default readyq_)",
    )
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print JSON instead of tables")
    filters = _filter_parser()

    # Not required: a bare `readyq` gets the whole help rather than a one-line usage error.
    sub = parser.add_subparsers(
        dest="command",
        metavar="COMMAND",
        title="commands",
        help="`readyq COMMAND --help` describes each",
    )
    demo = sub.add_parser(
        "demo",
        help="run a small pipeline end to end and check it",
        description="Run a DAG pipeline (fetch → parse → a container of transforms for two "
        "tenants weighted 3:1 → report) under a global cap, then check dependency order, "
        "the cap and the tenants' slot-time shares from the database. The demo drops and "
        "recreates the tables of its prefix, and refuses a prefix whose tables hold jobs it "
        "did not make. It prints the `readyq status` command that finds its tables.",
    )
    demo.add_argument(
        "--db",
        default=argparse.SUPPRESS,
        metavar="URL",
        help=f"database URL (env READYQ_DATABASE_URL; default {DEMO_DB})",
    )
    demo.add_argument(
        "--prefix",
        default=argparse.SUPPRESS,
        metavar="PREFIX",
        help=f"table prefix (default {DEMO_PREFIX})",
    )
    demo.add_argument("--workers", type=int, default=3, help="worker loops (default 3)")
    demo.add_argument("--cap", type=int, default=4, help="global concurrency cap (default 4)")
    demo.add_argument("--chunks", type=int, default=48, help="transforms in the batch (default 48)")

    p = sub.add_parser(
        "migrate",
        parents=[common, as_json],
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

    p = sub.add_parser(
        "enqueue",
        parents=[common, as_json],
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

    p = sub.add_parser(
        "worker",
        help="run the handlers of an application's Queue",
        description="Import the application's readyq.Queue (which carries the handlers and "
        "its own database URL) and run queue.run_worker(). --db and --prefix are ignored "
        "here: the queue object already has its URL and prefix.",
    )
    p.add_argument(
        "--app",
        required=True,
        metavar="MODULE:ATTR",
        help="where the Queue is, e.g. myapp.jobs:queue (or a function returning one)",
    )
    add_worker_flags(p)
    p.add_argument("--db", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    p.add_argument("--prefix", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    p = sub.add_parser(
        "status",
        parents=[common, as_json],
        help="jobs per state and group, in flight, oldest ready, workers, stuck jobs",
        description="Counts per state and per group, jobs in flight, how long the "
        "oldest runnable job has waited, the workers holding leases (with "
        "their latest heartbeat), the job types that no worker seems to run, and the "
        "jobs and containers that cannot progress on their own (stuck), all judged by "
        "the database clock.",
    )
    p.add_argument(
        "--unclaimed-after",
        type=_duration_arg,
        default=60.0,
        metavar="DURATION",
        help="list the types whose runnable jobs waited longer than this with none of "
        "them in flight (default 60s; e.g. 90, 5m)",
    )
    p.add_argument(
        "--empty-after",
        type=_duration_arg,
        default=60.0,
        metavar="DURATION",
        help="list as stuck the containers with no child and nothing to wait for, "
        "unchanged for longer than this (default 60s)",
    )

    p = sub.add_parser(
        "show",
        parents=[common, as_json],
        help="one job: fields, attempts, error, dependencies, dependents",
        description="Everything about one job: its type, state, group, attempts, times, "
        "lease, args, result and last error, the jobs it depends on and the jobs that "
        "depend on it.",
    )
    p.add_argument("id", type=int, metavar="ID", help="the job's id")

    p = sub.add_parser(
        "dag",
        parents=[common, as_json],
        help="the dependency graph around a job (tree, mermaid or dot)",
        description="Upstream (what the job needs, and the children of "
        "containers), downstream (what it unblocks, and the containers it is "
        "in), as a tree, a Mermaid flowchart or a Graphviz digraph.",
    )
    p.add_argument("id", type=int, metavar="ID", help="the job at the centre of the graph")
    p.add_argument(
        "--format",
        choices=("tree", "mermaid", "dot"),
        default="tree",
        help="a tree in the terminal, a Mermaid flowchart or a Graphviz digraph (default tree)",
    )
    p.add_argument("--max-nodes", type=int, default=200, help="largest graph shown (default 200)")

    p = sub.add_parser(
        "jobs",
        parents=[common, as_json, filters],
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

    p = sub.add_parser(
        "retry",
        parents=[common, as_json, filters],
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
    _bulk_flags(p, "retry")
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

    p = sub.add_parser(
        "cancel",
        parents=[common, as_json, filters],
        help="cancel a job (Queue.cancel)",
        description="A waiting or ready job ends cancelled at once and its dependents end "
        "upstream_failed. A running job is asked to stop: its handler sees job.cancelled "
        "at its next heartbeat, and the job ends cancelled unless the handler returns a "
        "result first. Cancelling a container cancels its children. With filter options "
        "instead of an ID, every matching job that has not ended is cancelled; it asks "
        "before changing more than one job unless --yes.",
    )
    p.add_argument("id", type=int, nargs="?", metavar="ID", help="the job to cancel")
    _bulk_flags(p, "cancel")

    p = sub.add_parser(
        "pause",
        parents=[common],
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
        "--until", type=_duration_arg, default=None, metavar="DURATION",
        help="end the pause after this long (90, 30m, 1h30m); default: until resumed",
    )

    p = sub.add_parser(
        "resume",
        parents=[common],
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

    sub.add_parser(
        "pauses",
        parents=[common, as_json],
        help="the pauses in force (Queue.pauses)",
        description="Each pause in force: the group, the type, when it was made and "
        "when it ends (database clock).",
    )

    p = sub.add_parser(
        "schedules",
        parents=[common, as_json],
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

    p = sub.add_parser(
        "close",
        parents=[common, as_json],
        help="end an empty container done (Queue.close_container)",
        description="End done a container that has no children and waits for no "
        "dependency, as if its last child had ended done; its dependents follow. Refused, "
        "changing nothing, for a container with children that have not ended or with "
        "dependencies that are not done, and for anything else.",
    )
    p.add_argument("id", type=int, metavar="ID", help="the container to close")

    p = sub.add_parser(
        "prune",
        parents=[common, as_json],
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

    p = sub.add_parser(
        "top",
        parents=[common],
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

    p = sub.add_parser(
        "dashboard",
        parents=[common],
        help="serve the web dashboard (pip install 'readyq[web]')",
        description="Serve the dashboard: overview, jobs with filters and actions, each "
        "job, the dependency graph, workers, and a JSON API under /api/. It listens on "
        "127.0.0.1 unless --host says otherwise. With READYQ_DASHBOARD_USER and "
        "READYQ_DASHBOARD_PASSWORD set, every request needs those HTTP basic credentials; "
        "another --host is refused without them. Requests must name localhost, 127.0.0.1, "
        "[::1], the --host address or an --allowed-host in their Host header. "
        "READYQ_DASHBOARD_SECRET signs the CSRF tokens (random per start by default).",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port to listen on (default 8765)")
    p.add_argument(
        "--allowed-host",
        dest="allowed_hosts",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name the dashboard is served under (repeat it for more; *.example.com "
        "for every name under example.com); requests for other hosts get 400. localhost, "
        "127.0.0.1, [::1] and the --host address are always allowed",
    )
    p.add_argument(
        "--read-only", action="store_true", help="refuse every action (retry, cancel) with 403"
    )
    p.add_argument(
        "--base-path",
        default="",
        metavar="PATH",
        help="serve under this path, e.g. /jobs behind a proxy (default: the root)",
    )
    p.add_argument(
        "--cap",
        type=int,
        default=None,
        help="the workers' global cap, shown against the jobs in flight",
    )

    p = sub.add_parser(
        "completion",
        help="print the shell completion script for bash, zsh or fish",
        description="Print the script that lets the shell complete readyq's commands and "
        "options. Load it in the shell's startup file: bash: eval \"$(readyq completion "
        "bash)\" in ~/.bashrc; zsh: eval \"$(readyq completion zsh)\" in ~/.zshrc, after "
        "compinit; fish: readyq completion fish > ~/.config/fish/completions/readyq.fish.",
    )
    p.add_argument("shell", choices=SHELLS, metavar="SHELL", help="bash, zsh or fish")
    return parser


def add_worker_flags(
    p: argparse.ArgumentParser,
    *,
    types_flag: str = "--type",
    types_help: str = "run only this job type (repeatable; default: every handler)",
) -> None:
    """The flags of ``readyq worker`` that shape the worker (all but ``--app``), shared
    with Django's ``readyq_worker`` command, which names ``--type`` ``--queue``."""
    p.add_argument(
        "--concurrency",
        type=int,
        default=1,
        help="global cap on jobs in flight across all workers (default 1)",
    )
    p.add_argument(
        "--lease-ttl",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="lease lifetime without a heartbeat (default 30)",
    )
    p.add_argument(
        "--heartbeat-interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how often leases are extended; at most half the TTL (default 10)",
    )
    p.add_argument(
        "--poll-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="longest wait between looks for work (default 1)",
    )
    p.add_argument(
        "--until-idle",
        action="store_true",
        help="return once every job of the worker's types has ended",
    )
    p.add_argument(
        types_flag,
        dest="types",
        action="append",
        default=None,
        metavar="TYPE",
        help=types_help,
    )
    p.add_argument(
        "--max-running",
        type=int,
        default=None,
        metavar="N",
        help="most jobs this process runs at once, to spread the cap over processes or "
        "hosts (default: the whole cap)",
    )
    p.add_argument(
        "--shutdown-grace",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="how long SIGTERM/SIGINT let running jobs finish before they are handed back "
        "(default 0)",
    )
    p.add_argument(
        "--no-freeze-gc",
        dest="freeze_gc",
        action="store_false",
        help="leave the objects that exist at start in the garbage collector's passes "
        "(by default they are frozen out of them, which shortens the pauses of a long-lived "
        "worker)",
    )
    p.add_argument(
        "--isolation",
        choices=("thread", "process"),
        default="thread",
        help="where handlers that do not choose run: in threads, or in child processes "
        "killed at their timeout (default thread)",
    )
    p.add_argument(
        "--kill-grace",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="seconds between SIGTERM and SIGKILL of a child at its timeout (default 5)",
    )
    p.add_argument(
        "--max-jobs-per-child",
        type=int,
        default=None,
        metavar="N",
        help="replace a child process after N jobs (default: never)",
    )
    p.add_argument(
        "--max-memory-per-child",
        type=int,
        default=None,
        metavar="MIB",
        help="kill a child process whose resident memory passes MIB mebibytes, failing "
        "its attempt (default: no limit)",
    )
    p.add_argument("--worker-id", default=None, help="worker id (default host:pid:random)")
    p.add_argument("--json", action="store_true", help="print the final stats as JSON")


def _filter_parser() -> argparse.ArgumentParser:
    """The filter options of `jobs`, and of `retry` and `cancel` without an ID."""
    f = argparse.ArgumentParser(add_help=False)
    g = f.add_argument_group("filters (every one given must hold)")
    g.add_argument(
        "--state",
        dest="states",
        nargs="+",
        action="extend",
        default=None,
        metavar="STATE",
        help="one state or several (waiting ready leased running active done failed "
        "cancelled upstream_failed)",
    )
    g.add_argument("--type", dest="job_type", default=None, help="the job type")
    g.add_argument("--group", default=None, help="the fair-share group")
    g.add_argument(
        "--parent", dest="parent_id", type=int, default=None, metavar="ID",
        help="the container the jobs are directly inside",
    )
    g.add_argument(
        "--since",
        default=None,
        metavar="DURATION|ISO8601",
        help="created (see --time) at or after: a duration ago (1h, 7d, 90m) or an ISO 8601 "
        "time with its offset (Z for UTC)",
    )
    g.add_argument(
        "--until", default=None, metavar="DURATION|ISO8601", help="created (see --time) before"
    )
    g.add_argument(
        "--time",
        dest="time_field",
        choices=("created", "started", "finished"),
        default="created",
        help="the time --since and --until apply to (default created)",
    )
    g.add_argument("--unique-key", dest="key", default=None, metavar="KEY", help="the unique key")
    g.add_argument(
        "--id", dest="ids", type=int, nargs="+", action="extend", default=None, metavar="ID",
        help="these job ids",
    )
    return f


def _bulk_flags(p: argparse.ArgumentParser, verb: str) -> None:
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


# -- plumbing ------------------------------------------------------------------------------


def _url(args: argparse.Namespace) -> str:
    return str(
        getattr(args, "db", None)
        or args.db_global
        or os.environ.get("READYQ_DATABASE_URL")
        or DEFAULT_DB
    )


def _prefix(args: argparse.Namespace) -> str:
    from readyq.schema import DEFAULT_PREFIX

    return str(getattr(args, "prefix", None) or args.prefix_global or DEFAULT_PREFIX)


def _parse_url(url: str) -> Any:
    import sqlalchemy as sa

    try:
        return sa.make_url(url)
    except sa.exc.ArgumentError:
        raise CLIError(
            f"invalid database URL {url!r}: expected e.g. sqlite:///jobs.db or "
            "postgresql+psycopg://user@host/db",
            code=2,
        ) from None


def _open(args: argparse.Namespace, *, create: bool = False) -> Any:
    """The Queue for --db/--prefix; refuses a missing SQLite file unless ``create``."""
    from readyq.dialects import dialect_class
    from readyq.queue import Queue

    url = _parse_url(_url(args))
    path = dialect_class(url.get_backend_name()).database_file(url)
    if not create and path is not None and not os.path.exists(path):
        raise CLIError(
            f"no SQLite database at {path!r}: create it with `readyq migrate "
            f"--db {url.render_as_string(hide_password=True)}`"
        )
    try:
        return Queue(url, prefix=_prefix(args))
    except ImportError as exc:
        raise CLIError(f"cannot load the driver for {url.drivername!r}: {exc}", code=2) from None


@functools.cache
def _console_class() -> Any:
    from rich.console import Console

    class PipeConsole(Console):
        """A rich Console that lets a closed pipe reach main(): rich itself would exit
        with status 1, and every command gets the same quiet exit there instead."""

        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

        def render_str(self, text: str, **kwargs: Any) -> Any:
            # Every plain string (a cell, a title) is shown as text: no markup, and no
            # control character reaches the terminal.
            return super().render_str(printable(text), **kwargs)

    return PipeConsole


def _console(stderr: bool = False) -> Any:
    return _console_class()(stderr=stderr, highlight=False, markup=False, emoji=False)


def _say(text: str, **kwargs: Any) -> None:
    """``print`` for a line that may hold stored text (a type, a state, an error)."""
    print(printable(text), **kwargs)


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


def _text(value: object, style: str = "") -> Any:
    from rich.text import Text

    return Text("" if value is None else printable(str(value)), style=style)


def _state(state: str) -> Any:
    return _text(state, STATE_STYLES.get(state, ""))


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = max(0.0, seconds)
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m {int(s % 60):02d}s"
    if s < 86400:
        return f"{int(s // 3600)}h {int(s % 3600 // 60):02d}m"
    return f"{int(s // 86400)}d {int(s % 86400 // 3600):02d}h"


def _when(epoch: float | None, now: float) -> str:
    from readyq.admin import iso

    if epoch is None:
        return "-"
    delta = now - epoch
    rel = f"{_ago(delta)} ago" if delta >= 0 else f"in {_ago(-delta)}"
    return f"{iso(epoch)} ({rel})"


# Width of the progress bars of ``show``, ``jobs`` and ``top``, in characters.
BAR_WIDTH = 20


def _bar(fraction: float | None, width: int = BAR_WIDTH) -> str:
    """A bar of ``width`` characters filled to ``fraction`` (blank without one)."""
    if fraction is None:
        return ""
    full = int(fraction * width)
    return "█" * full + "░" * (width - full)


def _progress_cell(p: Any, *, width: int = 10) -> Any:
    """A job's progress in one cell: a short bar and ``42%``, or the count reported."""
    from readyq.reports import progress_text

    bar = _bar(p.fraction, width)
    return _text(f"{bar} {progress_text(p)}" if bar else progress_text(p), "cyan")


def _one_line(text: str | None, limit: int) -> str:
    """User text on one line (newlines and tabs as spaces), cut to ``limit`` characters."""
    if not text:
        return ""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


# -- commands --------------------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace) -> int:
    from readyq.demo import foreign_jobs, run_demo

    if args.workers < 1 or args.cap < 1 or args.chunks < 4:
        raise CLIError("--workers and --cap must be at least 1, --chunks at least 4", code=2)
    url = str(
        getattr(args, "db", None)
        or args.db_global
        or os.environ.get("READYQ_DATABASE_URL")
        or DEMO_DB
    )
    prefix = str(getattr(args, "prefix", None) or args.prefix_global or DEMO_PREFIX)
    _parse_url(url)
    found = foreign_jobs(url, prefix)
    if found:
        # The demo starts by dropping its tables: never those of an application.
        raise CLIError(
            f"the tables with prefix {prefix} hold {found} job(s) that the demo did not "
            "make; the demo drops its tables first, so give it another --prefix (default "
            f"{DEMO_PREFIX}) or another --db"
        )
    report = run_demo(
        url, prefix=prefix, workers=args.workers, cap=args.cap, chunks=args.chunks,
        console=_console(),
    )
    return 0 if report.ok else 1


def cmd_completion(args: argparse.Namespace) -> int:
    from argcomplete.shell_integration import shellcode

    sys.stdout.write(shellcode(["readyq"], shell=args.shell))
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from alembic.util.exc import CommandError

    from readyq import admin

    url = _parse_url(_url(args))
    prefix = _prefix(args)
    try:
        if args.sql:
            sys.stdout.write(admin.migration_sql(url, prefix, args.revision))
            return 0
        queue = _open(args, create=True)
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
        _print_json(
            {"prefix": prefix, "previous": before, "revision": after, "stamped": bool(args.stamp)}
        )
    elif before == after:
        _say(f"readyq tables (prefix {prefix}) already at revision {after}")
    else:
        verb = "stamped" if args.stamp else "migrated"
        _say(f"readyq tables (prefix {prefix}) {verb}: {before or 'none'} -> {after}")
    return 0


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
    # The app's queue belongs to the app: used, never closed here.
    owned = args.app is None
    if not owned:
        queue = _load_app(args.app)
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
            _say(
                "readyq: note: --db is ignored with --app; the app's queue uses its own URL",
                file=sys.stderr,
            )
    else:
        queue = _open(args)
    created = True
    try:
        if args.container:
            job_id = queue.enqueue_container(
                args.type,
                payload,
                group=args.group,
                weight=args.weight,
                depends_on=args.after,
                parent=args.parent,
            )
        else:
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
                job_id, created = queue.enqueue_unique(
                    args.type, payload, unique_key=args.unique_key, **options
                )
            else:
                job_id = queue.enqueue(args.type, payload, **options)
        if args.json:
            data = {"id": job_id, "state": queue.get(job_id).state.value}
            if args.unique_key is not None:
                data["created"] = created
            _print_json(data)
        else:
            _say(str(job_id))
    finally:
        if owned:
            queue.close()
    return 0


def _uses(items: list[str]) -> dict[str, int]:
    from readyq.resources import parse_cli_uses

    return parse_cli_uses(items)


def _load_app(spec: str) -> Any:
    from readyq.queue import Queue

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CLIError(
            f"--app {spec!r} must look like module:attribute, e.g. myapp.jobs:queue", code=2
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise CLIError(
                f"--app {spec}: no module named {missing!r} (looked in the current "
                "directory and sys.path)",
                code=2,
            ) from None
        raise
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise CLIError(
                f"--app {spec}: {module_name!r} has no attribute {attr!r}", code=2
            ) from None
    if not isinstance(obj, Queue) and callable(obj):
        obj = obj()
    if not isinstance(obj, Queue):
        raise CLIError(f"--app {spec} is a {type(obj).__name__}, not a readyq.Queue", code=2)
    return obj


def cmd_worker(args: argparse.Namespace) -> int:
    if args.concurrency < 1:
        raise CLIError("--concurrency must be at least 1", code=2)
    queue = _load_app(args.app)
    if getattr(args, "db", None) or args.db_global:
        _say(
            "readyq: note: --db is ignored by `worker`; the app's queue uses its own URL",
            file=sys.stderr,
        )
    return run_worker(queue, args)


def run_worker(queue: Any, args: argparse.Namespace) -> int:
    """Run a worker of ``queue`` with the flags of :func:`add_worker_flags` (``args``),
    as ``readyq worker`` does: the tables checked, the SQL prepared, SIGTERM and SIGINT
    stopping it gracefully; returns the exit code."""
    from readyq import admin

    if args.concurrency < 1:
        raise CLIError("--concurrency must be at least 1", code=2)
    worker = queue.worker(
        concurrency=args.concurrency,
        lease_ttl=args.lease_ttl,
        heartbeat_interval=args.heartbeat_interval,
        poll_interval=args.poll_interval,
        types=args.types,
        worker_id=args.worker_id,
        max_running=args.max_running,
        shutdown_grace=args.shutdown_grace,
        freeze_gc=args.freeze_gc,
        isolation=args.isolation,
        kill_grace=args.kill_grace,
        max_jobs_per_child=args.max_jobs_per_child,
        max_memory_per_child=None if args.max_memory_per_child is None
        else args.max_memory_per_child * 2**20,
    )
    from readyq.transient import describe, waited_out

    try:
        admin.check_schema(queue)  # connects: missing tables fail here, once
        # Builds and compiles the loop's SQL (a dry run of a cycle, rolled back) before the
        # first claim, and fails here on tables that do not match this readyq.
        worker.prepare()
        database = queue.database
    except Exception as exc:
        # A database that is down (or still starting) is waited for: the worker backs
        # off and starts once it answers; missing tables are reported then.
        if not waited_out(exc, queue.store.connected_dialect):
            raise
        database = queue.store.url.get_backend_name()
        _say(
            f"readyq: note: the database is not reachable yet ({describe(exc)}); the "
            "worker keeps trying",
            file=sys.stderr,
        )
    _say(
        f"readyq worker {worker.worker_id} on {database} (prefix {queue.prefix}): "
        f"types {', '.join(worker.types)}, cap {args.concurrency}"
        + ("" if args.until_idle else "; Ctrl-C to stop"),
        file=sys.stderr,
    )
    code = 0
    try:
        stats = worker.run(until_idle=args.until_idle)
    except KeyboardInterrupt:  # stopped gracefully on Ctrl-C: the stats, then 130
        stats, code = worker.stats, EXIT_INTERRUPTED
    if args.json:
        _print_json({"worker_id": worker.worker_id, **asdict(stats)})
    else:
        _say(
            f"worker {worker.worker_id} stopped: claimed {stats.claimed}, done {stats.done}, "
            f"retried {stats.retried}, failed {stats.failed}, cancelled {stats.cancelled}, "
            f"reclaimed {stats.reclaimed}"
        )
    return code


def render_status(st: Any, database: str, prefix: str, *, max_rows: int | None = None) -> Any:
    """The status as rich renderables: one table of jobs per group and state (with an
    ``all`` row), the oldest runnable job, and the workers holding leases. ``max_rows``
    caps the group and worker rows (for ``top``)."""
    from rich.console import Group
    from rich.table import Table

    from readyq.admin import STATE_ORDER, iso

    parts: list[Any] = [
        _text(
            f"readyq on {database} (prefix {prefix}) at {iso(st.now)} (database clock): "
            f"{st.total} jobs, {st.in_flight} in flight, {st.runnable} runnable now"
            + (f", {st.deferred} ready but deferred" if st.deferred else "")
            + (f", {len(st.stuck)} stuck" if st.stuck else ""),
            "bold",
        )
    ]
    # Known states in their order, then any other a row holds (written by hand).
    present = [s for s in STATE_ORDER if st.states.get(s)]
    present += sorted(s for s in st.states if s not in STATE_ORDER and st.states[s])
    table = Table(title="Jobs per group and state", title_justify="left")
    table.add_column("group")
    for s in present:
        table.add_column(_state(s), justify="right")
    table.add_column("total", justify="right")
    groups = sorted(st.groups.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
    hidden = 0
    if max_rows is not None and len(groups) > max_rows:
        hidden, groups = len(groups) - max_rows, groups[:max_rows]
    for name, counts in sorted(groups):
        table.add_row(
            _text(name),
            *[_text(counts.get(s, 0) or "") for s in present],
            _text(sum(counts.values())),
        )
    if hidden:
        table.add_row(_text(f"... {hidden} more groups", "bright_black"))
    table.add_section()
    table.add_row(
        _text("all", "bold"),
        *[_text(st.states.get(s, 0), "bold") for s in present],
        _text(st.total, "bold"),
    )
    parts.append(table)
    oldest = st.oldest_ready
    parts.append(
        _text(
            "oldest runnable job: none"
            if oldest is None
            else f"oldest runnable job: #{oldest.id} {oldest.type} (group {oldest.group}), "
            f"waiting {_ago(oldest.age)}"
        )
    )
    if st.workers:
        workers = Table(title="Workers holding leases", title_justify="left")
        for col, just in (
            ("worker", "left"),
            ("leased", "right"),
            ("running", "right"),
            ("last heartbeat", "right"),
            ("lease", "left"),
        ):
            workers.add_column(col, justify=just)  # type: ignore[arg-type]
        shown = st.workers if max_rows is None else st.workers[:max_rows]
        for w in shown:
            workers.add_row(
                _text(w.owner),
                _text(w.leased),
                _text(w.running),
                _text(f"{_ago(w.heartbeat_age)} ago"),
                _text("expired", "bold red") if w.expired else _text("live", "green"),
            )
        if len(shown) < len(st.workers):
            workers.add_row(_text(f"... {len(st.workers) - len(shown)} more", "bright_black"))
        parts.append(workers)
    else:
        parts.append(_text("workers holding leases: none"))
    if st.resources:
        res = Table(title="Resources", title_justify="left")
        for col in ("resource", "capacity", "in use", "waiting jobs", "units wanted",
                    "largest", "reserved"):
            res.add_column(col, justify="left" if col == "resource" else "right")
        for r in st.resources:
            cap = "unknown" if r.capacity is None else str(r.capacity)
            full = r.capacity is not None and r.in_use >= r.capacity
            res.add_row(
                _text(r.name), _text(cap), _text(r.in_use, "bold" if full else ""),
                _text(r.waiting or ""), _text(r.wanted or ""), _text(r.largest or ""),
                _text(r.reserved or ""),
            )
        parts.append(res)
        for r in st.resources:
            if r.waiting and (r.capacity is None or r.in_use + 1 > r.capacity):
                parts.append(
                    _text(
                        f"{r.waiting} runnable jobs wait for resource {r.name!r}: "
                        + ("no worker has recorded its capacity yet (start a worker "
                           "that defines it)" if r.capacity is None
                           else f"{r.in_use} of {r.capacity} units in use"),
                        "yellow",
                    )
                )
    if st.pauses:
        from readyq.reports import pause_line

        for pause in st.pauses:
            parts.append(_text(pause_line(pause), "bold yellow"))
    for u in st.unclaimed_types:
        parts.append(
            _text(
                f"no worker seems to run job type {u.type!r}: {u.runnable} runnable, the "
                f"oldest waiting {_ago(u.oldest_age)}, none in flight (start a worker "
                "with a handler for it)",
                "bold yellow",
            )
        )
    if st.stuck:
        stuck = Table(
            title="Stuck: these cannot progress on their own", title_justify="left",
            title_style="bold yellow",
        )
        for col in ("id", "type", "state", "why", "what to do"):
            stuck.add_column(col, justify="right" if col == "id" else "left")
        shown = st.stuck if max_rows is None else st.stuck[:max_rows]
        for j in shown:
            stuck.add_row(
                _text(j.id), _text(j.type), _state(j.state), _text(j.detail), _text(j.hint)
            )
        if len(shown) < len(st.stuck):
            stuck.add_row(_text(f"... {len(st.stuck) - len(shown)} more", "bright_black"))
        parts.append(stuck)
    return Group(*parts)


def cmd_status(args: argparse.Namespace) -> int:
    from readyq import admin

    queue = _open(args)
    try:
        st = admin.status(
            queue, unclaimed_after=args.unclaimed_after, empty_after=args.empty_after
        )
        if args.json:
            _print_json({"database": queue.database, "prefix": queue.prefix, **st.to_json()})
        else:
            _console().print(render_status(st, queue.database, queue.prefix))
    finally:
        queue.close()
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from rich.table import Table

    from readyq import admin

    queue = _open(args)
    try:
        detail = admin.show(queue, args.id)
    finally:
        queue.close()
    if args.json:
        _print_json(detail.to_json())
        return 0
    f, now = detail.fields, detail.now
    console = _console()
    table = Table(title=f"Job {f['id']}", title_justify="left", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    kind = " (container)" if f["is_container"] else ""
    table.add_row("type", _text(f"{f['type']}{kind}"))
    table.add_row("state", _state(f["state"]))
    table.add_row("group", _text(f"{f['group']} (weight {f['weight']})"))
    table.add_row("priority", _text(f["priority"]))
    # The rule for every handler setting: a value given at enqueue wins; otherwise the
    # registration of the handler that runs the job decides, when it runs.
    most = f["max_attempts"]
    table.add_row(
        "attempts",
        _text(f"{f['attempts']} of {most}" if most is not None
              else f"{f['attempts']} (the handler's max_attempts decides when it runs)"),
    )
    if not f["is_container"]:
        table.add_row(
            "timeout",
            _text(f"{f['timeout']:g}s (given at enqueue)" if f["timeout"] is not None
                  else "the handler's, if any"),
        )
    if f["is_container"]:
        table.add_row(
            "children", _text(", ".join(f"{k} {v}" for k, v in detail.children.items()) or "none")
        )
    if detail.parent is not None:
        p = detail.parent
        table.add_row("container", _text(f"#{p.id} {p.type} [{p.state}]"))
    for name in ("created_at", "run_after", "started_at", "finished_at", "updated_at"):
        if f[name] is not None:
            table.add_row(name, _text(_when(f[name], now)))
    if f["state"] in ("leased", "running"):
        table.add_row(
            "lease",
            _text(
                f"{f['lease_owner']} token {f['lease_token']}, "
                f"expires {_when(f['lease_expires'], now)}"
            ),
        )
        table.add_row("heartbeat", _text(_when(f["heartbeat_at"], now)))
        if f["cancel_requested"]:
            table.add_row("cancel", _text("requested", "bold red"))
    if f["cancelled_by"]:
        table.add_row("cancelled by", _text(f"an operator ({f['cancelled_by']})"))
    if f["spawned_by"] is not None:
        table.add_row("spawned by", _text(f"#{f['spawned_by']} (its handler added this job)"))
    if not f["is_container"]:
        uses = f["uses"]
        table.add_row(
            "uses",
            _text(
                "the handler's, if any" if uses is None
                else ", ".join(f"{k}={v}" for k, v in sorted(uses.items())) + " (given at enqueue)"
            ),
        )
    for line in detail.waits_for:
        table.add_row("waits for", _text(line, "yellow"))
    table.add_row("args", _text(_short_json(f["args"])))
    if f["result"] is not None:
        table.add_row("result", _text(_short_json(f["result"])))
    _memory_rows(table, detail)
    console.print(table)
    for title, refs, states in (
        ("Depends on", detail.dependencies, detail.dependency_states),
        ("Needed by", detail.dependents, detail.dependent_states),
    ):
        if not refs:
            console.print(_text(f"{title}: none"))
            continue
        total = sum(states.values())
        t = Table(title=f"{title}: {total}" if total > SHOW_EDGES else title,
                  title_justify="left")
        t.add_column("id", justify="right")
        t.add_column("type")
        t.add_column("state")
        for r in refs[:SHOW_EDGES]:
            t.add_row(
                _text(r.id),
                _text(r.type + (" (container)" if r.is_container else "")),
                _state(r.state),
            )
        if total > SHOW_EDGES:
            per_state = ", ".join(f"{n} {s}" for s, n in states.items())
            t.add_row(_text("..."), _text(f"{total - SHOW_EDGES} more; all: {per_state}",
                                          "bright_black"), _text(""))
        console.print(t)
    if detail.attempts:
        t = Table(title="Attempts", title_justify="left")
        for name in ("#", "worker", "started", "ended", "outcome", "error"):
            t.add_column(name, justify="right" if name == "#" else "left")
        for a in detail.attempts:
            t.add_row(
                _text(a.attempt), _text(a.worker or "-"),
                _text(_when(a.started_at, now)), _text(_when(a.ended_at, now)),
                _state(a.outcome) if a.outcome in ("done", "running") else _text(a.outcome),
                _text(_error_line(a.error)),
            )
        console.print(t)
    if detail.steps:
        total = detail.step_count
        more = total - len(detail.steps)
        t = Table(title=f"Steps: {total}" + (f", the first {len(detail.steps)} by name"
                                              if more else ""), title_justify="left")
        for name in ("step", "stored", "bytes", "attempt"):
            t.add_column(name, justify="right" if name in ("bytes", "attempt") else "left")
        for st in detail.steps:
            t.add_row(_text(st.name), _text(_when(st.stored_at, now)),
                      _text(f"{st.size:,}"), _text(st.attempt))
        if more:
            t.add_row(_text(f"... {more} more", "bright_black"), _text(""), _text(""), _text(""))
        console.print(t)
    if f["error"]:
        console.print(_text("Error:", "bold red"))
        console.print(_text(f["error"].rstrip()))
    return 0


def _memory_rows(table: Any, detail: Any) -> None:
    """The rows of ``readyq show`` for what the job's attempts kept: its progress (a
    bar, the count, the message) and its saved state (cut short)."""
    from readyq.reports import progress_text

    now, p = detail.now, detail.progress
    if p is not None:
        bar = _bar(p.fraction)
        table.add_row("progress", _text(
            (f"{bar} " if bar else "") + progress_text(p, long=True)
            + ("" if p.updated_at is None
               else f", reported {_when(p.updated_at.timestamp(), now)}"), "cyan"))
        if p.message:
            table.add_row("message", _text(_one_line(p.message, 200)))
    saved = detail.saved_state
    if saved is not None:
        table.add_row("saved state", _text(_short_json(saved.value, 300)))
        table.add_row("state saved", _text(
            f"by attempt {saved.attempt if saved.attempt is not None else '-'}, "
            f"{_when(saved.saved_at, now)}, {saved.size:,} bytes"))


def _short_json(value: Any, limit: int = 500) -> str:
    from readyq.payload import NotJSON

    if isinstance(value, NotJSON):  # a row written by hand: shown as stored
        text = f"{value} (stored, not JSON)"
    else:
        text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 20] + f"... ({len(text)} chars)"


def render_tree(g: Any, width: int = 80) -> Any:
    """The graph as a rich tree, as deep as ``width`` columns leave room for a label
    (each level indents by four); deeper branches end with the command that shows them."""
    from rich.tree import Tree

    max_depth = max(2, (width - 36) // 4)

    def label(i: int, relation: str = "") -> Any:
        n = g.nodes[i]
        t = _text(relation, "italic bright_black")
        t.append(printable(f"#{n.id} {n.type}"), style="bold" if i == g.root else "")
        if n.is_container:
            t.append(" (container)", style="magenta")
        if n.spawned_by is not None:
            t.append(f" (spawned by #{n.spawned_by})", style="cyan")
        t.append(" ")
        t.append(printable(f"[{n.state}]"), style=STATE_STYLES.get(n.state, ""))
        t.append(printable(f"  {n.group}"), style="bright_black")
        return t

    def grow(
        branch: Any, i: int, up: bool, seen: set[int], via_container: int | None = None,
        depth: int = 1,
    ) -> None:
        if up:
            members = set(g.upstream)
            # A child repeats its container's dependencies (it inherits them): shown once,
            # under the container.
            inherited = set(g.dependencies_of(via_container)) if via_container else set()
            links = [(d, "") for d in g.dependencies_of(i) if d in members and d not in inherited]
            kids = [c for c in g.children_of(i) if c in members]
        else:
            members = set(g.downstream)
            outs = [d for d in g.dependents_of(i) if d in members]
            # Children of a container that is itself a dependent: shown under it.
            inner = {d for d in outs if g.container_of(d) in outs}
            links = [(d, "") for d in outs if d not in inner]
            parent = g.container_of(i)
            if parent is not None and parent in members and parent != via_container:
                links.append((parent, "in container "))
            kids = [c for c in g.children_of(i) if c in members] if g.nodes[i].is_container else []
        shown = kids[:8]
        links += [(c, "contains ") for c in shown]
        if links and depth >= max_depth:
            branch.add(_text(f"... more {'upstream' if up else 'downstream'}: readyq dag {i}",
                             "bright_black"))
            return
        for j, relation in links:
            if j in seen:
                node = label(j, relation)
                node.append("  (shown above)", style="bright_black")
                branch.add(node)
                continue
            seen.add(j)
            grow(
                branch.add(label(j, relation)), j, up, seen,
                i if relation == "contains " else None, depth + 1,
            )
        if len(kids) > len(shown):
            rest: dict[str, int] = {}
            for c in kids[len(shown) :]:
                rest[g.nodes[c].state] = rest.get(g.nodes[c].state, 0) + 1
            summary = ", ".join(f"{k} {v}" for k, v in sorted(rest.items()))
            branch.add(
                _text(f"... and {len(kids) - len(shown)} more children ({summary})", "bright_black")
            )

    tree = Tree(label(g.root))
    if g.upstream:
        grow(tree.add(_text("needs (upstream)", "bold")), g.root, True, {g.root})
    if g.downstream:
        grow(tree.add(_text("needed by (downstream)", "bold")), g.root, False, {g.root})
    if not g.upstream and not g.downstream:
        tree.add(_text("no dependencies, dependents, container or children", "bright_black"))
    if g.truncated:
        tree.add(_text(f"(graph cut at {len(g.nodes)} jobs: raise --max-nodes)", "yellow"))
    return tree


def cmd_dag(args: argparse.Namespace) -> int:
    from readyq import admin

    if not 1 <= args.max_nodes <= admin.MAX_DAG_NODES:
        raise CLIError(f"--max-nodes must be from 1 to {admin.MAX_DAG_NODES}", code=2)
    queue = _open(args)
    try:
        g = admin.dag(queue, args.id, max_nodes=args.max_nodes)
    finally:
        queue.close()
    if args.json:
        _print_json(g.to_json())
    elif args.format == "mermaid":
        sys.stdout.write(admin.to_mermaid(g))
    elif args.format == "dot":
        sys.stdout.write(admin.to_dot(g))
    else:
        console = _console()
        console.print(render_tree(g, console.width))
    return 0


def cmd_retry(args: argparse.Namespace) -> int:
    from readyq import admin

    if args.extra_attempts < 1:
        raise CLIError("--extra-attempts must be at least 1", code=2)
    if _filter_mode(args, "retry"):
        if args.fresh:
            raise CLIError("--fresh retries one job, by its ID: not with a filter", code=2)
        return _bulk_command(args, "retry")
    queue = _open(args)
    try:
        result = admin.retry(queue, args.id, extra_attempts=args.extra_attempts,
                             fresh=args.fresh)
    finally:
        queue.close()
    if args.json:
        _print_json(result.to_json())
        return 0
    lines = [f"job {i} -> {state}" for i, state in result.revived]
    if result.reopened:
        lines.append("containers reopened: " + ", ".join(str(i) for i in result.reopened))
    _say(f"retried job {args.id}: {len(result.revived)} job(s) revived")
    for line in lines:
        _say(f"  {line}")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from readyq import admin

    if _filter_mode(args, "cancel"):
        return _bulk_command(args, "cancel")
    queue = _open(args)
    try:
        result = admin.cancel(queue, args.id, by="cli")
    finally:
        queue.close()
    if args.json:
        _print_json(result.to_json())
    elif result.requested:
        _say(
            f"job {args.id} is {result.after}: cancel requested; the handler sees "
            "job.cancelled at its next heartbeat"
        )
    elif result.after == "active":  # a container: it ends when its children have
        _say(
            f"container {args.id}: {result.ended} waiting or ready job(s) cancelled, cancel "
            f"requested for {result.stopping} running job(s); it ends cancelled once they "
            "have stopped"
        )
    else:
        _say(f"job {args.id} cancelled ({result.before} -> {result.after})")
    return 0


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
        queue = _open(args)
        try:
            queue.pause_schedule(schedule)
        finally:
            queue.close()
        _say(f"schedule {schedule} paused")
        return 0
    queue = _open(args)
    try:
        queue.pause(group=args.group, type=args.type, until=args.until)
        (shown,) = [
            p for p in queue.pauses() if (p.group, p.type) == (args.group, args.type)
        ] or [None]
    finally:
        queue.close()
    from readyq.reports import pause_line

    _say(pause_line(shown) if shown is not None else "paused (the pause has ended already)")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    schedule = _schedule_only(args, "group", "type")
    if schedule is not None:
        queue = _open(args)
        try:
            was_paused = queue.resume_schedule(schedule)
        finally:
            queue.close()
        if not was_paused:
            raise CLIError(f"schedule {schedule} is not paused")
        _say(f"schedule {schedule} resumed")
        return 0
    queue = _open(args)
    try:
        resumed = queue.resume(group=args.group, type=args.type)
    finally:
        queue.close()
    if not resumed:
        raise CLIError("no such pause stands")
    _say("resumed")
    return 0


def cmd_schedules(args: argparse.Namespace) -> int:
    from rich.table import Table

    from readyq.reports import schedule_json

    queue = _open(args)
    try:
        if args.forget is not None:
            if not queue.forget_schedule(args.forget):
                raise CLIError(f"no schedule named {args.forget!r} is stored")
            _say(f"schedule {args.forget} forgotten")
            return 0
        schedules = queue.schedules()
    finally:
        queue.close()
    if args.json:
        _print_json([schedule_json(s) for s in schedules])
        return 0
    if not schedules:
        _say("no schedules (a schedule is stored by the first worker that fires it)")
        return 0
    table = Table(title="Schedules", title_justify="left")
    for col in ("schedule", "definition", "last fire (UTC)", "next fire (UTC)", "state"):
        table.add_column(col)
    for s in schedules:
        last = "-" if s.last_fire is None else s.last_fire.strftime("%Y-%m-%d %H:%M:%S")
        table.add_row(
            _text(s.name), _text(s.definition), _text(last),
            _text(s.next_fire.strftime("%Y-%m-%d %H:%M:%S")),
            _text("paused", "yellow") if s.paused else _text("active"),
        )
    console = _console()
    console.print(table)
    for s in schedules:
        if s.conflict is not None:
            seen = "" if s.conflict_at is None else (
                f" (seen {s.conflict_at.strftime('%Y-%m-%d %H:%M:%S')} UTC)"
            )
            console.print(_text(
                f"schedule {s.name}: a worker defines it differently: {s.conflict}{seen}; "
                "it fires nothing of it (readyq schedules --forget to let a new definition "
                "stand)", "bold yellow",
            ))
    return 0


def cmd_pauses(args: argparse.Namespace) -> int:
    from readyq.reports import pause_json, pause_line

    queue = _open(args)
    try:
        pauses = queue.pauses()
    finally:
        queue.close()
    if args.json:
        _print_json([pause_json(p) for p in pauses])
        return 0
    if not pauses:
        _say("no pauses")
    for p in pauses:
        _say(pause_line(p))
    return 0


def cmd_close(args: argparse.Namespace) -> int:
    queue = _open(args)
    try:
        queue.close_container(args.id)
        state = queue.get(args.id).state.value
    finally:
        queue.close()
    if args.json:
        _print_json({"id": args.id, "state": state})
    else:
        print(f"container {args.id} closed: {state}")
    return 0


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
                console=_console(stderr=True),
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
    queue = _open(args)
    bar = _PruneProgress(enabled=not args.json)
    try:
        result = admin.prune(queue, seconds, batch_size=args.batch_size, progress=bar)
    finally:
        bar.close()
        queue.close()
    if args.json:
        _print_json(result.to_json())
    else:
        kept = (
            f"; kept {result.kept} that remaining jobs still depend on or contain"
            if result.kept
            else ""
        )
        _say(
            f"pruned {result.deleted} job(s) and {result.edges} dependency row(s) finished "
            f"before {admin.iso(result.cutoff)}{kept}"
        )
    return 0


def _prune_dry_run(args: argparse.Namespace, seconds: float) -> int:
    from readyq import admin

    queue = _open(args)
    try:
        result = admin.prune(queue, seconds, dry_run=True)
    finally:
        queue.close()
    if args.json:
        _print_json(result.to_json())
        return 0
    kept = (
        f"; {result.kept} would stay, as remaining jobs depend on them or are inside them"
        if result.kept
        else ""
    )
    _say(
        f"dry run: would prune {result.deleted} job(s) and {result.edges} dependency row(s) "
        f"finished before {admin.iso(result.cutoff)}{kept}; nothing was deleted"
    )
    return 0


# -- listings and bulk actions ---------------------------------------------------------------

FILTER_FLAGS = (
    ("states", "--state"), ("job_type", "--type"), ("group", "--group"),
    ("parent_id", "--parent"), ("since", "--since"), ("until", "--until"),
    ("key", "--unique-key"), ("ids", "--id"),
)


def _time_bound(text: str | None, flag: str) -> Any:
    """A --since/--until value: a duration ago (a timedelta) or an instant."""
    from datetime import timedelta

    from readyq.admin import parse_duration

    if text is None:
        return None
    try:
        return timedelta(seconds=parse_duration(text))
    except ValueError:
        pass
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise CLIError(
            f"{flag} {text!r} is neither a duration (1h, 7d, 90m, 3600) nor an ISO 8601 "
            "time (e.g. 2030-01-31T09:00:00+00:00)",
            code=2,
        ) from None
    if value.tzinfo is None:
        raise CLIError(
            f"{flag} {text!r} has no time zone: add one (2030-01-31T09:00:00+09:00, or Z "
            "for UTC) or give a duration",
            code=2,
        )
    return value


def _given_filters(args: argparse.Namespace) -> list[str]:
    return [flag for dest, flag in FILTER_FLAGS if getattr(args, dest, None) is not None]


def _job_filter(args: argparse.Namespace) -> Any:
    """The JobFilter of the filter options (InvalidFilter for a bad value: status 2)."""
    from readyq.listing import JobFilter

    field = args.time_field
    return JobFilter(
        state=args.states,
        type=args.job_type,
        group=args.group,
        parent=args.parent_id,
        unique_key=args.key,
        id=args.ids,
        **{
            f"{field}_after": _time_bound(args.since, "--since"),
            f"{field}_before": _time_bound(args.until, "--until"),
        },
    )


def _filter_mode(args: argparse.Namespace, verb: str) -> bool:
    """Whether `retry`/`cancel` acts on a filter (or, with --dry-run, on its ID as a
    filter) rather than on one job."""
    given = _given_filters(args)
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


def _describe_filter(criteria: dict[str, Any]) -> str:
    def value(v: Any) -> str:
        if isinstance(v, dict) and "ago_seconds" in v:
            return f"{v['ago_seconds']:g}s ago"
        if isinstance(v, list):
            return ",".join(str(x) for x in v)
        return str(v)

    return " ".join(f"{k}={value(v)}" for k, v in criteria.items()) or "(no filter)"


def _bulk_command(args: argparse.Namespace, action: str) -> int:
    from readyq import admin
    from readyq.listing import CANCEL_STATES, RETRY_STATES, JobFilter

    if args.id is not None:  # `retry ID --dry-run`: that one job, whatever its state
        flt = JobFilter(id=args.id, state=RETRY_STATES if action == "retry" else CANCEL_STATES)
    else:
        flt = _job_filter(args)
    run = admin.retry_many if action == "retry" else admin.cancel_many
    options: dict[str, Any] = (
        {"extra_attempts": args.extra_attempts} if action == "retry" else {"by": "cli"}
    )
    queue = _open(args)
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
                    f"{_describe_filter(preview.filter)}, changing {count} job(s)?",
                    count,
                )
        result = run(queue, flt, **options)
    finally:
        queue.close()
    _print_bulk(result, args.json)
    return 0


def _print_bulk(result: Any, as_json: bool) -> None:
    if as_json:
        _print_json(result.to_json())
        return
    done = {"retry": "retried", "cancel": "cancelled"}[result.action]
    would = {"retry": "would retry", "cancel": "would cancel"}[result.action]
    head = f"dry run: {would}" if result.dry_run else done
    extra = f", {result.requested} running asked to stop" if result.requested else ""
    _say(
        f"{head} {result.changed} job(s){extra} of {result.matched} matching "
        f"{_describe_filter(result.filter)}; {result.skipped} skipped"
        + ("; nothing was changed" if result.dry_run else "")
    )
    for job_id, reason in result.reasons:
        _say(f"  skipped job {job_id}: {reason}")
    if result.skipped > len(result.reasons):
        _say(f"  ... and {result.skipped - len(result.reasons)} more skipped")


def _error_line(text: str | None, limit: int = 60) -> str:
    """The last line of an error (a traceback's ends with the exception), cut short."""
    if not text:
        return ""
    line = text.strip().splitlines()[-1] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


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

    flt = _job_filter(args)
    queue = _open(args)
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
        _print_json({**page.to_json(), "paused_ids": paused,
                     "pauses": [pause_json(p) for p in pauses]})
        return 0
    console = _console()
    table = Table(
        title=f"{len(page.jobs)} job(s) matching {_describe_filter(page.filter)}, "
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
        progress = [_progress_cell(p) if p is not None else _text("")] if moving else []
        table.add_row(
            _text(j.id),
            _text(j.type + (" (container)" if j.is_container else "")),
            _text(f"{j.state.value} (paused)", "yellow")
            if j.state.value == "ready" and pauses_of(pauses, j.group, j.type)
            else _state(j.state.value),
            _text(j.group),
            _text(_attempts_cell(j)),
            *progress,
            _text("-" if created is None else f"{_ago(created)} ago"),
            _text("-" if finished is None else f"{_ago(finished)} ago"),
            _text(_error_line(j.error)),
        )
    console.print(table)
    if page.next_cursor is not None:
        _say(f"next page: --cursor {page.next_cursor}")
    return 0


def served_hosts(host: str, given: Sequence[str]) -> tuple[bool, list[str]]:
    """Whether ``--host`` is a loopback address, and the host names the dashboard is
    served under besides the loopback names (which it always answers): the ``--host``
    address unless it is loopback or every address (0.0.0.0, ::), and the
    ``--allowed-host`` names. Raises CLIError for a name that is not a host name."""
    import ipaddress

    from readyq.web.security import host_pattern

    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        address = None
    loopback = host == "localhost" or (address is not None and address.is_loopback)
    names = list(given)
    if not loopback and not (address is not None and address.is_unspecified):
        names.append(host)
    try:
        return loopback, [host_pattern(name) for name in names]
    except ValueError as exc:
        raise CLIError(f"--allowed-host: {exc}", code=2) from None


def cmd_dashboard(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from readyq.web import create_app
        from readyq.web.app import env_credentials
        from readyq.web.security import BasicAuth
    except ImportError as exc:
        raise CLIError(
            f"the dashboard needs the web extra: pip install 'readyq[web]' ({exc})", code=2
        ) from None
    base = args.base_path.rstrip("/")
    if base and (not base.startswith("/") or any(c in base for c in "?#\\ ")):
        raise CLIError(f"--base-path must be a path like /jobs, not {args.base_path!r}", code=2)
    if not 0 < args.port < 65536:
        raise CLIError("--port must be from 1 to 65535", code=2)
    if args.cap is not None and args.cap < 1:
        raise CLIError("--cap must be at least 1", code=2)
    try:
        credentials = env_credentials()
    except ValueError as exc:
        raise CLIError(str(exc), code=2) from None
    loopback, allowed = served_hosts(args.host, args.allowed_hosts)
    if not loopback and credentials is None:
        raise CLIError(
            f"--host {args.host} would serve the dashboard to the network without a password: "
            "set READYQ_DASHBOARD_USER and READYQ_DASHBOARD_PASSWORD",
            code=2,
        )
    queue = _open(args)
    try:
        _ = queue.database  # connects now: a bad URL or server fails here, not per page
        from starlette.applications import Starlette
        from starlette.routing import Mount

        app: Any = create_app(
            queue, read_only=args.read_only, cap=args.cap,
            secret=os.environ.get("READYQ_DASHBOARD_SECRET"), allowed_hosts=allowed,
        )
        if base:
            app = Starlette(routes=[Mount(base, app=app)])
        if credentials is not None:
            app = BasicAuth(app, *credentials)
        where = f"http://{args.host}:{args.port}{base}/"
        _say(
            f"readyq dashboard on {queue.database} (prefix {queue.prefix}) at {where}"
            + (" (read-only)" if args.read_only else "")
            + ("" if credentials else "; no password: local use only")
            + "; Ctrl-C to stop",
            file=sys.stderr,
        )
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    finally:
        queue.close()
    return 0


def render_progress(moving: Sequence[Any], max_rows: int) -> Any:
    """The jobs in flight that report progress (``top``), at most ``max_rows`` of them."""
    from rich.table import Table

    table = Table(title="Jobs in flight reporting progress", title_justify="left")
    for name in ("id", "type", "worker", "progress", "message"):
        table.add_column(name, justify="right" if name == "id" else "left")
    for r in moving[:max_rows]:
        table.add_row(_text(r.id), _text(r.type), _text(r.worker or "-"),
                      _progress_cell(r.progress), _text(_one_line(r.progress.message, 60)))
    if len(moving) > max_rows:
        table.add_row(_text("..."), _text("more", "bright_black"))
    return table


def cmd_top(args: argparse.Namespace) -> int:
    import sqlalchemy as sa
    from rich.live import Live

    from readyq import admin

    if args.interval <= 0:
        raise CLIError("--interval must be positive", code=2)
    queue = _open(args)
    console = _console()
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
                            _text(f"database error, retrying: {_db_message(exc)}", "bold red"),
                            refresh=True,
                        )
            except KeyboardInterrupt:
                pass
    finally:
        queue.close()
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "demo": cmd_demo,
    "migrate": cmd_migrate,
    "enqueue": cmd_enqueue,
    "worker": cmd_worker,
    "status": cmd_status,
    "show": cmd_show,
    "jobs": cmd_jobs,
    "dag": cmd_dag,
    "retry": cmd_retry,
    "cancel": cmd_cancel,
    "pause": cmd_pause,
    "resume": cmd_resume,
    "pauses": cmd_pauses,
    "schedules": cmd_schedules,
    "close": cmd_close,
    "prune": cmd_prune,
    "top": cmd_top,
    "dashboard": cmd_dashboard,
    "completion": cmd_completion,
}


def _db_message(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    lines = [x.strip() for x in str(orig).strip().splitlines() if x.strip()]
    return lines[0] if lines else exc.__class__.__name__


def _run(args: argparse.Namespace) -> int:
    """Run one command; map every expected failure to one line on stderr."""
    import sqlalchemy as sa

    from readyq import admin
    from readyq.errors import (
        ConfigurationError,
        InvalidArgument,
        InvalidFilter,
        InvalidJob,
        JobNotFound,
        SchemaNotFound,
    )

    try:
        return COMMANDS[args.command](args)
    except CLIError as exc:
        message, code = str(exc), exc.code
    except SchemaNotFound as exc:
        message, code = (
            str(exc).replace(
                "call Queue.create_schema() first",
                "run `readyq migrate` (or call Queue.create_schema()) first",
            ),
            1,
        )
    except (ConfigurationError, InvalidJob, InvalidFilter, InvalidArgument) as exc:
        message, code = str(exc), 2
    except (JobNotFound, admin.AdminError) as exc:
        message, code = str(exc).strip("'\""), 1
    except ReadyqError as exc:
        message, code = str(exc), 1
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as exc:
        message, code = f"invalid database URL: {exc}", 2
    except sa.exc.DBAPIError as exc:
        message, code = f"database error ({exc.__class__.__name__}): {_db_message(exc)}", 1
    _say(f"readyq: {message}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``readyq`` with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    try:
        try:
            return _main(argv)
        finally:
            # Output still buffered is written here, so a closed pipe is met inside this
            # handler and not at interpreter exit (where it would print an ignored error).
            sys.stdout.flush()
    except BrokenPipeError:
        # stdout's: the database drivers report a broken socket as their own errors.
        _discard_stdout()
        return EXIT_BROKEN_PIPE


def _discard_stdout() -> None:
    """Point stdout at /dev/null, as the Python docs advise for SIGPIPE: the interpreter
    flushes stdout again on exit, which would fail once more on the closed pipe."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (a test's capture): nothing to flush at exit
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _main(argv: Sequence[str] | None) -> int:
    parser = _parser()
    if "_ARGCOMPLETE" in os.environ:
        # The shell's completion hook (see `readyq completion`): argcomplete writes the
        # candidates for COMP_LINE/COMP_POINT and ends the process. Imported only then, so
        # that other runs do not pay for it.
        import argcomplete

        argcomplete.autocomplete(parser)
    args = parser.parse_args(argv)
    if args.command is None:
        # No command is a usage error, as for argparse's and clap's missing arguments: the
        # help goes to stderr with status 2, so a script that lost its command word does
        # not carry on as if it had run. `readyq --help` prints it on stdout with status 0.
        parser.print_help(sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return _run(args)
    except ReadyqError as exc:
        _say(f"readyq: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
