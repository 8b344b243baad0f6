"""The consequences of jobs ending: dependents released or failed, containers rolled up.

Called inside the transaction that ended the jobs (a finish, a sweep, a cancel, an
enqueue of a job born ``upstream_failed``), so a job's end and its consequences commit
together.

A container's own dependencies take part like a job's: each one that ends done counts
one fewer in its ``pending_deps``, and one that ends badly ends it ``upstream_failed``
(its children, which inherit those edges, end ``upstream_failed`` in the same wave). A
container that has no children when its last dependency ends done ends ``done`` then:
all of its children, none, are done. Nothing else ends an empty container on its own,
so one enqueued without unfinished dependencies stays ``active`` for children added
later, until ``Queue.close_container`` or a cancel ends it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from readyq.dialects.records import Dependents
from readyq.model import JobState
from readyq.store.context import StoreContext
from readyq.store.inspection import chunks

# What a job or container waits in before it ends: a dependency that ends badly ends it.
_WAITS = (JobState.WAITING.value, JobState.ACTIVE.value)


def propagate(
    ctx: StoreContext,
    conn: Connection,
    ended: Iterable[tuple[int, str, int | None]],  # (job id, state it ended in, container)
    *,
    done_edges: Dependents | None = None,
) -> None:
    """Apply the consequences of jobs reaching a terminal state, in this transaction.

    Dependents of a ``done`` job count one fewer unfinished upstream job and become
    ready at zero (a container without children ends ``done`` at zero); dependents of a
    job that ended badly, containers included, end ``upstream_failed``, and so on down
    the graph. A container whose last child ended rolls up to ``done`` or ``failed`` and
    propagates in turn. Each wave is a few statements for the whole batch, not a few per
    job. ``done_edges`` gives the first wave's dependents of its ``done`` jobs when the
    caller has read them already.
    """
    t, d = ctx.tables, ctx.dialect
    j, deps = t.jobs, t.deps
    now = ctx.now
    work = list(ended)
    while work:
        wave, work = work, []
        done = JobState.DONE.value
        done_ids: list[int] = []
        bad: dict[int, str] = {}
        for i, state, _ in wave:
            if state == done:
                done_ids.append(i)
            else:
                bad[i] = state
        done_ids.sort()
        if done_ids:
            if done_edges is not None:
                edges, done_edges = done_edges, None
            else:
                edges = d.dependents_of(conn, t, done_ids)
            by_count: dict[int, list[int]] = defaultdict(list)
            for dependent, n in edges.edges.items():
                by_count[n].append(int(dependent))
            d.release_dependents(conn, t, by_count, now, ctx.notifier)
            if edges.containers:
                work.extend(_end_emptied(ctx, conn, edges.containers))
        if bad:
            # Locked, so the state check cannot race another transaction failing the
            # same dependent: each dependent ends once and is counted once.
            rows = conn.execute(
                sa.select(j.c.id, j.c.parent_id, deps.c.depends_on_id)
                .select_from(deps.join(j, j.c.id == deps.c.job_id))
                .where(ctx.dialect.match_ids(deps.c.depends_on_id, sorted(bad)),
                       j.c.state.in_(_WAITS))
                .order_by(j.c.id)
                .with_for_update()
            ).all()
            first: dict[int, tuple[int, int | None]] = {}
            for r in rows:
                first.setdefault(int(r.id), (int(r.depends_on_id), r.parent_id))
            by_dep: dict[int, list[int]] = defaultdict(list)
            for dependent, (dep, _) in first.items():
                by_dep[dep].append(dependent)
            for dep, ids in sorted(by_dep.items()):
                conn.execute(
                    sa.update(j)
                    .where(ctx.dialect.match_ids(j.c.id, ids), j.c.state.in_(_WAITS))
                    .values(
                        state=JobState.UPSTREAM_FAILED.value,
                        error=f"dependency {dep} ended {bad[dep]}",
                        finished_at=now,
                        updated_at=now,
                    )
                )
            work.extend(
                (dependent, JobState.UPSTREAM_FAILED.value, parent)
                for dependent, (_, parent) in first.items()
            )
        work.extend(_roll_up(ctx, conn, wave))


def _end_emptied(
    ctx: StoreContext, conn: Connection, containers: Iterable[int]
) -> list[tuple[int, str, int | None]]:
    """End ``done`` the containers among ``containers`` (dependents of jobs that just
    ended done, their counters already released) that wait for no dependency any more
    and have no child. Returns the containers that ended."""
    j = ctx.tables.jobs
    now = ctx.now
    ended: list[tuple[int, str, int | None]] = []
    for chunk in chunks(containers):
        empty = sa.and_(
            j.c.id.in_(chunk),
            j.c.state == JobState.ACTIVE.value,
            j.c.pending_deps <= 0,
            j.c.open_children == 0,
        )
        # The release has locked these rows already: an enqueue into one of them waits
        # for this transaction, then finds it ended.
        rows = conn.execute(sa.select(j.c.id, j.c.parent_id).where(empty).order_by(j.c.id))
        found = [(int(r.id), JobState.DONE.value, r.parent_id) for r in rows]
        if found:
            conn.execute(
                sa.update(j)
                .where(empty)
                .values(state=JobState.DONE.value, error=None, finished_at=now, updated_at=now)
            )
            ended += found
    return ended


def _roll_up(
    ctx: StoreContext, conn: Connection, wave: list[tuple[int, str, int | None]]
) -> list[tuple[int, str, int | None]]:
    """Count the wave's ended children off their containers; end each container whose
    last child ended. Returns the containers that ended."""
    j = ctx.tables.jobs
    now = ctx.now
    children: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for _, state, parent_id in wave:
        if parent_id is not None:
            children[int(parent_id)][0] += 1
            children[int(parent_id)][1] += state != JobState.DONE.value
    for parent_id, (n, n_bad) in sorted(children.items()):
        conn.execute(
            sa.update(j)
            .where(j.c.id == parent_id)
            .values(
                open_children=j.c.open_children - n,
                failed_children=j.c.failed_children + n_bad,
                updated_at=now,
            )
        )
    ended: list[tuple[int, str, int | None]] = []
    if not children:
        return ended
    parents = conn.execute(
        sa.select(
            j.c.id, j.c.state, j.c.open_children, j.c.failed_children, j.c.parent_id,
            j.c.cancel_requested,
        ).where(ctx.dialect.match_ids(j.c.id, sorted(children)))
    ).all()
    for p in parents:
        if p.state != "active" or p.open_children > 0:
            continue
        # A container an operator cancelled ends cancelled, not failed, for the children
        # the cancel ended (done still, if every child did end done).
        final = "done" if p.failed_children == 0 else (
            "cancelled" if p.cancel_requested else "failed")
        error = None if final == "done" else f"{p.failed_children} child job(s) did not end done"
        rolled = conn.execute(
            sa.update(j)
            .where(j.c.id == p.id, j.c.state == "active")
            .values(state=final, error=error, finished_at=now, updated_at=now)
        )
        if rolled.rowcount == 1:
            ended.append((int(p.id), final, p.parent_id))
    return ended
