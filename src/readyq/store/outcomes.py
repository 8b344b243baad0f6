"""Fenced writes about claimed jobs: start, heartbeat, outcome, hand-back.

Every write a worker makes about its job matches the job's lease: the owner, the token
its claim drew and the state. A write whose fence no longer matches changes nothing and
is reported back as lost, so a worker whose lease was reclaimed cannot overwrite what
the attempt that replaced it did. Each transaction updates rows in job id order, so
concurrent ones never deadlock on each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from readyq.claim_order import StartPolicy
from readyq.dialects.records import Dependents
from readyq.errors import InvalidJob
from readyq.model import IN_FLIGHT_STATES, ClaimedJob
from readyq.store.context import StoreContext
from readyq.store.graph import propagate
from readyq.store.history import (
    CANCELLED,
    FAILED,
    HANDED_BACK,
    RETRIED,
    record_attempt,
    start_of,
)
from readyq.store.history import TIMED_OUT as ATTEMPT_TIMED_OUT
from readyq.store.records import (
    TIMED_OUT,
    TIMEOUT,
    Applied,
    Lease,
    LeaseStatus,
    Outcome,
    OutcomeKind,
    Recorded,
)
from readyq.store.spawns import insert_spawned
from readyq.untrusted import storable

MAX_ERROR_CHARS = 8000

_BY_JOB_ID = attrgetter("job.id")
_SPAWNS = attrgetter("spawns")
# Read once: on Python 3.11 every ``OutcomeKind.X`` goes through EnumType.__getattr__'s
# slow attribute path, and this one is compared for every outcome.
_DONE = OutcomeKind.DONE
# The states a recorded outcome leaves behind (a retry or hand-back loses to a cancel).
_LEAVES = {
    OutcomeKind.RETRY: ("ready", "cancelled"),
    OutcomeKind.RELEASE: ("ready", "cancelled"),
    OutcomeKind.FAIL: ("failed",),
    OutcomeKind.CANCEL: ("cancelled",),
}


def _attempt_outcome(o: Outcome, final: str | None) -> str:
    """How the attempt ended, for its history row."""
    if final == "cancelled":
        return CANCELLED
    if o.error_type == TIMEOUT:
        return ATTEMPT_TIMED_OUT
    return {OutcomeKind.RETRY: RETRIED, OutcomeKind.RELEASE: HANDED_BACK}.get(
        OutcomeKind(o.kind), FAILED)


def stored_error(text: str | None) -> str | None:
    """An error text as it is stored: storable on every database (see
    :func:`readyq.untrusted.storable`; a handler's message may hold anything) and cut to
    ``MAX_ERROR_CHARS``."""
    if text is None:
        return None
    text = storable(text)
    if len(text) <= MAX_ERROR_CHARS:
        return text
    return text[: MAX_ERROR_CHARS - 20] + "\n... (truncated)"


def start_jobs(
    ctx: StoreContext,
    conn: Connection,
    owner: str,
    starts: Sequence[tuple[ClaimedJob, StartPolicy]],
) -> set[int]:
    """Move leased jobs to running, each with the deadline and timeout rule of its
    :class:`StartPolicy` (its ``max_attempts`` was the claim's to apply); return the ids
    moved."""
    by_policy: dict[tuple[float | None, bool], list[tuple[int, int]]] = {}
    for job, policy in starts:
        key = (policy.timeout, policy.retry_on_timeout)
        by_policy.setdefault(key, []).append((job.id, job.lease_token))
    moved = 0
    for (timeout, retry), leases in by_policy.items():
        moved += ctx.dialect.start_leased(
            conn, ctx.tables, owner, leases, ctx.now, timeout=timeout, retry_on_timeout=retry
        )
    ids = [job.id for job, _ in starts]
    if moved == len(ids):
        return set(ids)
    tokens = {job.id: job.lease_token for job, _ in starts}
    return {
        int(r.id)
        for r in ctx.dialect.lease_rows(conn, ctx.tables, ids)
        if r.state == "running" and r.lease_owner == owner and r.lease_token == tokens[r.id]
    }


def heartbeat(
    ctx: StoreContext, conn: Connection, owner: str, leases: Sequence[Lease], lease_ttl: float
) -> dict[int, LeaseStatus]:
    """Extend the leases still held, in one statement; report lost and cancelled jobs."""
    pairs = [(x.id, x.token) for x in leases]
    tokens = dict(pairs)
    ctx.dialect.extend_leases(conn, ctx.tables, owner, pairs, lease_ttl, ctx.now)
    status = {x.id: LeaseStatus(lost=True, cancel_requested=False) for x in leases}
    for r in ctx.dialect.lease_rows(conn, ctx.tables, list(tokens)):
        held = (
            r.lease_owner == owner
            and r.lease_token == tokens[r.id]
            and r.state in IN_FLIGHT_STATES
        )
        status[int(r.id)] = LeaseStatus(lost=not held, cancel_requested=bool(r.cancel_requested))
    return status


def hand_back(
    ctx: StoreContext, conn: Connection, owner: str, jobs: Sequence[ClaimedJob]
) -> int:
    """Put back, uncharged, jobs leased by a claim whose COMMIT reply was lost.

    Fenced by each job's lease token and owner as that claim set them, so a claim that
    did not land, or a lease since reclaimed, is left alone. A job whose cancellation
    was asked meanwhile is left to the lease sweep, which cancels it.
    """
    pairs = [(c.id, c.lease_token) for c in jobs]
    return ctx.dialect.hand_back(conn, ctx.tables, owner, pairs, ctx.now)


def record_outcomes(
    ctx: StoreContext, conn: Connection, owner: str, outcomes: Sequence[Outcome]
) -> Applied:
    """Record how attempts ended, each fenced by its lease, in the open transaction.

    Returns (job id, lease token) -> True if the outcome was recorded, False if fenced
    out. The token is part of the key: a worker may hand in the late outcome of an
    attempt it gave up on together with that of the job's next attempt. Running the
    unit again after an ambiguous commit is safe: an outcome already recorded under the
    same lease is recognised and reported True again.
    """
    applied: Applied = {}
    ended: list[tuple[int, str, int | None]] = []
    done: list[Outcome] = []
    others: list[Outcome] = []
    for o in outcomes:
        (done if o.kind == _DONE else others).append(o)
    done.sort(key=_BY_JOB_ID)
    edges = None
    if done:
        edges = _record_done(ctx, conn, owner, done, applied, ended)
        # Only outcomes that carry spawns pay for this scan's branch.
        if any(map(_SPAWNS, done)) and _insert_spawns(ctx, conn, owner, done, ended):
            edges = None
    for o in sorted(others, key=_BY_JOB_ID):
        _record_one(ctx, conn, owner, o, applied, ended)
    propagate(ctx, conn, ended, done_edges=edges)
    return applied


def _record_done(
    ctx: StoreContext,
    conn: Connection,
    owner: str,
    done: Sequence[Outcome],
    applied: Applied,
    ended: list[tuple[int, str, int | None]],
) -> Dependents | None:
    """Mark a batch done in one statement, each row fenced by its own lease.

    Returns the dependents of the batch when every row was marked.
    """
    # Each job's fields read once: a NamedTuple's field read by name is a descriptor call
    # that Python 3.11 does not specialize.
    jobs = [o.job for o in done]
    marked = ctx.dialect.mark_done(
        conn,
        ctx.tables,
        owner,
        [(c.id, c.lease_token, o.result_json) for c, o in zip(jobs, done, strict=True)],
        ctx.now,
    )
    if marked.marked == len(done):
        recorded = Recorded.RECORDED  # read once (a slow attribute on Python 3.11)
        for c in jobs:
            id_ = c.id
            applied[id_, c.lease_token] = recorded
            ended.append((id_, "done", c.parent_id))
        return marked.dependents
    # Some rows were fenced out, or (count == 0) this unit already committed once and
    # its COMMIT reply was lost: rows done under our own lease were recorded, and
    # propagated, by the earlier try.
    rows = {
        int(r.id): r
        for r in ctx.dialect.lease_rows(conn, ctx.tables, [o.job.id for o in done])
    }
    for o in done:
        r = rows.get(o.job.id)
        ok = (
            r is not None
            and r.state == "done"
            and r.lease_owner == owner
            and r.lease_token == o.job.lease_token
        )
        applied[o.job.id, o.job.lease_token] = Recorded(ok)
        if ok and marked.marked > 0:
            ended.append((o.job.id, "done", o.job.parent_id))
    return None


def _insert_spawns(
    ctx: StoreContext,
    conn: Connection,
    owner: str,
    done: Sequence[Outcome],
    ended: list[tuple[int, str, int | None]],
) -> bool:
    """Insert what the attempts whose ``done`` this transaction recorded spawned.

    A spawn the database refuses now (a job it refers to by id vanished, or a container
    ended, since the handler staged it) ends its spawner ``failed`` instead, spawning
    nothing. Returns True if any spawner was so failed (``ended`` then says so).
    """
    now_done = {i for i, state, _ in ended if state == "done"}
    changed = False
    for o in done:
        if not o.spawns or o.job.id not in now_done:
            continue
        try:
            insert_spawned(ctx, conn, o.job.id, o.job.parent_id, o.spawns)
        except InvalidJob as exc:
            error = stored_error(f"its spawned jobs were refused at its end: {exc}")
            j = ctx.tables.jobs
            conn.execute(
                sa.update(j)
                .where(j.c.id == o.job.id, j.c.lease_token == o.job.lease_token)
                .values(state="failed", result=None, error=error, updated_at=ctx.now)
            )
            ended[:] = [
                (i, "failed" if i == o.job.id else state, p) for i, state, p in ended
            ]
            record_attempt(
                ctx, conn, job_id=o.job.id, lease_token=o.job.lease_token,
                attempt=o.job.attempt, worker=owner, outcome=FAILED, error=error,
                started_at=start_of(ctx, o.job.id),
            )
            changed = True
    return changed


def _record_one(
    ctx: StoreContext,
    conn: Connection,
    owner: str,
    o: Outcome,
    applied: Applied,
    ended: list[tuple[int, str, int | None]],
) -> None:
    j = ctx.tables.jobs
    now = ctx.now
    job = o.job
    fence = sa.and_(
        j.c.id == job.id,
        j.c.lease_token == job.lease_token,
        j.c.lease_owner == owner,
        j.c.state == "running",
    )
    final: str | None
    values: dict[str, Any]
    if o.kind == OutcomeKind.RETRY:
        final = None
        values = {"state": "ready", "error": stored_error(o.error), "run_after": now + o.delay}
        # A cancel requested while the attempt ran wins over the retry.
        fence = sa.and_(fence, j.c.cancel_requested == sa.false())
    elif o.kind == OutcomeKind.RELEASE:
        # Handed back by a worker that is shutting down: no attempt is charged.
        final = None
        values = {"state": "ready", "attempts": j.c.attempts - 1, "run_after": None}
        # A cancel requested while the attempt ran wins over the hand-back too.
        fence = sa.and_(fence, j.c.cancel_requested == sa.false())
    elif o.kind in (OutcomeKind.FAIL, OutcomeKind.CANCEL):
        final = "failed" if o.kind == OutcomeKind.FAIL else "cancelled"
        values = {"state": final, "error": stored_error(o.error), "finished_at": now}
    else:
        raise ValueError(f"unknown outcome kind {o.kind!r}")
    values.update(lease_expires=None, deadline=None, updated_at=now)
    count = conn.execute(sa.update(j).where(fence).values(**values)).rowcount
    if count == 0 and o.kind in (OutcomeKind.RETRY, OutcomeKind.RELEASE):
        count = conn.execute(
            sa.update(j)
            .where(
                j.c.id == job.id,
                j.c.lease_token == job.lease_token,
                j.c.lease_owner == owner,
                j.c.state == "running",
                j.c.cancel_requested == sa.true(),
            )
            .values(
                state="cancelled",
                error=stored_error(o.error) if o.error else "cancelled",
                finished_at=now,
                lease_expires=None,
                deadline=None,
                updated_at=now,
            )
        ).rowcount
        if count:
            final = "cancelled"
    if count == 1:
        applied[job.id, job.lease_token] = Recorded.RECORDED
        if final is not None:
            ended.append((job.id, final, job.parent_id))
        record_attempt(
            ctx, conn, job_id=job.id, lease_token=job.lease_token, attempt=job.attempt,
            worker=owner, outcome=_attempt_outcome(o, final), error=stored_error(o.error),
            started_at=start_of(ctx, job.id),
        )
        return
    # Fenced out, unless this very outcome was committed by an earlier try whose
    # COMMIT reply was lost.
    row = conn.execute(
        sa.select(
            j.c.state, j.c.lease_token, j.c.lease_owner, j.c.error, j.c.run_after
        ).where(j.c.id == job.id)
    ).first()
    # A sweep of the expired lease also leaves this owner and token behind, with its
    # own error: only the values this outcome writes show it was committed.
    if row is None:
        ours = True
    elif o.kind == OutcomeKind.RELEASE and row.state == "ready":
        ours = row.run_after is None
    else:
        ours = row.error == (stored_error(o.error) if o.error else "cancelled")
    mine = row is not None and row.lease_owner == owner and row.lease_token == job.lease_token
    if row is None or not mine:
        applied[job.id, job.lease_token] = Recorded.FENCED
    elif row.state in _LEAVES[OutcomeKind(o.kind)] and ours:
        applied[job.id, job.lease_token] = Recorded.RECORDED
    elif (o.error_type == TIMEOUT or o.kind == OutcomeKind.RELEASE) and (
        row.error or ""
    ).startswith(TIMED_OUT):
        # The worker killed its child at the deadline (or hands the attempt back as it
        # stops), and a sweep recorded the timeout first: one end, told once, by the
        # sweep.
        applied[job.id, job.lease_token] = Recorded.SWEPT
    else:
        applied[job.id, job.lease_token] = Recorded.FENCED
