"""The operator's writes: cancel, retry and prune.

Each is one unit in one transaction (prune: one per batch), with the rows it decides on
locked, so that no job it changes can end or be claimed unseen meanwhile.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from readyq.errors import JobNotFound, NotClosable, NotRetryable
from readyq.listing import JobFilter
from readyq.model import BAD_ENDS, IN_FLIGHT_STATES, TERMINAL_STATES, UNFINISHED_STATES
from readyq.reports import RetryResult
from readyq.schema import MAX_ATTEMPTS_FROM_HANDLER
from readyq.sql.listing import page_query
from readyq.store import memory
from readyq.store.context import StoreContext
from readyq.store.enqueue import taken_keys
from readyq.store.graph import propagate
from readyq.store.inspection import CHUNK, chunks

TERMINAL = tuple(sorted(s.value for s in TERMINAL_STATES))
# Who may be recorded as asking for a cancel (``jobs.cancelled_by``).
CANCEL_SOURCES = ("api", "cli", "dashboard")


@dataclass
class Cancelled:
    """What a cancel did: jobs ended ``cancelled`` at once (waiting or ready ones, and
    empty containers), and running ones asked to stop."""

    ended: int = 0
    requested: int = 0

    def add(self, other: Cancelled) -> None:
        self.ended += other.ended
        self.requested += other.requested


def cancel(
    ctx: StoreContext, conn: Connection, job_id: int, by: str = "api"
) -> Cancelled | None:
    """Cancel a job; see ``Queue.cancel``. Returns None if it had already ended. ``by``
    (one of :data:`CANCEL_SOURCES`) is recorded on every job the cancel reaches.

    A container is marked as cancelled and its children are cancelled: when they have
    all ended it ends ``cancelled`` (``done`` if every one of them still ended done),
    never ``failed`` (see :func:`readyq.store.graph.propagate`).
    """
    j = ctx.tables.jobs
    now = ctx.now
    row = conn.execute(
        sa.select(j.c.state, j.c.parent_id).where(j.c.id == job_id).with_for_update()
    ).first()
    if row is None:
        raise JobNotFound(f"no job with id {job_id}")
    state = row.state
    if state in ("waiting", "ready"):
        conn.execute(
            sa.update(j)
            .where(j.c.id == job_id, j.c.state == state)
            .values(state="cancelled", error="cancelled", cancelled_by=by, finished_at=now,
                    updated_at=now)
        )
        propagate(ctx, conn, [(job_id, "cancelled", row.parent_id)])
        return Cancelled(ended=1)
    asked = {"cancel_requested": True, "cancelled_by": by, "updated_at": now}
    if state in IN_FLIGHT_STATES:
        conn.execute(sa.update(j).where(j.c.id == job_id).values(**asked))
        return Cancelled(requested=1)
    if state == "active":
        conn.execute(sa.update(j).where(j.c.id == job_id).values(**asked))
        done = Cancelled()
        children = conn.execute(
            sa.select(j.c.id).where(
                j.c.parent_id == job_id, j.c.state.in_((*UNFINISHED_STATES, "active"))
            )
            # In id order: the outcome (a child whose sibling it depends on, cancelled
            # first, ends upstream_failed) is the same on every database and every run.
            .order_by(j.c.id)
        ).scalars().all()
        for child in children:
            part = cancel(ctx, conn, int(child), by)
            if part is not None:
                done.add(part)
        still = conn.execute(sa.select(j.c.state).where(j.c.id == job_id)).scalar_one()
        if still == "active" and not children:
            conn.execute(
                sa.update(j)
                .where(j.c.id == job_id, j.c.state == "active")
                .values(state="cancelled", error="cancelled", finished_at=now, updated_at=now)
            )
            propagate(ctx, conn, [(job_id, "cancelled", row.parent_id)])
            done.ended += 1
        return done
    return None


def close_container(ctx: StoreContext, conn: Connection, job_id: int) -> None:
    """End an empty container ``done``; see ``Queue.close_container``. Every row it
    decides on is locked."""
    t = ctx.tables
    j, d = t.jobs, t.deps
    row = conn.execute(
        sa.select(j.c.state, j.c.is_container, j.c.parent_id, j.c.open_children)
        .where(j.c.id == job_id)
        .with_for_update()
    ).first()
    if row is None:
        raise JobNotFound(f"no job with id {job_id}")
    if not row.is_container:
        raise NotClosable(f"job {job_id} is not a container")
    if row.state != "active":
        raise NotClosable(f"container {job_id} has already ended ({row.state})")
    # Its children's and dependencies' states as they are, not its counters: a close may
    # end a container whose counter went wrong, never one that has something to wait for.
    live = int(conn.execute(
        sa.select(sa.func.count()).where(j.c.parent_id == job_id, j.c.state.not_in(TERMINAL))
    ).scalar_one())
    if live:
        raise NotClosable(
            f"container {job_id} has {live} child job(s) that have not ended: it ends when "
            "they do"
        )
    if row.open_children > 0:
        raise NotClosable(
            f"container {job_id} counts {row.open_children} open children though none is "
            "unfinished (edited by hand?): cancel it instead"
        )
    ups = sorted(
        int(x) for x in conn.execute(sa.select(d.c.depends_on_id).where(d.c.job_id == job_id))
        .scalars()
    )
    states = {
        int(r.id): r.state
        for chunk in chunks(ups)
        for r in conn.execute(
            sa.select(j.c.id, j.c.state).where(j.c.id.in_(chunk)).with_for_update()
        )
    }
    bad = [i for i in ups if states.get(i) in BAD_ENDS]
    if bad:
        raise NotClosable(
            f"container {job_id} depends on job {bad[0]}, which ended {states[bad[0]]}: "
            f"retry job {bad[0]} (the container ends done once it is), or cancel the container"
        )
    unfinished = [i for i in ups if states.get(i) != "done"]
    if unfinished:
        raise NotClosable(
            f"container {job_id} still waits for {_jobs_phrase(unfinished)}: it ends done "
            "by itself when they are, if it has no children by then"
        )
    conn.execute(
        sa.update(j)
        .where(j.c.id == job_id, j.c.state == "active")
        .values(state="done", error=None, pending_deps=0, finished_at=ctx.now,
                updated_at=ctx.now)
    )
    propagate(ctx, conn, [(job_id, "done", row.parent_id)])


def retry(
    ctx: StoreContext, conn: Connection, job_id: int, extra: int, fresh: bool = False
) -> RetryResult:
    """Put a failed, cancelled or upstream_failed job back, with what failed because of
    it, in the open transaction; see :func:`readyq.admin.retry` for the rules. Every
    row it reads is locked. With ``fresh`` the revived jobs' steps, state and progress
    are deleted too."""
    t = ctx.tables
    j, d = t.jobs, t.deps
    now = ctx.now
    cols = (j.c.id, j.c.state, j.c.is_container, j.c.parent_id)

    def lock(stmt: sa.Select[Any]) -> sa.Select[Any]:
        return stmt.with_for_update()

    row = conn.execute(lock(sa.select(*cols).where(j.c.id == job_id))).first()
    if row is None:
        raise JobNotFound(f"no job with id {job_id}")
    if row.state not in BAD_ENDS:
        what = "is done" if row.state == "done" else f"is {row.state}, not finished"
        raise NotRetryable(
            f"job {job_id} {what}: only failed, cancelled or upstream_failed jobs can be retried"
        )

    info: dict[int, Any] = {int(row.id): row}

    def load(ids: Iterable[int]) -> None:
        for chunk in chunks(i for i in ids if i not in info):
            for r in conn.execute(lock(sa.select(*cols).where(j.c.id.in_(chunk)))):
                info[int(r.id)] = r

    # Dependencies of each job considered, with their states (rows locked, so none of
    # them can end unseen while this transaction decides).
    dep_states: dict[int, dict[int, str]] = {}

    def load_deps(ids: Iterable[int]) -> None:
        todo = [i for i in ids if i not in dep_states]
        for i in todo:
            dep_states[i] = {}
        for chunk in chunks(todo):
            edges = conn.execute(
                sa.select(d.c.job_id, d.c.depends_on_id).where(d.c.job_id.in_(chunk))
            ).all()
            load(int(e.depends_on_id) for e in edges)
            for e in edges:
                dep_states[int(e.job_id)][int(e.depends_on_id)] = info[int(e.depends_on_id)].state

    def refuse_upstream(i: int) -> None:
        """Refuse a retry of ``i`` while a job it depends on ended badly, naming the job
        whose retry revives it too."""
        load_deps([i])
        bad = sorted(dep for dep, state in dep_states[i].items() if state in BAD_ENDS)
        if bad:
            causes = _root_causes(ctx, conn, bad)
            raise NotRetryable(
                f"job {i} depends on job {bad[0]}, which ended {info[bad[0]].state}: "
                f"retry {_jobs_phrase(causes)} instead; that revives this job too"
            )

    if row.is_container and row.state == "upstream_failed":
        # Ended by its own dependencies, like a job: their retry revives it.
        refuse_upstream(job_id)
    if row.is_container:
        roots = []
        frontier = [job_id]
        while frontier:
            kids = []
            for chunk in chunks(frontier):
                kids += list(conn.execute(lock(sa.select(*cols).where(j.c.parent_id.in_(chunk)))))
            for k in kids:
                info[int(k.id)] = k
            roots += [
                int(k.id) for k in kids if not k.is_container and k.state in ("failed", "cancelled")
            ]
            frontier = [int(k.id) for k in kids if k.is_container]
        if not roots:
            raise NotRetryable(f"container {job_id} holds no failed or cancelled job to retry")
    else:
        roots = [job_id]
        refuse_upstream(job_id)

    revived: dict[int, int] = {}  # job id -> unfinished dependencies
    reopened: list[int] = []
    adjust: dict[int, int] = defaultdict(int)  # container id -> children revived
    allowed = set(roots)
    order: list[int] = []

    def admissible(i: int) -> bool:
        return all(
            state not in BAD_ENDS or dep in revived or dep in reopened
            for dep, state in dep_states[i].items()
        )

    def reopen_parents(i: int) -> list[int]:
        """Count ``i`` open again in its container; reopen containers that had ended."""
        newly = []
        parent = info[i].parent_id
        while parent is not None:
            parent = int(parent)
            load([parent])
            adjust[parent] += 1
            p = info[parent]
            if p.state == "active" or parent in reopened:
                break
            if p.state == "done":
                raise NotRetryable(
                    f"container {parent} is done although job {i} inside it did not end "
                    "done: its counters are inconsistent; refusing to change it"
                )
            reopened.append(parent)
            newly.append(parent)
            parent = p.parent_id
        return newly

    wave = list(roots)
    while wave:
        load(wave)
        load_deps(wave)
        admitted = []
        for i in sorted(set(wave)):
            if i in revived or i in reopened:
                continue
            if i not in allowed and info[i].state != "upstream_failed":
                continue
            if not admissible(i):
                continue
            if info[i].is_container:
                # Ended upstream_failed by its own dependencies: active again, with
                # whatever of its children are revived (they depend on the same jobs).
                reopened.append(i)
            else:
                revived[i] = sum(1 for s in dep_states[i].values() if s != "done")
                order.append(i)
            admitted.append(i)
            admitted += reopen_parents(i)
        # Next wave: dependents of everything revived or reopened in this one.
        nxt: list[int] = []
        for chunk in chunks(admitted):
            nxt += [
                int(x)
                for x in conn.execute(
                    sa.select(d.c.job_id).where(d.c.depends_on_id.in_(chunk))
                ).scalars()
            ]
        wave = [i for i in set(nxt) if i not in revived]
        load(wave)
        wave = [i for i in wave if info[i].state == "upstream_failed" or i in allowed]

    if not revived:
        raise NotRetryable(
            f"nothing in container {job_id} can be retried: every failed or cancelled job "
            "inside it depends on a job that ended badly outside it"
        )

    taken = taken_keys(ctx, conn, sorted(revived))
    if taken:
        job, key, holder = taken[0]
        raise NotRetryable(
            f"job {job} cannot be retried: its unique key {key!r} is held by job {holder}, "
            "which has not ended"
        )

    by_pending: dict[int, list[int]] = defaultdict(list)
    for i, pending in revived.items():
        by_pending[pending].append(i)
    bump = j.c.attempts + extra
    for pending, ids in sorted(by_pending.items()):
        for chunk in chunks(ids):
            conn.execute(
                sa.update(j)
                .where(j.c.id.in_(chunk), j.c.state.in_(BAD_ENDS))
                .values(
                    state="ready" if pending == 0 else "waiting",
                    pending_deps=pending,
                    error=None,
                    result=None,
                    started_at=None,
                    finished_at=None,
                    run_after=None,
                    lease_expires=None,
                    deadline=None,
                    cancel_requested=False,
                    cancelled_by=None,
                    # Still the handler's to decide if it was never given, else raised.
                    max_attempts=sa.case(
                        (j.c.max_attempts == MAX_ATTEMPTS_FROM_HANDLER, j.c.max_attempts),
                        (j.c.max_attempts < bump, bump),
                        else_=j.c.max_attempts,
                    ),
                    updated_at=now,
                )
            )
    # A container counts its unfinished dependencies again too: its end when the last
    # one is done depends on that count.
    load_deps(reopened)
    by_open: dict[int, list[int]] = defaultdict(list)
    for i in reopened:
        by_open[sum(1 for s in dep_states[i].values() if s != "done")].append(i)
    for pending, ids in sorted(by_open.items()):
        for chunk in chunks(ids):
            conn.execute(
                sa.update(j)
                .where(j.c.id.in_(chunk), j.c.state.in_(BAD_ENDS))
                .values(
                    state="active", pending_deps=pending, error=None, finished_at=None,
                    updated_at=now,
                )
            )
    for container, n in sorted(adjust.items()):
        conn.execute(
            sa.update(j)
            .where(j.c.id == container)
            .values(
                open_children=j.c.open_children + n,
                failed_children=j.c.failed_children - n,
                updated_at=now,
            )
        )
    if fresh:
        memory.forget(ctx, conn, sorted({job_id, *order}))
    return RetryResult(
        job_id=job_id,
        revived=[(i, "ready" if revived[i] == 0 else "waiting") for i in order],
        reopened=reopened,
    )


def _root_causes(ctx: StoreContext, conn: Connection, bad: Sequence[int]) -> list[int]:
    """Follow ``upstream_failed`` jobs up to the jobs that failed or were cancelled."""
    t = ctx.tables
    j, d = t.jobs, t.deps
    causes: set[int] = set()
    seen: set[int] = set()
    frontier = list(bad)
    while frontier and len(seen) < 10_000:
        seen.update(frontier)
        rows = conn.execute(sa.select(j.c.id, j.c.state).where(j.c.id.in_(frontier[:CHUNK]))).all()
        frontier = frontier[CHUNK:]
        up = [int(r.id) for r in rows if r.state == "upstream_failed"]
        causes.update(int(r.id) for r in rows if r.state != "upstream_failed")
        for chunk in chunks(up):
            for r in conn.execute(
                sa.select(d.c.depends_on_id)
                .select_from(d.join(j, j.c.id == d.c.depends_on_id))
                .where(d.c.job_id.in_(chunk), j.c.state.in_(BAD_ENDS))
            ).scalars():
                if int(r) not in seen:
                    frontier.append(int(r))
    return sorted(causes) or sorted(bad)


def _jobs_phrase(ids: Sequence[int]) -> str:
    shown = ", ".join(str(i) for i in ids[:5])
    more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
    return f"job {shown}" if len(ids) == 1 else f"jobs {shown}{more}"


def prune_candidates(ctx: StoreContext, conn: Connection, older_than: float) -> tuple[float, int]:
    """The cutoff (the database's clock less ``older_than`` seconds) and how many
    finished jobs ended before it."""
    j = ctx.tables.jobs
    cutoff = float(conn.execute(sa.select(ctx.now)).scalar_one()) - older_than
    n = conn.execute(
        sa.select(sa.func.count()).where(j.c.state.in_(TERMINAL), j.c.finished_at < cutoff)
    ).scalar_one()
    return cutoff, int(n)


def prune_batch(
    ctx: StoreContext, conn: Connection, cutoff: float, below: int | None, batch_size: int
) -> tuple[int | None, int, int]:
    """Delete up to ``batch_size`` jobs that finished before ``cutoff`` (ids below
    ``below``, newest first), none that a remaining job depends on or is inside, with
    their own edges. Returns (the least id looked at or None when none was, jobs
    deleted, edges deleted)."""
    j, d = ctx.tables.jobs, ctx.tables.deps
    child = j.alias("child")
    old = sa.and_(j.c.state.in_(TERMINAL), j.c.finished_at < cutoff)
    leaf = sa.and_(
        ~sa.exists().where(d.c.depends_on_id == j.c.id),
        ~sa.exists().where(child.c.parent_id == j.c.id),
    )
    stmt = sa.select(j.c.id).where(old, leaf)
    if below is not None:
        stmt = stmt.where(j.c.id < below)
    ids = [
        int(x)
        for x in conn.execute(
            stmt.order_by(j.c.id.desc()).limit(batch_size).with_for_update()
        ).scalars()
    ]
    if not ids:
        return None, 0, 0
    # Re-check under the locks: a job enqueued meanwhile may depend on one of them
    # (enqueue locks the rows it depends on, so none can appear after this).
    blocked = {
        int(x)
        for x in conn.execute(
            sa.select(d.c.depends_on_id).where(d.c.depends_on_id.in_(ids))
        ).scalars()
    }
    blocked.update(
        int(x)
        for x in conn.execute(sa.select(j.c.parent_id).where(j.c.parent_id.in_(ids))).scalars()
    )
    ok = [i for i in ids if i not in blocked]
    edges = jobs = 0
    if ok:
        edges = conn.execute(sa.delete(d).where(d.c.job_id.in_(ok))).rowcount
        jobs = conn.execute(sa.delete(j).where(j.c.id.in_(ok), old)).rowcount
    return min(ids), int(jobs or 0), int(edges or 0)


# -- bulk actions --------------------------------------------------------------------------

# How many reasons for skipped jobs a bulk action reports.
MAX_REASONS = 20


@dataclass
class Tally:
    """What one batch of a bulk action did (merged by the caller once committed)."""

    matched: int = 0
    changed: list[int] = field(default_factory=list)
    requested: int = 0
    skipped: int = 0
    reasons: list[tuple[int, str]] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        self.matched += other.matched
        self.changed += other.changed
        self.requested += other.requested
        self.skipped += other.skipped
        self.reasons += other.reasons[: max(0, MAX_REASONS - len(self.reasons))]

    def skip(self, job_id: int, reason: str) -> None:
        self.skipped += 1
        if len(self.reasons) < MAX_REASONS:
            self.reasons.append((job_id, reason))


def bulk_batch(
    ctx: StoreContext,
    conn: Connection,
    action: str,
    flt: JobFilter,
    now: float,
    after_id: int | None,
    limit: int,
    extra: int,
    by: str = "api",
) -> tuple[int | None, Tally]:
    """Retry (``action="retry"``) or cancel up to ``limit`` jobs matching ``flt`` above
    ``after_id``, oldest first, one by one with the rules of :func:`retry` and
    :func:`cancel`; a job either refuses is skipped with the reason. Returns the last id
    looked at (None once none is left) and what the batch did."""
    j = ctx.tables.jobs
    tally = Tally()
    rows = conn.execute(
        page_query(
            ctx.tables, flt, now, order="oldest", after_id=after_id, limit=limit,
            columns=(j.c.id, j.c.state),
        )
    ).all()
    done: set[int] = set()
    for r in rows:
        job_id = int(r.id)
        tally.matched += 1
        if job_id in done:  # revived or cancelled with a job before it in this batch
            continue
        if action == "retry":
            try:
                result = retry(ctx, conn, job_id, extra)
            except NotRetryable as exc:
                tally.skip(job_id, str(exc))
                continue
            for i in [i for i, _ in result.revived] + list(result.reopened):
                if i not in done:
                    done.add(i)
                    tally.changed.append(i)
        else:
            if cancel(ctx, conn, job_id, by) is not None:
                done.add(job_id)
                if r.state in IN_FLIGHT_STATES:
                    tally.requested += 1
                else:
                    tally.changed.append(job_id)
            else:
                state = conn.execute(sa.select(j.c.state).where(j.c.id == job_id)).scalar()
                if state in ("cancelled", "upstream_failed"):
                    # Unfinished when the batch read it: ended by the cancel of a job
                    # before it in this batch (its container, or a job it depends on).
                    done.add(job_id)
                    tally.changed.append(job_id)
                else:
                    tally.skip(job_id, f"job {job_id} had already ended ({state})")
    last = int(rows[-1].id) if len(rows) == limit else None
    return last, tally


def prune_preview(ctx: StoreContext, conn: Connection, cutoff: float) -> tuple[int, int, int]:
    """What a prune with ``cutoff`` would delete now, deleting nothing: (jobs finished
    before the cutoff, jobs it would delete, dependency rows it would delete).

    A finished job stays when a job that stays depends on it or is inside it: the jobs
    that stay because of a job that is not old enough are found first, then what they
    keep in turn, until nothing more is kept (what the prune's passes arrive at).
    """
    j, d = ctx.tables.jobs, ctx.tables.deps
    up, down, child = j.alias("up"), j.alias("down"), j.alias("child")

    def old(t: Any) -> sa.ColumnElement[bool]:
        return sa.and_(t.c.state.in_(TERMINAL), t.c.finished_at < cutoff)

    candidates = int(conn.execute(sa.select(sa.func.count()).where(old(j))).scalar_one())
    if not candidates:
        return 0, 0, 0
    kept: set[int] = set()
    frontier = {
        int(x)
        for x in conn.execute(
            sa.select(d.c.depends_on_id)
            .select_from(
                d.join(up, up.c.id == d.c.depends_on_id).join(down, down.c.id == d.c.job_id)
            )
            .where(old(up), ~old(down))
            .union(
                sa.select(child.c.parent_id)
                .select_from(child.join(up, up.c.id == child.c.parent_id))
                .where(old(up), ~old(child))
            )
        ).scalars()
    }
    while frontier:
        kept |= frontier
        found: set[int] = set()
        for chunk in chunks(frontier):
            found.update(
                int(x)
                for x in conn.execute(
                    sa.select(d.c.depends_on_id)
                    .select_from(d.join(up, up.c.id == d.c.depends_on_id))
                    .where(d.c.job_id.in_(chunk), old(up))
                ).scalars()
            )
            found.update(
                int(x)
                for x in conn.execute(
                    sa.select(up.c.id)
                    .select_from(child.join(up, up.c.id == child.c.parent_id))
                    .where(child.c.id.in_(chunk), old(up))
                ).scalars()
            )
        frontier = found - kept
    edges = int(
        conn.execute(
            sa.select(sa.func.count()).select_from(d.join(j, j.c.id == d.c.job_id)).where(old(j))
        ).scalar_one()
    )
    for chunk in chunks(kept):
        edges -= int(
            conn.execute(sa.select(sa.func.count()).where(d.c.job_id.in_(chunk))).scalar_one()
        )
    return candidates, candidates - len(kept), edges
