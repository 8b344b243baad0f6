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
so claimers on every database take turns; the limit rows are locked too. The allowance
is read before claiming and spent as jobs are claimed: jobs of types whose limit is
spent are left out of the claim, and types whose limit allows fewer jobs than the claim
asks for are claimed separately, up to their allowance. Every instant comes from the
database's clock, never the worker's.

The definition is stored (or updated) by the first claim that uses it; workers that
share a limit should define it alike, or the last claim to run decides.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from readyq.dialects import ClaimRequest
from readyq.errors import InvalidRateLimit
from readyq.model import ClaimedJob
from readyq.schema import Tables, key_problem

if TYPE_CHECKING:
    from readyq.store import Store

# Every limit keeps one row per allowed start; this bounds the rows one limit may take.
MAX_LIMIT = 100_000
# Slots are created and removed this many rows per statement.
CHUNK = 1000


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


class Budget:
    """What the rate limits still allow within one claim transaction."""

    def __init__(
        self, store: Store, by_type: Mapping[str, RateLimit], left: dict[str, int]
    ) -> None:
        self.store = store
        self.by_type = by_type
        self.limits = {lim.name: lim for lim in by_type.values()}
        # limit name -> starts still allowed now (counted up to what the claim may take)
        self.left = left

    def allowed(self, types: Sequence[str]) -> list[str]:
        """``types`` without those whose limit is spent."""
        return [
            ty for ty in types if (lim := self.by_type.get(ty)) is None or self.left[lim.name] > 0
        ]

    def claim(
        self,
        conn: Connection,
        t: Tables,
        req: ClaimRequest,
        now: sa.ColumnElement[float],
    ) -> list[ClaimedJob]:
        """Claim like :meth:`Dialect.claim`, never past any limit's allowance."""
        assert req.types is not None
        dialect = self.store.dialect
        loose: list[str] = []
        tight: dict[str, list[str]] = {}
        for ty in self.allowed(req.types):
            lim = self.by_type.get(ty)
            # A type whose allowance covers the whole request cannot go past it.
            if lim is None or self.left[lim.name] >= req.limit:
                loose.append(ty)
            else:
                tight.setdefault(lim.name, []).append(ty)
        claimed: list[ClaimedJob] = []
        if loose:
            claimed += self._spend(conn, dialect.claim(conn, t, replace(req, types=loose), now))
        for name, types in sorted(tight.items()):
            n = min(req.limit - len(claimed), self.left[name])
            if n > 0:
                got = dialect.claim(conn, t, replace(req, types=types, limit=n), now)
                claimed += self._spend(conn, got)
        return claimed

    def _spend(self, conn: Connection, claimed: list[ClaimedJob]) -> list[ClaimedJob]:
        """Record the starts of ``claimed`` in their limits' oldest free slots."""
        spent: dict[str, int] = {}
        for c in claimed:
            lim = self.by_type.get(c.type)
            if lim is not None:
                spent[lim.name] = spent.get(lim.name, 0) + 1
        s = self.store.tables.rate_slots
        for name, n in sorted(spent.items()):
            lim = self.limits[name]
            free = conn.execute(
                sa.select(s.c.slot)
                .where(s.c.name == name, s.c.started_at <= self.store.now() - lim.per)
                .order_by(s.c.started_at, s.c.slot)
                .limit(n)
            ).scalars().all()
            if len(free) != n:  # the rows are locked by this transaction: cannot happen
                raise RuntimeError(f"rate limit {name!r}: {n} starts but {len(free)} free slots")
            # Stamped after the claim statement, so never earlier than the jobs' start.
            conn.execute(
                sa.update(s)
                .where(s.c.name == name, s.c.slot.in_(list(free)))
                .values(started_at=self.store.now())
            )
            self.left[name] -= n
        return claimed


def open_budget(
    store: Store,
    conn: Connection,
    by_type: Mapping[str, RateLimit] | None,
    types: Sequence[str] | None,
    want: int,
) -> Budget | None:
    """Lock and read the limits that cover ``types``; None when none does.

    ``want`` is the most jobs the claim may take: allowances are counted up to it, so
    the cost follows the claim, not the size of the limit.
    """
    if not by_type:
        return None
    if types is None:
        raise ValueError("a claim under rate limits must name its job types")
    used = {lim.name: lim for ty, lim in by_type.items() if ty in types}
    if not used:
        return None
    t = store.tables
    rl, s = t.rate_limits, t.rate_slots
    stored = {
        r.name: r
        for r in conn.execute(
            store.dialect.lock_rows(
                sa.select(rl.c.name, rl.c.capacity, rl.c.period)
                .where(rl.c.name.in_(sorted(used)))
                .order_by(rl.c.name)
            )
        )
    }
    left: dict[str, int] = {}
    for name, lim in sorted(used.items()):
        _store_definition(conn, t, lim, stored.get(name))
        free = (
            sa.select(s.c.slot)
            .where(s.c.name == name, s.c.started_at <= store.now() - lim.per)
            .limit(want)
            .subquery()
        )
        left[name] = int(conn.execute(sa.select(sa.func.count()).select_from(free)).scalar_one())
    return Budget(store, {ty: lim for ty, lim in by_type.items() if lim.name in used}, left)


def _store_definition(
    conn: Connection, t: Tables, lim: RateLimit, row: sa.Row[Any] | None
) -> None:
    """Create the limit and its slots, or bring them in line with ``lim``.

    A smaller limit drops the oldest slots and keeps the latest starts, so the starts
    already made still count against the new limit.
    """
    rl, s = t.rate_limits, t.rate_slots
    if row is None:
        conn.execute(sa.insert(rl).values(name=lim.name, capacity=lim.limit, period=lim.per))
        _add_slots(conn, t, lim.name, 0, lim.limit)
        return
    if row.capacity == lim.limit and row.period == lim.per:
        return
    conn.execute(
        sa.update(rl).where(rl.c.name == lim.name).values(capacity=lim.limit, period=lim.per)
    )
    slots = conn.execute(
        sa.select(s.c.slot).where(s.c.name == lim.name).order_by(s.c.started_at, s.c.slot)
    ).scalars().all()
    if len(slots) < lim.limit:
        _add_slots(conn, t, lim.name, max(slots, default=-1) + 1, lim.limit - len(slots))
    extra = list(slots[: len(slots) - lim.limit])
    for i in range(0, len(extra), CHUNK):
        conn.execute(
            sa.delete(s).where(s.c.name == lim.name, s.c.slot.in_(extra[i : i + CHUNK]))
        )


def _add_slots(conn: Connection, t: Tables, name: str, first: int, n: int) -> None:
    for i in range(first, first + n, CHUNK):
        conn.execute(
            sa.insert(t.rate_slots),
            [
                {"name": name, "slot": k, "started_at": 0.0}
                for k in range(i, min(i + CHUNK, first + n))
            ],
        )
