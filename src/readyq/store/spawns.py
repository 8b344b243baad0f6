"""Inserting the jobs an attempt spawned, in the transaction that records its ``done``.

Called only for a ``done`` this very transaction recorded under the attempt's lease, so
an attempt that failed, was fenced out or was already recorded by an earlier try of
the unit spawns nothing here. Runs before the consequences of that ``done`` are
applied: a joined dependent counts the spawned jobs among its unfinished upstream jobs
before the spawner's end is counted off, so it never becomes ready early, and the
spawned jobs join the spawner's container before the spawner's end is counted off it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from readyq.errors import DependencyCycle
from readyq.model import BAD_ENDS, JobState
from readyq.store import enqueue
from readyq.store.context import StoreContext
from readyq.store.graph import propagate
from readyq.store.inspection import chunks
from readyq.store.records import BatchJob, Spawn

# What a joined dependent can be in: still waiting for the spawner.
_WAITS = (JobState.WAITING.value, JobState.ACTIVE.value)


def combined(spawner: int, spawner_parent: int | None, spawns: Sequence[Spawn]) -> tuple[
    list[BatchJob], list[bool]
]:
    """The staged batches as one, in order, each job marked as spawned by ``spawner``
    and, without a container, put into its spawn's (``Spawn.parent``, else
    ``spawner_parent``); with, per position, whether the job is joined."""
    batch: list[BatchJob] = []
    joined: list[bool] = []
    for s in spawns:
        base = len(batch)
        box = s.parent if s.parent is not None else spawner_parent
        for b in s.batch:
            job = b.job._replace(spawned_by=spawner)
            if box is not None and job.parent is None and b.parent_in_batch is None:
                job = job._replace(parent=box)
            batch.append(BatchJob(
                job,
                tuple(base + x for x in b.deps_in_batch),
                None if b.parent_in_batch is None else base + b.parent_in_batch,
            ))
            joined.append(s.join)
    return batch, joined


def insert_spawned(
    ctx: StoreContext,
    conn: Connection,
    spawner: int,
    spawner_parent: int | None,
    spawns: Sequence[Spawn],
) -> list[int]:
    """Insert what ``spawner`` spawned and join its waiting dependents to it; return the
    new jobs' ids.

    Raises the :class:`readyq.InvalidJob` that an ``enqueue_many`` of the batch would
    raise now (a job it refers to by id vanished, a container ended since the handler
    staged it), before anything is written.
    """
    t = ctx.tables
    j, d = t.jobs, t.deps
    batch, joined = combined(spawner, spawner_parent, spawns)
    waiting: list[int] = []
    if any(joined):
        boxes = {b.job.parent for b in batch if b.job.parent is not None}
        waiting = [
            int(x) for x in conn.execute(
                sa.select(d.c.job_id)
                .select_from(d.join(j, j.c.id == d.c.job_id))
                .where(d.c.depends_on_id == spawner, j.c.state.in_(_WAITS))
                .order_by(d.c.job_id)
                .with_for_update()
            ).scalars()
            # A container the jobs go into ends after them anyway.
            if int(x) not in boxes
        ]
        looped = set(waiting).intersection({x for b in batch for x in b.job.depends_on})
        if looped:
            raise DependencyCycle(
                f"a spawned job depends on job {min(looped)}, which waits for the jobs "
                "spawned with join=True"
            )
    if any(b.job.unique_key is not None for b in batch):
        placed = enqueue.insert_unique_batch(ctx, conn, batch)
    else:
        placed = [(x, True) for x in enqueue.insert_batch(ctx, conn, batch)]
    new = [x for x, created in placed if created]
    if waiting:
        _join(ctx, conn, waiting, sorted({x for (x, _), yes in zip(placed, joined,
                                                                     strict=True) if yes}))
    return new


def _join(ctx: StoreContext, conn: Connection, waiting: list[int], upstream: list[int]) -> None:
    """Make each of ``waiting`` wait for every job of ``upstream`` too."""
    t = ctx.tables
    j, d = t.jobs, t.deps
    # A job kept in place of one with its unique key may already be waited for.
    known = {
        (int(r.job_id), int(r.depends_on_id))
        for chunk in chunks(upstream)
        for r in conn.execute(
            sa.select(d.c.job_id, d.c.depends_on_id).where(
                ctx.dialect.match_ids(d.c.job_id, waiting),
                ctx.dialect.match_ids(d.c.depends_on_id, chunk),
            )
        )
    }
    states: dict[int, str] = {}
    for chunk in chunks(upstream):
        states.update(
            (int(r.id), r.state)
            for r in conn.execute(
                sa.select(j.c.id, j.c.state).where(ctx.dialect.match_ids(j.c.id, chunk))
            )
        )
    added: dict[int, int] = {}
    edges = []
    for w in waiting:
        for u in upstream:
            if (w, u) in known:
                continue
            edges.append({"job_id": w, "depends_on_id": u})
            if states.get(u) != JobState.DONE.value:
                added[w] = added.get(w, 0) + 1
    if edges:
        ctx.dialect.insert_edges(conn, t, edges)
    by_n: dict[int, list[int]] = {}
    for w, n in added.items():
        by_n.setdefault(n, []).append(w)
    for n, ids in sorted(by_n.items()):
        conn.execute(
            sa.update(j)
            .where(ctx.dialect.match_ids(j.c.id, ids))
            .values(pending_deps=j.c.pending_deps + n, updated_at=ctx.now)
        )
    # Spawned jobs already ended badly (born upstream_failed): their new dependents end
    # as any dependent does. No container is named: theirs counted them at birth.
    bad = [(u, s, None) for u, s in sorted(states.items()) if s in BAD_ENDS]
    if bad:
        propagate(ctx, conn, bad)
