"""What a job's attempts keep for the attempts after them: steps, state and progress;
and the results a job reads from the jobs it depends on.

Every write is fenced by the attempt's lease: it first extends the lease of exactly
that (job, owner, token) while the job is in flight, and writes nothing if no row
matched. That UPDATE also locks the job's row until the transaction ends, so a sweep
or a claim that would take the lease away waits for it, and no two writers of one job's
memory ever meet: an attempt whose lease is gone (a frozen process that woke up) can
never overwrite what a newer attempt saved.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from readyq.errors import JobNotFound, LeaseLost
from readyq.model import IN_FLIGHT_STATES
from readyq.sql.leases import fenced_heartbeat
from readyq.store.context import StoreContext


@dataclass(frozen=True)
class Holder:
    """The attempt that writes: its job, its worker and its lease token, and the lease
    seconds a write extends the lease by."""

    job_id: int
    attempt: int
    owner: str
    lease_token: int
    lease_ttl: float


@dataclass(frozen=True)
class Progress:
    """What ``Job.progress`` reported last."""

    current: float
    total: float | None
    message: str | None


def fence(ctx: StoreContext, conn: Connection, h: Holder) -> None:
    """Extend ``h``'s lease and lock its job's row; raise LeaseLost if it is not held."""
    j = ctx.tables.jobs
    held = sa.and_(j.c.id == h.job_id, j.c.lease_token == h.lease_token,
                   j.c.lease_owner == h.owner)
    if conn.execute(fenced_heartbeat(ctx.tables, ctx.now, held, h.lease_ttl)).rowcount != 1:
        raise LeaseLost(f"job {h.job_id} attempt {h.attempt} lost its lease: nothing was stored")


def _upsert_checkpoint(ctx: StoreContext, conn: Connection, job_id: int,
                       values: Mapping[str, Any]) -> None:
    """Write ``values`` into the job's checkpoint row, made if missing. Only called under
    :func:`fence`, whose row lock keeps any other writer of this job out meanwhile."""
    c = ctx.tables.checkpoints
    if conn.execute(sa.update(c).where(c.c.job_id == job_id).values(**values)).rowcount == 0:
        conn.execute(sa.insert(c).values(job_id=job_id, **values))


def save_state(ctx: StoreContext, conn: Connection, h: Holder, state_json: str) -> None:
    fence(ctx, conn, h)
    _upsert_checkpoint(ctx, conn, h.job_id, {
        "state": state_json, "state_attempt": h.attempt, "saved_at": ctx.now,
    })


def save_progress(ctx: StoreContext, conn: Connection, h: Holder, p: Progress) -> None:
    fence(ctx, conn, h)
    _upsert_checkpoint(ctx, conn, h.job_id, {
        "progress_current": p.current, "progress_total": p.total,
        "progress_message": p.message, "progress_at": ctx.now,
    })


def store_step(
    ctx: StoreContext, conn: Connection, h: Holder, name: str, result_json: str
) -> None:
    """Store a step's result. One already stored under that name is kept: a write whose
    COMMIT reply was lost, tried again, finds its own row."""
    fence(ctx, conn, h)
    s = ctx.tables.steps
    there = conn.execute(
        sa.select(s.c.name).where(s.c.job_id == h.job_id, s.c.name == name)
    ).first()
    if there is None:
        conn.execute(sa.insert(s).values(
            job_id=h.job_id, name=name, result=result_json, attempt=h.attempt,
            stored_at=ctx.now,
        ))


def load_state(ctx: StoreContext, conn: Connection, job_id: int) -> str | None:
    """The JSON text of the state the job saved last, or None."""
    c = ctx.tables.checkpoints
    return conn.execute(
        sa.select(c.c.state).where(c.c.job_id == job_id)
    ).scalar_one_or_none()


def load_steps(ctx: StoreContext, conn: Connection, job_id: int) -> dict[str, str]:
    """The JSON text of every stored step of the job, by name."""
    s = ctx.tables.steps
    return {
        r.name: r.result
        for r in conn.execute(sa.select(s.c.name, s.c.result).where(s.c.job_id == job_id))
    }


def forget(ctx: StoreContext, conn: Connection, job_ids: list[int]) -> None:
    """Delete the steps, state and progress of ``job_ids`` (a retry that starts afresh)."""
    t = ctx.tables
    for table in (t.steps, t.checkpoints):
        conn.execute(sa.delete(table).where(ctx.dialect.match_ids(table.c.job_id, job_ids)))


@dataclass(frozen=True)
class Upstream:
    """One job whose result a job may read: its id, its batch key, its JSON result and
    its state."""

    id: int
    key: str | None
    result: str | None
    state: str


def upstream(
    ctx: StoreContext, conn: Connection, job_id: int, *, include_children: bool
) -> list[Upstream]:
    """The jobs ``job_id`` depends on, its own and those its containers pass down; with
    ``include_children``, every job inside those that are containers too, at any depth.
    In id order."""
    t = ctx.tables
    j, d = t.jobs, t.deps
    chain = [job_id]
    parent = conn.execute(sa.select(j.c.parent_id).where(j.c.id == job_id)).first()
    if parent is None:
        raise JobNotFound(f"no job with id {job_id}")
    box = parent.parent_id
    while box is not None and box not in chain:
        chain.append(int(box))
        box = conn.execute(sa.select(j.c.parent_id).where(j.c.id == box)).scalar_one_or_none()
    cols = (j.c.id, j.c.batch_key, j.c.result, j.c.state, j.c.is_container)
    rows = conn.execute(
        sa.select(*cols)
        .select_from(d.join(j, j.c.id == d.c.depends_on_id))
        .where(ctx.dialect.match_ids(d.c.job_id, chain))
    ).all()
    found = {int(r.id): r for r in rows}
    boxes = [int(r.id) for r in rows if r.is_container] if include_children else []
    while boxes:
        kids = conn.execute(
            sa.select(*cols).where(ctx.dialect.match_ids(j.c.parent_id, boxes))
        ).all()
        boxes = [int(r.id) for r in kids if r.is_container and int(r.id) not in found]
        found.update((int(r.id), r) for r in kids)
    return [
        Upstream(i, r.batch_key, r.result, r.state) for i, r in sorted(found.items())
    ]


def in_flight(ctx: StoreContext, conn: Connection, h: Holder) -> bool:
    """Whether ``h`` still holds its lease (a read: it locks nothing)."""
    j = ctx.tables.jobs
    return conn.execute(
        sa.select(j.c.id).where(
            j.c.id == h.job_id, j.c.lease_token == h.lease_token, j.c.lease_owner == h.owner,
            j.c.state.in_(IN_FLIGHT_STATES),
        )
    ).first() is not None
