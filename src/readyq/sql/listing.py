"""The WHERE and ORDER BY of a listing of jobs (:class:`readyq.listing.JobFilter`).

A page is read newest (or oldest) first by id, after the cursor's id, through whichever
index the filter's terms lead to. The terms are written in those indexes' own words, as
the claim's are: a state of jobs that ended badly in the terms of the index of such jobs
(its predicate on PostgreSQL and SQLite, the generated column ``bad_end_state`` on MySQL
and MariaDB), one type's ready or waiting jobs in the terms of the indexes of ready and
waiting jobs by type.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from readyq.listing import JobFilter, When
from readyq.model import BAD_ENDS
from readyq.schema import Tables
from readyq.sql.ready import ready_of_type, state_in, waiting_of_types


def instant(value: When, now: float) -> float:
    """A time bound as epoch seconds of the database's clock (``now``)."""
    if isinstance(value, timedelta):
        return now - value.total_seconds()
    assert isinstance(value, datetime)
    return value.timestamp()


def filter_terms(t: Tables, f: JobFilter, now: float) -> list[sa.ColumnElement[bool]]:
    """The terms of ``f``; ``now`` resolves the bounds given as durations."""
    j = t.jobs
    terms: list[sa.ColumnElement[bool]] = []
    type_done = False
    states = f.state
    if states and set(states) <= set(BAD_ENDS):
        if t.traits.partial_indexes:
            # The index's predicate in SQLite's words (readyq.schema.BAD_END_COMPARISONS):
            # SQLite takes a partial index only for a query whose terms contain it, and
            # PostgreSQL's, the same states as an IN list, follows from it.
            terms.append(sa.or_(*(state_in(t, s) for s in BAD_ENDS)))
            if len(states) < len(BAD_ENDS):
                terms.append(state_in(t, *states))
        else:
            column = j.c.bad_end_state
            terms.append(
                sa.or_(*(column == sa.literal_column(f"'{s}'") for s in states))
                if len(states) > 1 else column == sa.literal_column(f"'{states[0]}'")
            )
    elif states == ("ready",) and f.type is not None:
        terms.append(ready_of_type(t, f.type))
        type_done = True
    elif states == ("waiting",) and f.type is not None:
        terms.append(waiting_of_types(t, [f.type]))
        type_done = True
    elif states:
        terms.append(state_in(t, *states))
    if f.type is not None and not type_done:
        terms.append(j.c.type == f.type)
    if f.group is not None:
        terms.append(j.c.group_key == f.group)
    if f.parent is not None:
        terms.append(j.c.parent_id == f.parent)
    if f.unique_key is not None:
        terms.append(j.c.unique_key == f.unique_key)
    if f.id:
        terms.append(j.c.id.in_(f.id))
    for name, after, before in f.time_bounds():
        column = j.c[name]
        if after is not None:
            terms.append(column >= instant(after, now))
        if before is not None:
            terms.append(column < instant(before, now))
    return terms


def page_query(
    t: Tables,
    f: JobFilter,
    now: float,
    *,
    order: str,
    after_id: int | None,
    limit: int,
    columns: tuple[Any, ...] | None = None,
) -> sa.Select[Any]:
    """Up to ``limit`` jobs matching ``f`` after ``after_id`` in ``order``."""
    j = t.jobs
    newest = order == "newest"
    terms = filter_terms(t, f, now)
    if after_id is not None:
        terms.append(j.c.id < after_id if newest else j.c.id > after_id)
    stmt = sa.select(*(columns or (j,))).where(*terms)
    by_id = j.c.id.desc() if newest else j.c.id
    if f.state == ("ready",) and f.type is not None:
        # One type's ready jobs, ordered by the type (the same for every row) and then by
        # id: an order that no index gives, so the page is read from the index of ready
        # jobs by type and sorted (their number, not the table's size, is its cost). Ordered
        # by id alone, a planner that expects many of them may walk the primary key newest
        # first instead, and step over every newer job of the table.
        return stmt.order_by(j.c.type, by_id).limit(limit)
    return stmt.order_by(by_id).limit(limit)


def progress_query(t: Tables, ids: list[int]) -> sa.Select[Any]:
    """The progress of those of ``ids`` that reported any: a read of the checkpoints by
    primary key, apart from the page's query so that its plan stays what its filter
    makes it (a join would weigh on the choice of its index)."""
    c = t.checkpoints
    return sa.select(
        c.c.job_id, c.c.progress_current, c.c.progress_total, c.c.progress_message,
        c.c.progress_at,
    ).where(c.c.job_id.in_(ids), c.c.progress_current.is_not(None))


def needs_clock(f: JobFilter) -> bool:
    """Whether ``f`` has a bound given as a duration (resolved by the database's clock)."""
    return any(
        isinstance(b, timedelta) for _, after, before in f.time_bounds() for b in (after, before)
    )
