"""Statements about jobs and their dependency edges that every database runs alike."""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

from readyq.schema import Tables


def release_dependents(
    t: Tables,
    now: sa.ColumnElement[float],
    ids_in: Callable[[sa.ColumnElement[int]], sa.ColumnElement[bool]],
) -> sa.Update:
    """Dependents (``ids_in(jobs.id)``) each count ``:r_n`` fewer unfinished upstream
    jobs; a waiting one whose count reaches zero becomes ready."""
    j = t.jobs
    n = sa.bindparam("r_n", type_=sa.Integer)
    # SET order matters on MySQL, which evaluates assignments left to right with
    # already-updated values: decide the state from the old counter.
    return (
        sa.update(j)
        .where(ids_in(j.c.id))
        .ordered_values(
            (
                j.c.state,
                sa.case(
                    (sa.and_(j.c.state == "waiting", j.c.pending_deps <= n), "ready"),
                    else_=j.c.state,
                ),
            ),
            (j.c.pending_deps, j.c.pending_deps - n),
            (j.c.updated_at, now),
        )
    )
