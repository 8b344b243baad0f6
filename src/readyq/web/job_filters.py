"""The job listing's filter as a query string or a form carries it: reading one into a
JobFilter, and writing the listing's links."""

from __future__ import annotations

import urllib.parse
from datetime import datetime, timedelta, timezone
from typing import Any

from readyq import admin
from readyq.errors import InvalidFilter
from readyq.listing import MAX_LIMIT, JobFilter, check_limit
from readyq.schema import MAX_ID

FILTER_PARAMS = ("state", "type", "group", "parent", "unique_key", "id", "since", "until",
                 "time")


def time_bound(text: str, name: str) -> datetime | timedelta:
    """A ``since``/``until`` value: a duration ago (``1h``, ``90m``, ``3600``) or an ISO
    8601 instant (naive means UTC)."""
    try:
        return timedelta(seconds=admin.parse_duration(text))
    except ValueError:
        pass
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidFilter(
            f"{name} {text!r} is neither a duration (1h, 7d, 90m) nor an ISO 8601 time"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def job_id_param(text: str, name: str) -> int:
    """A job id given as the parameter ``name``; InvalidFilter when it is none."""
    try:
        value = int(text)
    except ValueError:
        raise InvalidFilter(f"{name} must be an integer, not {text[:40]!r}") from None
    if value <= 0 or value > MAX_ID:
        raise InvalidFilter(f"{name} must be a job id (a positive integer), not {value}")
    return value


def filter_from(params: Any) -> JobFilter:
    """The JobFilter of a query string or form (``state`` repeated or comma-separated,
    ``type``, ``group``, ``parent``, ``unique_key``, ``id`` (repeated or comma-separated),
    ``since``/``until`` with ``time`` = created, started or finished). Empty values are
    ignored. Raises InvalidFilter."""

    def one(name: str) -> str | None:
        value = params.get(name)
        return value.strip() or None if isinstance(value, str) else None

    def many(name: str) -> list[str]:
        out: list[str] = []
        for v in params.getlist(name):
            if isinstance(v, str):
                out += [x.strip() for x in v.split(",") if x.strip()]
        return out

    time_field = one("time") or "created"
    if time_field not in ("created", "started", "finished"):
        raise InvalidFilter(f"time must be created, started or finished, not {time_field!r}")
    since, until = one("since"), one("until")
    parent = one("parent")
    bounds: dict[str, Any] = {}
    if since is not None:
        bounds[f"{time_field}_after"] = time_bound(since, "since")
    if until is not None:
        bounds[f"{time_field}_before"] = time_bound(until, "until")
    return JobFilter(
        state=tuple(many("state")),
        type=one("type"),
        group=one("group"),
        parent=None if parent is None else job_id_param(parent, "parent"),
        unique_key=one("unique_key"),
        id=tuple(job_id_param(x, "id") for x in many("id")),
        **bounds,
    )


def filter_query(params: Any, **changes: Any) -> str:
    """The query string of the listing's parameters in ``params``, with ``changes``
    (None removes a parameter)."""
    keep = [*FILTER_PARAMS, "order", "limit"]
    pairs: list[tuple[str, str]] = []
    for name in keep:
        if name in changes:
            continue
        for v in params.getlist(name) if hasattr(params, "getlist") else []:
            if isinstance(v, str) and v.strip():
                pairs.append((name, v))
    for name, value in changes.items():
        if value is None:
            continue
        for v in value if isinstance(value, (list, tuple)) else [value]:
            pairs.append((name, str(v)))
    return urllib.parse.urlencode(pairs)


def page_limit(params: Any) -> int:
    """The listing's page size (``limit``, 50 when absent)."""
    text = params.get("limit") or "50"
    try:
        return check_limit(int(text))
    except ValueError:
        raise InvalidFilter(f"limit must be an integer from 1 to {MAX_LIMIT}") from None


class Params:
    """A read-only multi-dict of strings (parsed form or query), as filter_from reads."""

    def __init__(self, data: dict[str, list[str]]) -> None:
        self.data = {k: list(v) for k, v in data.items()}

    def add(self, key: str, value: str) -> None:
        self.data.setdefault(key, []).append(value)

    def get(self, key: str, default: Any = None) -> Any:
        values = self.data.get(key)
        return values[-1] if values else default

    def getlist(self, key: str) -> list[str]:
        return list(self.data.get(key, []))
