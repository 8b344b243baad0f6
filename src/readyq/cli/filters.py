"""The filter options of `jobs`, `retry` and `cancel`, and the JobFilter they make."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from readyq.cli.errors import CLIError


def filter_options() -> argparse.ArgumentParser:
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


def given_filters(args: argparse.Namespace) -> list[str]:
    return [flag for dest, flag in FILTER_FLAGS if getattr(args, dest, None) is not None]


def job_filter(args: argparse.Namespace) -> Any:
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


def describe_filter(criteria: dict[str, Any]) -> str:
    def value(v: Any) -> str:
        if isinstance(v, dict) and "ago_seconds" in v:
            return f"{v['ago_seconds']:g}s ago"
        if isinstance(v, list):
            return ",".join(str(x) for x in v)
        return str(v)

    return " ".join(f"{k}={value(v)}" for k, v in criteria.items()) or "(no filter)"
