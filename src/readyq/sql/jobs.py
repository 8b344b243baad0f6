"""Statements about jobs and their dependency edges that every database runs alike."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa

from readyq.schema import BULK_COLUMNS, BULK_CONSTANTS, Tables
from readyq.sql.ready import active_containers


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


def empty_containers(t: Tables, before: float, limit: int) -> sa.Select[Any]:
    """Containers that have not ended, with no child open and no dependency unfinished,
    unchanged since ``before`` (epoch seconds), in id order, at most ``limit``: read
    through the index of open containers (migration readyq_0012)."""
    j = t.jobs
    return (
        sa.select(j.c.id, j.c.type, j.c.state, j.c.group_key, j.c.updated_at)
        .where(
            active_containers(t),
            j.c.open_children <= 0,
            j.c.pending_deps <= 0,
            j.c.updated_at <= before,
        )
        .order_by(j.c.id)
        .limit(limit)
    )


def insert_rows(
    t: Tables,
    now: sa.ColumnElement[float],
    returning: bool,
    wake: sa.ColumnElement[Any] | None,
    unset: Sequence[str] = (),
) -> sa.Insert:
    """The INSERT of new job rows from parameters named as ``schema.ROW_KEYS``, the
    columns ``unset`` left out (NULL in every row); with ``returning``, it returns their
    ids in parameter order (and the ``wake`` column, the wake-up that rides on it, if
    any)."""
    j = t.jobs
    stmt = sa.insert(j).values(
        {
            **{c: sa.bindparam(c) for c in BULK_COLUMNS if c not in unset},
            **BULK_CONSTANTS,
            # Explicit casts: PostgreSQL cannot infer the type of a bare parameter.
            "run_after": sa.func.coalesce(
                sa.cast(sa.bindparam("run_after_at"), sa.Double),
                now + sa.cast(sa.bindparam("run_after_delay"), sa.Double),
            ),
            "created_at": now,
            "updated_at": now,
            # 0 for jobs born terminal, NULL otherwise.
            "finished_at": now + sa.cast(sa.bindparam("finished_offset"), sa.Double),
        }
    )
    if not returning:
        return stmt
    returned = (j.c.id,) if wake is None else (j.c.id, wake)
    return stmt.returning(*returned, sort_by_parameter_order=True)
