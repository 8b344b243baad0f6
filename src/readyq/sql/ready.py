"""The portable definition of a runnable job, and its fast equivalent.

By definition (the original specification) a job is runnable when it is ``ready``,
every job it depends on is ``done``, it has no children, its ``run_after`` has passed and
it holds no live lease: :func:`runnable_by_definition`. readyq keeps that set small and
indexed instead of re-deriving it on each scan: a job stays ``waiting`` until its counter
of unfinished upstream jobs reaches zero, containers are never ``ready``, and a lease
always moves the job out of ``ready``. So :func:`runnable` only reads the ready index.
Tests check that both give the same rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa

from readyq.schema import Tables


def state_in(t: Tables, *states: str) -> sa.ColumnElement[bool]:
    """``state = 'a'`` or ``state IN ('a', 'b')`` with the values written into the SQL.

    The partial indexes are defined by such predicates. SQLite uses a partial index only
    when the query's terms imply its predicate, which a bound parameter never does, and a
    generic plan on PostgreSQL cannot see a parameter's value either: with the values in
    the text, both always can.
    """
    values: list[sa.ColumnElement[str]] = [sa.literal_column(f"'{s}'") for s in states]
    if len(values) == 1:
        return t.jobs.c.state == values[0]
    return t.jobs.c.state.in_(values)


def runnable(
    t: Tables,
    now: sa.ColumnElement[float],
    *,
    group: str | sa.ColumnElement[str] | None = None,
    types: Sequence[str] | None = None,
    costed: bool = False,
) -> sa.ColumnElement[bool]:
    """WHERE clause of the jobs a worker may claim now (reads the ready index only).

    A worker that defines no resources cannot keep their capacity, so by default the
    jobs that take resources (``uses`` stored) are left out; ``costed`` takes them in,
    for the claims that weigh costs (:mod:`readyq.store.resource_claim`).

    For a worker of one type the terms are those of the index of ready jobs by type
    (:func:`ready_of_type`), which holds each group's rows of that type in claim order;
    for several types, the index by group, filtered by type."""
    j = t.jobs
    only = single_type(types)
    conds: list[sa.ColumnElement[bool]] = [
        state_in(t, "ready") if only is None else ready_of_type(t, only),
        run_after_passed(t, now),
    ]
    if group is not None:
        conds.append(j.c.group_key == group)
    if types is not None and only is None:
        conds.append(values_in(j.c.type, types))
    if not costed:
        conds.append(no_costs(t))
    return sa.and_(*conds)


def no_costs(t: Tables) -> sa.ColumnElement[bool]:
    """The job takes no named resource of its own (its handler's may still apply)."""
    return t.jobs.c.uses.is_(None)


def single_type(types: Sequence[str] | None) -> str | None:
    """The type of a worker that runs exactly one, else None."""
    return types[0] if types is not None and len(types) == 1 else None


# A worker of up to this many types reads its ready jobs through the index of ready jobs
# by type, one range per type (merged in claim order where the order matters); a worker
# of more types, through the index by group, filtered by type.
MERGED_TYPES_MAX = 8


def merged_types(types: Sequence[str] | None) -> Sequence[str] | None:
    """The types of a worker whose reads merge one range per type (two to
    ``MERGED_TYPES_MAX`` types), else None."""
    return types if types is not None and 1 < len(types) <= MERGED_TYPES_MAX else None


def by_type_key(types: Sequence[str] | None) -> tuple[str, ...] | None:
    """The types read through the index of ready jobs by type (one type, or the merged
    ranges of a few), as a key of a cache of statements or groups; None for a worker
    whose reads go through the index by group."""
    if single_type(types) is not None or merged_types(types) is not None:
        assert types is not None
        return tuple(types)
    return None


# A one-type read of a merged read, before the merge: the dialect's additions to it (on
# PostgreSQL, the claim's row lock).
Part = Callable[[sa.Select[Any], str], sa.Select[Any]]


def as_is(stmt: sa.Select[Any], type_: str) -> sa.Select[Any]:
    """The :data:`Part` that adds nothing."""
    return stmt


def type_head(
    t: Tables,
    now: sa.ColumnElement[float],
    group: str | sa.ColumnElement[str],
    type_: str,
    limit: sa.ColumnElement[int],
    *columns: sa.ColumnElement[Any],
    costed: bool = False,
) -> sa.Select[Any]:
    """``columns`` of a group's first ``limit`` runnable jobs of one type, in its claim
    order, through the index of ready jobs by type: one read of a merged read."""
    return (
        sa.select(*columns)
        .where(runnable(t, now, group=group, types=[type_], costed=costed))
        .order_by(*claim_sort_keys(t, [type_]))
        .limit(limit)
        # A group (or limit) from an enclosing query (a LATERAL join) is that query's.
        .correlate_except(t.jobs)
    )


def merged_head(
    t: Tables,
    now: sa.ColumnElement[float],
    group: str | sa.ColumnElement[str],
    types: Sequence[str],
    limit: sa.ColumnElement[int],
    *columns: sa.ColumnElement[Any],
    part: Part = as_is,
    costed: bool = False,
) -> sa.Select[Any]:
    """``columns`` of a group's first ``limit`` runnable jobs of several types, in claim
    order: the first ``limit`` of each type, read in the terms of the index of ready
    jobs by type (:func:`ready_of_type`, in that type's claim order), then merged. Each
    part reads at most ``limit`` entries, whatever the ready jobs of other types ahead of
    them in the group. ``part`` adds the dialect's own clauses to each one-type read."""
    j = t.jobs
    keys = (j.c.priority.label("rq_priority"), j.c.id.label("rq_id"))
    reads = []
    for i, type_ in enumerate(types):
        one = type_head(t, now, group, type_, limit, *columns, *keys, costed=costed)
        # Each read as a derived table: SQLite takes no ORDER BY or LIMIT on the members
        # of a compound select, and a row lock must apply to the read, not the union.
        head = part(one, type_).subquery(f"rq_type{i}")
        reads.append(sa.select(*head.c))
    merged = sa.union_all(*reads).subquery("rq_merged")
    return (
        sa.select(*(merged.c[c.name] for c in columns))
        .order_by(merged.c.rq_priority.desc(), merged.c.rq_id)
        .limit(limit)
    )


def ready_of_type(t: Tables, type_: str) -> sa.ColumnElement[bool]:
    """Ready jobs of one type, in the terms of the index of ready jobs by type (type,
    group, claim order): the generated column ``ready_type`` where the database has no
    partial indexes, ``state = 'ready'`` and the type elsewhere.

    With ``t.traits.type_test`` (PostgreSQL) the type is tested against an array and
    reads order by the type first: an equality would let the planner drop the type
    from the order as a constant and take the index by group instead, which steps over
    every ready job of other types.
    """
    return ready_of_types(t, [type_])


def ready_of_types(t: Tables, types: Sequence[str]) -> sa.ColumnElement[bool]:
    """Ready jobs of one type or a few, in the terms of the index of ready jobs by type:
    one range of it per type (see :func:`ready_of_type`); one type is an equality, but
    on PostgreSQL."""
    j = t.jobs
    if t.traits.type_test is not None:
        return sa.and_(state_in(t, "ready"), t.traits.type_test(j.c.type, types))

    def member(column: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
        if len(types) == 1:
            return column == sa.bindparam(None, types[0], type_=j.c.type.type)
        return values_in(column, types)

    if not t.traits.partial_indexes:
        return member(j.c.ready_type)
    return sa.and_(state_in(t, "ready"), member(j.c.type))


def run_after_passed(t: Tables, now: sa.ColumnElement[float]) -> sa.ColumnElement[bool]:
    """The job's ``run_after`` is unset or past."""
    run_after = t.jobs.c.run_after
    return sa.or_(run_after.is_(None), run_after <= now)


def type_first(t: Tables, types: Sequence[str] | None) -> tuple[sa.ColumnElement[Any], ...]:
    """The type as the first sort key of a read of one type's ready jobs, on PostgreSQL
    (see :func:`ready_of_type`); nothing elsewhere."""
    if t.traits.type_test is not None and single_type(types) is not None:
        return (t.jobs.c.type,)
    return ()


def values_in(column: sa.ColumnElement[str], values: Sequence[str]) -> sa.ColumnElement[bool]:
    """``column IN (:v1, :v2 ...)``: one bound parameter per value.

    The statements that filter by job type are built once per set of types, so the
    list has a fixed length. A plain ``in_()`` of a list binds it as one expanding
    parameter, which SQLAlchemy re-renders into the SQL text at every execution: on a
    long statement (the claim, the runnable counts) that costs more than its execution.
    """
    return column.in_([sa.bindparam(None, value, type_=column.type) for value in values])


def claim_sort_keys(
    t: Tables, types: Sequence[str] | None = None
) -> tuple[sa.ColumnElement[object], ...]:
    """Higher priority first, then first in, first out (for a worker of one type on
    PostgreSQL, after the type, which is the same for every row: see
    :func:`ready_of_type`)."""
    return (*type_first(t, types), t.jobs.c.priority.desc(), t.jobs.c.id)


def ready_group_walk(
    t: Tables, types: Sequence[str] | None = None, *, name: str = "ready_groups"
) -> sa.CTE:
    """Recursive CTE ``(k)``: the groups that have ready rows, one index probe each (a
    skip scan of the ready index), ending with a NULL row; filter ``k IS NOT NULL``.

    Each probe takes the first key in index order (``ORDER BY ... LIMIT 1``), not
    ``min(group_key)``, which a planner may compute by aggregating the whole range. For
    a worker of one type the walk steps through the index of ready jobs by type.
    """
    j = t.jobs
    only = single_type(types)
    ready = state_in(t, "ready") if only is None else ready_of_type(t, only)

    def first(*conds: sa.ColumnElement[bool]) -> sa.ScalarSelect[Any]:
        return (
            sa.select(j.c.group_key)
            .where(ready, *conds)
            .order_by(*type_first(t, types), j.c.group_key)
            .limit(1)
            .scalar_subquery()
        )

    walk = sa.select(first().label("k")).cte(name, recursive=True)
    step = sa.select(first(j.c.group_key > walk.c.k)).where(walk.c.k.is_not(None))
    return walk.union_all(step)


def ready_group_keys(
    t: Tables, types: Sequence[str] | None = None
) -> sa.Select[Any] | sa.CompoundSelect[Any]:
    """``(k)``: the groups that have ready rows of ``types``, once each. For a worker of a
    few types (:func:`merged_types`), one walk per type (:func:`ready_group_walk`)
    through the index of ready jobs by type, their groups united."""
    many = merged_types(types)
    if many is None:
        walk = ready_group_walk(t, types)
        return sa.select(walk.c.k).where(walk.c.k.is_not(None))
    walks = [ready_group_walk(t, [type_], name=f"ready_groups{i}") for i, type_ in enumerate(many)]
    return sa.union(*(sa.select(w.c.k).where(w.c.k.is_not(None)) for w in walks))


def runnable_head(
    t: Tables,
    now: sa.ColumnElement[float],
    group: str | sa.ColumnElement[str],
    types: Sequence[str] | None,
    limit: sa.ColumnElement[int],
    costed: bool = False,
) -> sa.Select[Any]:
    """The weights of one group's first ``limit`` runnable jobs, in claim order: a group
    is counted only up to the cap, so the count costs the cap, not the backlog. (For a
    worker of a few types, ``limit`` of them in any order.)"""
    j = t.jobs
    many = merged_types(types)
    if many is not None:
        # A count needs no claim order: each type's range of the index by type, one
        # after the other, read up to ``limit`` in all (ordered by the type on
        # PostgreSQL, an order only that index gives: see ``ready_of_type``).
        order = (j.c.type,) if t.traits.type_test is not None else ()
        return (
            sa.select(j.c.weight)
            .where(
                ready_of_types(t, many), run_after_passed(t, now), j.c.group_key == group,
                *(() if costed else (no_costs(t),)),
            )
            .order_by(*order)
            .limit(limit)
        )
    return (
        sa.select(j.c.weight)
        .where(runnable(t, now, group=group, types=types, costed=costed))
        .order_by(*claim_sort_keys(t, types))
        .limit(limit)
    )


def waiting_of_types(t: Tables, types: Sequence[str] | None) -> sa.ColumnElement[bool]:
    """Jobs waiting for their dependencies (of ``types``), in the terms of the index that
    holds them: the generated column ``waiting_type`` on MySQL and MariaDB, the partial
    index's ``state = 'waiting'`` elsewhere."""
    j = t.jobs
    if not t.traits.partial_indexes:
        if types is None:
            return j.c.waiting_type.is_not(None)
        return values_in(j.c.waiting_type, types)
    waiting = state_in(t, "waiting")
    return waiting if types is None else sa.and_(waiting, values_in(j.c.type, types))


def active_containers(t: Tables) -> sa.ColumnElement[bool]:
    """Containers that have not ended, in the terms of the index that holds them
    (migration readyq_0012): the generated column ``active_type`` on MySQL and MariaDB,
    the partial index's ``state = 'active'`` elsewhere."""
    if not t.traits.partial_indexes:
        return t.jobs.c.active_type.is_not(None)
    return state_in(t, "active")


def costed_of_types(t: Tables, types: Sequence[str] | None) -> sa.ColumnElement[bool]:
    """Ready jobs (of ``types``) with costs of their own, in the terms of the index that
    holds them (migration readyq_0011): the generated column ``costed_type`` on MySQL and
    MariaDB, the partial index's predicate elsewhere (its text exactly, so that SQLite
    sees that the query implies it)."""
    j = t.jobs
    if not t.traits.partial_indexes:
        if types is None:
            return j.c.costed_type.is_not(None)
        return values_in(j.c.costed_type, types)
    costed = sa.and_(state_in(t, "ready"), j.c.uses.is_not(None))
    return costed if types is None else sa.and_(costed, values_in(j.c.type, types))


def first_ready_type(
    t: Tables,
    types: Sequence[str],
    *conds: sa.ColumnElement[bool],
    member: Callable[[sa.ColumnElement[str], Sequence[str]], sa.ColumnElement[bool]] = values_in,
) -> sa.ScalarSelect[Any]:
    """The least of ``types`` that has a ready job (meeting ``conds``), or NULL, read
    through the index of ready jobs by type.

    ``min()``, not ``EXISTS`` or ``LIMIT 1``: a planner that expects an early match may
    take any scan for those, and through the indexes by group a probe for types with
    nothing ready reads every ready job of the others. ``member`` writes the type test
    (never an equality, which would make the type's order, and ``min()``, moot).
    """
    j = t.jobs
    return (
        sa.select(sa.func.min(j.c.type))
        .where(state_in(t, "ready"), member(j.c.type, types), *conds)
        .scalar_subquery()
    )


def in_flight_by_group(t: Tables, *states: str) -> sa.Select[Any]:
    """(group_key, n, w): jobs in ``states`` per group and their largest weight."""
    j = t.jobs
    return (
        sa.select(j.c.group_key, sa.func.count().label("n"), sa.func.max(j.c.weight).label("w"))
        .where(state_in(t, *states))
        .group_by(j.c.group_key)
    )


def runnable_by_definition(t: Tables, now: sa.ColumnElement[float]) -> sa.Select[tuple[int]]:
    """The ids that the specification's NOT EXISTS query calls runnable."""
    j = t.jobs
    child = j.alias("child")
    up = j.alias("up")
    has_child = sa.exists().where(child.c.parent_id == j.c.id)
    open_dep = sa.exists().where(
        t.deps.c.job_id == j.c.id,
        up.c.id == t.deps.c.depends_on_id,
        up.c.state != "done",
    )
    return (
        sa.select(j.c.id)
        .where(
            j.c.state == "ready",
            ~j.c.is_container,
            sa.or_(j.c.run_after.is_(None), j.c.run_after <= now),
            ~has_child,
            ~open_dep,
            sa.or_(j.c.lease_expires.is_(None), j.c.lease_expires <= now),
        )
        .order_by(j.c.id)
    )
