"""The attempt history: one row for each attempt that did not end its job done.

Written in the transaction that records the attempt's end (by its worker, or by the sweep
of its expired lease or deadline), so that a row exists exactly when that end was
recorded; read by ``show``, the dashboard and the JSON API. The attempt that ends a job
done is the job's row itself: a job that succeeds at once writes nothing here.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from readyq.errors import JobNotFound
from readyq.reports import AttemptRecord
from readyq.store.context import StoreContext

# How an attempt ended, as stored (at most 16 characters).
RETRIED = "retried"
FAILED = "failed"
CANCELLED = "cancelled"
HANDED_BACK = "handed back"
TIMED_OUT = "timed out"
LEASE_EXPIRED = "lease expired"


def record_attempt(
    ctx: StoreContext,
    conn: Connection,
    *,
    job_id: int,
    lease_token: int,
    attempt: int,
    worker: str | None,
    outcome: str,
    error: str | None,
    started_at: float | sa.ColumnElement[Any] | None,
) -> None:
    """Keep the end of one attempt, in the transaction that records it."""
    conn.execute(
        sa.insert(ctx.tables.attempts).values(
            job_id=job_id, lease_token=lease_token, attempt=attempt, worker=worker,
            started_at=started_at, ended_at=ctx.now, outcome=outcome, error=error,
        )
    )


def start_of(ctx: StoreContext, job_id: int) -> sa.ColumnElement[Any]:
    """The start of the job's running attempt, read from its row in the statement."""
    j = ctx.tables.jobs
    return sa.select(j.c.started_at).where(j.c.id == job_id).scalar_subquery()


def attempts_of(ctx: StoreContext, conn: Connection, job_id: int) -> list[AttemptRecord]:
    """Every attempt of a job, oldest first: the recorded ones, then the one its row
    holds when it ended the job done or is running. Raises JobNotFound."""
    a, j = ctx.tables.attempts, ctx.tables.jobs
    job = conn.execute(
        sa.select(j.c.state, j.c.attempts, j.c.lease_owner, j.c.started_at, j.c.finished_at)
        .where(j.c.id == job_id)
    ).first()
    if job is None:
        raise JobNotFound(f"no job with id {job_id}")
    rows = conn.execute(
        sa.select(a.c.attempt, a.c.worker, a.c.started_at, a.c.ended_at, a.c.outcome,
                  a.c.error)
        .where(a.c.job_id == job_id)
        .order_by(a.c.lease_token)
    ).all()
    out = [
        AttemptRecord(int(r.attempt), r.worker, r.started_at, r.ended_at, r.outcome, r.error)
        for r in rows
    ]
    if job.state in ("done", "running") and job.attempts > 0:
        out.append(AttemptRecord(
            int(job.attempts), job.lease_owner, job.started_at,
            job.finished_at if job.state == "done" else None, job.state, None,
        ))
    return out
