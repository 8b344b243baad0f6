"""Sweeps: expired leases and attempts past their deadline, ended by any worker.

A lease expires when its worker stops heartbeating (it crashed, froze or lost the
database); an attempt passes its deadline when its handler runs longer than its
timeout, whether or not its worker is alive. Either way the next sweep of any worker
ends the attempt: retried with a backoff while attempts remain, else failed (or
cancelled, when a cancel was asked). Sweeps compare with the database's clock only.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from readyq.model import IN_FLIGHT_STATES
from readyq.planning.attempts import Ended, attempt_end
from readyq.planning.backoff import retry_delay
from readyq.sql.ready import state_in
from readyq.store.context import StoreContext
from readyq.store.graph import propagate
from readyq.store.history import LEASE_EXPIRED, record_attempt
from readyq.store.history import TIMED_OUT as ATTEMPT_TIMED_OUT
from readyq.store.records import TIMED_OUT, ReclaimedJob, ReclaimResult


def reclaim_due_statement(ctx: StoreContext) -> sa.Select[Any]:
    """Whether any lease has expired or any attempt is past its deadline: one lock-free
    read of the in-flight range of the state index."""
    j = ctx.tables.jobs
    now = ctx.now
    return (
        sa.select(j.c.id)
        .where(
            state_in(ctx.tables, *IN_FLIGHT_STATES),
            sa.or_(
                j.c.lease_expires < now,
                sa.and_(j.c.state == "running", j.c.deadline < now),
            ),
        )
        .limit(1)
    )


def reclaim_expired(ctx: StoreContext, conn: Connection, limit: int) -> ReclaimResult:
    """Return up to ``limit`` expired leases to ready (or failed, or cancelled when a
    cancel was asked), and end the attempts past their deadline.

    Each row is re-checked in its UPDATE (state, token and expiry), so a job that was
    finished or re-claimed after the SELECT is left alone.
    """
    j = ctx.tables.jobs
    now = ctx.now
    expired = sa.or_(
        j.c.lease_expires < now, sa.and_(j.c.state == "running", j.c.deadline < now)
    )
    rows = conn.execute(
        sa.select(
            j.c.id,
            j.c.type,
            j.c.group_key,
            j.c.state,
            j.c.attempts,
            j.c.max_attempts,
            j.c.lease_token,
            j.c.lease_owner,
            j.c.parent_id,
            j.c.lease_expires,
            j.c.deadline,
            j.c.retry_on_timeout,
            j.c.cancel_requested,
            j.c.timeout,
            j.c.started_at,
            now.label("now"),
        )
        .where(state_in(ctx.tables, *IN_FLIGHT_STATES), expired)
        .order_by(j.c.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()
    retried = failed = timed_out = cancelled = 0
    ended: list[tuple[int, str, int | None]] = []
    swept: list[ReclaimedJob] = []
    for r in rows:
        is_timeout = (
            r.state == "running" and r.deadline is not None and r.deadline < r.now
        )
        delay = 0.0
        if is_timeout:
            # A handler's timeout is not stored on the job; only the deadline is.
            seconds = r.timeout
            if seconds is None and r.started_at is not None:
                seconds = round(r.deadline - r.started_at, 3)
            what = TIMED_OUT + ("" if seconds is None else f" after {seconds:g}s")
            why = f"{what} (attempt {r.attempts})"
        else:
            what = "lease expired"
            why = f"lease expired: worker lost during attempt {r.attempts}"
        end = attempt_end(
            Ended.TIMED_OUT if is_timeout else Ended.LEASE_EXPIRED,
            cancel_requested=bool(r.cancel_requested), attempt=int(r.attempts),
            max_attempts=int(r.max_attempts), retry_on_timeout=bool(r.retry_on_timeout),
        )
        values: dict[str, Any]
        if end == "cancel":
            final: str | None = "cancelled"
            values = {"state": final, "finished_at": now}
        elif end == "retry":
            final = None
            delay = retry_delay(r.attempts)
            values = {"state": "ready", "run_after": now + delay}
        else:
            final = "failed"
            values = {"state": final, "finished_at": now}
        values.update(error=why, lease_expires=None, deadline=None, updated_at=now)
        count = conn.execute(
            sa.update(j)
            .where(
                j.c.id == r.id,
                j.c.lease_token == r.lease_token,
                state_in(ctx.tables, *IN_FLIGHT_STATES),
                expired,
            )
            .values(**values)
        ).rowcount
        if count != 1:
            continue
        record_attempt(
            ctx, conn, job_id=int(r.id), lease_token=int(r.lease_token),
            attempt=int(r.attempts), worker=r.lease_owner,
            outcome=ATTEMPT_TIMED_OUT if is_timeout else LEASE_EXPIRED, error=why,
            # A lease that expired before its job started holds an earlier start.
            started_at=r.started_at if r.state == "running" else None,
        )
        timed_out += is_timeout
        if final is None:
            retried += 1
        elif final == "failed":
            failed += 1
        else:
            cancelled += 1
        if final is not None:
            ended.append((int(r.id), final, r.parent_id))
        swept.append(
            ReclaimedJob(
                id=int(r.id),
                type=r.type,
                attempt=int(r.attempts),
                group=r.group_key,
                outcome="retried" if final is None else final,
                reason="timeout" if is_timeout else "lease_expired",
                what=what,
                retry_in=delay,
            )
        )
    propagate(ctx, conn, ended)
    return ReclaimResult(
        retried=retried,
        failed=failed,
        timed_out=timed_out,
        cancelled=cancelled,
        jobs=tuple(swept),
    )
