"""The options several commands share (--db and --prefix, --json, durations), and the
type of the subparsers object each command adds its parser to."""

from __future__ import annotations

import argparse
from typing import Any, Protocol

from readyq.cli.connection import DEFAULT_DB


class Subparsers(Protocol):
    """What ``ArgumentParser.add_subparsers()`` returns, as the commands use it."""

    def add_parser(self, name: str, *args: Any, **kwargs: Any) -> argparse.ArgumentParser: ...


def duration_arg(text: str) -> float:
    """An argparse type: seconds in ``90``, ``5m``, ``1h30m`` (see admin.parse_duration)."""
    from readyq.admin import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def connection_options() -> argparse.ArgumentParser:
    """The parent parser of --db and --prefix after the command (they may also go before
    it: the root parser's, which these override)."""
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
    return common


def json_option() -> argparse.ArgumentParser:
    """The parent parser of --json."""
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print JSON instead of tables")
    return as_json
