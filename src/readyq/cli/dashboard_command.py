"""`readyq dashboard`: serve the web dashboard."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from readyq.cli.connection import open_queue
from readyq.cli.errors import CLIError
from readyq.cli.options import Subparsers, connection_options
from readyq.cli.output import say


def add_dashboard_parser(subparsers: Subparsers) -> None:
    """Add `readyq dashboard` to the subparsers."""
    p = subparsers.add_parser(
        "dashboard",
        parents=[connection_options()],
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
    p.set_defaults(run=cmd_dashboard)


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
    queue = open_queue(args)
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
        say(
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
