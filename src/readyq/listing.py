"""What a listing of jobs asks for: a :class:`JobFilter`, an order, a page size and a
cursor. Pure: nothing here reads the database.

A filter is checked once, when it is built: a bad state name, a bad key, an id that is
not a positive int or a time range that ends before it starts raises
:class:`readyq.errors.InvalidFilter`, and nothing is read. A cursor is opaque to its
user: it carries the order, the last id of the page it continues and a digest of the
filter it belongs to, so that it is refused (:class:`readyq.errors.InvalidCursor`) with
another filter or another order.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, fields
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from readyq.errors import InvalidCursor, InvalidFilter
from readyq.model import IN_FLIGHT_STATES, JobState
from readyq.schema import MAX_ID, MAX_SECONDS, is_job_id, key_problem

Order = Literal["newest", "oldest"]
ORDERS: tuple[str, ...] = ("newest", "oldest")
DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
# A filter by id takes at most this many ids (the page is read with one IN list).
MAX_IDS = 1000

STATES = tuple(s.value for s in JobState)
# A time bound: an instant (an aware datetime; a naive one is UTC) or how long ago, by
# the database's clock (a timedelta).
When = datetime | timedelta

TIME_FIELDS = ("created", "started", "finished")


def _states(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    items: Iterable[Any] = (value,) if isinstance(value, (str, JobState)) else value  # type: ignore[assignment]
    try:
        given = list(items)
    except TypeError:
        raise InvalidFilter(
            f"state must be a state name or a list of them, not {value!r}"
        ) from None
    out: list[str] = []
    for s in given:
        name = s.value if isinstance(s, JobState) else s
        if not isinstance(name, str) or name not in STATES:
            raise InvalidFilter(
                f"unknown state {s!r}: the states are {', '.join(STATES)}"
            )
        if name not in out:
            out.append(name)
    return tuple(sorted(out, key=STATES.index))


def _key(value: object, what: str) -> str | None:
    if value is None:
        return None
    problem = key_problem(value)
    if problem is not None:
        raise InvalidFilter(f"{what} {problem}: {value!r}")
    return str(value)


def _job_id(value: object, what: str) -> int:
    if not is_job_id(value):
        raise InvalidFilter(f"{what} must be a job id (an int from 1 to {MAX_ID}), not {value!r}")
    return value


def _ids(value: object) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, int):
        return (_job_id(value, "id"),)
    try:
        given = list(value)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidFilter(f"id must be a job id or a list of them, not {value!r}") from None
    if len(given) > MAX_IDS:
        raise InvalidFilter(f"at most {MAX_IDS} ids at once, not {len(given)}")
    return tuple(sorted({_job_id(v, "id") for v in given}))


def _when(value: object, what: str) -> When | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise InvalidFilter(f"{what} must not be a negative duration, not {value!r}")
        if value.total_seconds() > MAX_SECONDS:
            raise InvalidFilter(f"{what} must be at most a century ago, not {value!r}")
        return value
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
        try:
            aware.astimezone(timezone.utc)
        except OverflowError:  # within a day of year 1 or 9999, not in UTC
            raise InvalidFilter(f"{what} {value.isoformat()} is out of range in UTC") from None
        return aware
    raise InvalidFilter(
        f"{what} must be a datetime (an instant) or a timedelta (that long ago), not {value!r}"
    )


def _later(a: When, b: When) -> bool | None:
    """Whether bound ``a`` is later than ``b``; None when that depends on the clock."""
    if isinstance(a, datetime) and isinstance(b, datetime):
        return a > b
    if isinstance(a, timedelta) and isinstance(b, timedelta):
        return a < b  # less long ago is later
    return None


@dataclass(frozen=True)
class JobFilter:
    """Which jobs a listing or a bulk action is about. Every field is optional; the
    criteria given must all hold.

    Attributes:
        state: one state or several (names or :class:`readyq.JobState`).
        type: the job type.
        group: the fair-share group.
        parent: the id of the container the jobs are inside (its direct children).
        unique_key: the jobs that hold or held this unique key.
        id: one job id or several (at most 1,000).
        created_after, created_before, started_after, started_before, finished_after,
        finished_before: time bounds, each an aware datetime (a naive one is UTC) or a
            timedelta meaning that long ago by the database's clock. ``*_after`` is
            inclusive, ``*_before`` exclusive.

    Raises :class:`readyq.errors.InvalidFilter` for a bad value.

    Example::

        JobFilter(state="failed", type="resize", finished_after=timedelta(hours=1))
    """

    state: tuple[str, ...] = ()
    type: str | None = None
    group: str | None = None
    parent: int | None = None
    unique_key: str | None = None
    id: tuple[int, ...] = ()
    created_after: When | None = None
    created_before: When | None = None
    started_after: When | None = None
    started_before: When | None = None
    finished_after: When | None = None
    finished_before: When | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "state", _states(self.state))
        set_(self, "type", _key(self.type, "type"))
        set_(self, "group", _key(self.group, "group"))
        set_(self, "unique_key", _key(self.unique_key, "unique_key"))
        if self.parent is not None:
            set_(self, "parent", _job_id(self.parent, "parent"))
        set_(self, "id", _ids(self.id))
        for name in TIME_FIELDS:
            after = _when(getattr(self, f"{name}_after"), f"{name}_after")
            before = _when(getattr(self, f"{name}_before"), f"{name}_before")
            set_(self, f"{name}_after", after)
            set_(self, f"{name}_before", before)
            if after is not None and before is not None and _later(after, before):
                raise InvalidFilter(
                    f"{name}_after ({describe_when(after)}) is later than {name}_before "
                    f"({describe_when(before)}): no job can match"
                )

    @property
    def is_empty(self) -> bool:
        """True when no criterion is given: the filter matches every job."""
        return not any(
            getattr(self, f.name) not in (None, ()) for f in fields(self)
        )

    def time_bounds(self) -> list[tuple[str, When | None, When | None]]:
        """(column, after, before) for each time field with a bound."""
        out = []
        for name in TIME_FIELDS:
            after, before = getattr(self, f"{name}_after"), getattr(self, f"{name}_before")
            if after is not None or before is not None:
                out.append((f"{name}_at", after, before))
        return out

    def digest(self) -> str:
        """A short digest of the criteria, which a cursor carries."""
        return hashlib.sha256(repr(self.to_json()).encode()).hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        """The criteria given, as JSON (instants ISO 8601, durations in seconds)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value in (None, ()):
                continue
            if isinstance(value, datetime):
                value = value.astimezone(timezone.utc).isoformat()
            elif isinstance(value, timedelta):
                value = {"ago_seconds": value.total_seconds()}
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out

    def with_states(self, states: Iterable[str]) -> JobFilter:
        """The same filter for ``states`` instead."""
        return _replace(self, state=tuple(states))


def _replace(f: JobFilter, **changes: Any) -> JobFilter:
    values = {x.name: getattr(f, x.name) for x in fields(f)}
    values.update(changes)
    return JobFilter(**values)


def describe_when(value: When) -> str:
    if isinstance(value, timedelta):
        return f"{value.total_seconds():g}s ago"
    return value.isoformat()


def check_order(order: object) -> Order:
    if order not in ORDERS:
        raise InvalidFilter(f"order must be one of {', '.join(ORDERS)}, not {order!r}")
    return order  # type: ignore[return-value]


def check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidFilter(f"limit must be an int from 1 to {MAX_LIMIT}, not {limit!r}")
    return limit


_CURSOR_PREFIX = "c1."


def encode_cursor(filter: JobFilter, order: str, last_id: int) -> str:
    """The cursor of the page after the one whose last row is ``last_id``."""
    body = json.dumps({"o": order, "k": last_id, "f": filter.digest()}, separators=(",", ":"))
    return _CURSOR_PREFIX + base64.urlsafe_b64encode(body.encode()).decode().rstrip("=")


def decode_cursor(cursor: object, filter: JobFilter, order: str) -> int:
    """The id a page continues after. Raises InvalidCursor for a cursor that is not one
    readyq made, or one made for another filter or order."""
    if not isinstance(cursor, str) or not cursor.startswith(_CURSOR_PREFIX) or len(cursor) > 200:
        raise InvalidCursor(f"not a cursor of a job listing: {str(cursor)[:60]!r}")
    text = cursor[len(_CURSOR_PREFIX):]
    try:
        data = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        order_, key, digest = data["o"], data["k"], data["f"]
    except (binascii.Error, ValueError, KeyError, TypeError):
        raise InvalidCursor(f"not a cursor of a job listing: {cursor[:60]!r}") from None
    if not is_job_id(key):
        raise InvalidCursor(f"not a cursor of a job listing: {cursor[:60]!r}")
    if order_ != order:
        raise InvalidCursor(
            f"this cursor continues a listing in {order_!r} order, not {order!r}"
        )
    if digest != filter.digest():
        raise InvalidCursor("this cursor continues a listing with another filter")
    return key


# What each bulk action may change: retry revives jobs that ended badly; cancel stops
# jobs that have not ended.
RETRY_STATES = (JobState.FAILED.value, JobState.CANCELLED.value, JobState.UPSTREAM_FAILED.value)
RETRY_DEFAULT = (JobState.FAILED.value,)
CANCEL_STATES = (
    JobState.WAITING.value, JobState.READY.value, *IN_FLIGHT_STATES, JobState.ACTIVE.value,
)


def bulk_filter(filter: JobFilter, action: str) -> JobFilter:
    """``filter`` narrowed to the states ``action`` (``retry`` or ``cancel``) applies to.

    A bulk action needs at least one criterion (an empty filter would match every job).
    Without a state, retry takes failed jobs and cancel every job that has not ended; a
    state the action cannot change is refused.
    """
    if filter.is_empty:
        raise InvalidFilter(
            f"{action} of many jobs needs a filter (a state, type, group, parent, time "
            "range, unique key or ids): an empty one would match every job"
        )
    allowed, default = (
        (RETRY_STATES, RETRY_DEFAULT) if action == "retry" else (CANCEL_STATES, CANCEL_STATES)
    )
    if not filter.state:
        return filter.with_states(default)
    wrong = [s for s in filter.state if s not in allowed]
    if wrong:
        raise InvalidFilter(
            f"{action} cannot change {', '.join(wrong)} jobs: it applies to "
            f"{', '.join(allowed)}"
        )
    return filter


def filter_of(filter: JobFilter | None, criteria: dict[str, Any]) -> JobFilter:
    """``filter``, or a filter of ``criteria`` (the keyword arguments of ``Queue.jobs``
    that were given); both at once is refused."""
    given = {k: v for k, v in criteria.items() if v is not None}
    if filter is not None:
        if not isinstance(filter, JobFilter):
            raise InvalidFilter(f"filter must be a readyq.JobFilter, not {filter!r}")
        if given:
            raise InvalidFilter(
                f"give a JobFilter or criteria ({', '.join(sorted(given))}), not both"
            )
        return filter
    return JobFilter(**given)
