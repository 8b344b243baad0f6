"""Rate limits: at most ``limit`` starts per ``per`` seconds, counted in the database.

A limit covers the job types whose handler names it, and holds across every worker
process and host on the database. Each attempt counts once, when it is claimed (readyq's
workers start a job in the transaction that claims it).

How it is counted: for each limit, ``<prefix>rate_slots`` holds a ring of ``limit``
slots, each the database-clock instant of one of the latest starts (0 when unused). A
start is allowed while some slot is at least ``per`` seconds old, and takes the oldest
one. So no window of ``per`` seconds ever holds more than ``limit`` starts: an exact
sliding window. (A token bucket refilled at ``limit/per`` would let up to twice the
limit through a window that straddles a burst and the refill after it.)

All of it happens inside the claim transaction, after the claim has locked the gate row,
so claimers on every database take turns; the limit rows are locked too (see
:class:`readyq.store.claim.Budget`). Every instant comes from the database's clock,
never the worker's.

The definition is stored (or updated) by the first claim that uses it; workers that
share a limit should define it alike, or the last claim to run decides.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from datetime import timedelta

from readyq.errors import InvalidRateLimit
from readyq.schema import key_problem

# Every limit keeps one row per allowed start; this bounds the rows one limit may take.
MAX_LIMIT = 100_000


@dataclass(frozen=True)
class RateLimit:
    """At most ``limit`` job starts in any ``per`` seconds, across every worker.

    Args:
        name: the limit's name, shared by every worker on the database (the same rules
            as group keys).
        limit: starts allowed per window, an int from 1 to 100,000.
        per: the window, in seconds (a positive number) or a timedelta.

    Raises:
        InvalidRateLimit: for a bad name, limit or period.

    Example::

        openai = readyq.RateLimit("openai", 100, per=60)

        @queue.handler("summarize", rate_limit=openai)
        def summarize(job): ...
    """

    name: str
    limit: int
    per: float

    def __post_init__(self) -> None:
        problem = key_problem(self.name)
        if problem is not None:
            raise InvalidRateLimit(f"rate limit name {problem}, not {self.name!r}")
        limit = self.limit
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise InvalidRateLimit(
                f"rate limit {self.name!r}: limit must be an int from 1 to {MAX_LIMIT}, "
                f"not {limit!r}"
            )
        per = self.per.total_seconds() if isinstance(self.per, timedelta) else self.per
        if (
            isinstance(per, bool)
            or not isinstance(per, numbers.Real)
            or not math.isfinite(float(per))
            or float(per) <= 0
        ):
            raise InvalidRateLimit(
                f"rate limit {self.name!r}: per must be a positive number of seconds or "
                f"a timedelta, not {self.per!r}"
            )
        object.__setattr__(self, "per", float(per))
