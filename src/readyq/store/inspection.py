"""Reads behind ``Queue.get``, the metrics gauges and the operator's views: status,
a job's detail, the dependency graph around a job.

Each is one read-only unit; none takes a lock. Instants come from the database's clock.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from readyq.errors import InvalidFilter, JobNotFound
from readyq.listing import JobFilter, decode_cursor, encode_cursor
from readyq.model import (
    BAD_ENDS,
    IN_FLIGHT_STATES,
    GroupStats,
    JobInfo,
    JobProgress,
    JobState,
    ProgressStats,
    ResourceStats,
    from_epoch,
)
from readyq.payload import decode_stored
from readyq.reports import (
    INSTANTS,
    Graph,
    GroupShare,
    HeldJob,
    JobDetail,
    JobPage,
    JobRef,
    Node,
    OldestReady,
    Overview,
    RateUse,
    RunningProgress,
    SavedState,
    Status,
    StepRecord,
    StuckJob,
    UnclaimedType,
    WorkerReport,
    WorkerSeen,
    duration_text,
    ordered_states,
)
from readyq.resources import decode as decode_uses
from readyq.schema import MAX_ATTEMPTS_FROM_HANDLER
from readyq.sql.jobs import empty_containers
from readyq.sql.listing import instant, needs_clock, page_query, progress_query
from readyq.sql.ready import (
    active_containers,
    in_flight_by_group,
    runnable,
    state_in,
    waiting_of_types,
)
from readyq.store.context import StoreContext
from readyq.store.history import attempts_of

# IN lists are sent in chunks of this many ids (well under every database's limit).
CHUNK = 500


def _max_attempts(stored: Any) -> int | None:
    """A stored ``max_attempts``; None for a job whose handler decides when it runs."""
    return None if int(stored) == MAX_ATTEMPTS_FROM_HANDLER else int(stored)


def chunks(ids: Iterable[int], size: int = CHUNK) -> Iterable[list[int]]:
    """``ids``, sorted and without repeats, in lists of at most ``size``."""
    items = sorted(set(ids))
    for i in range(0, len(items), size):
        yield items[i : i + size]


def job_info(ctx: StoreContext, conn: Connection, job_id: int) -> JobInfo:
    """One job as :class:`readyq.JobInfo`. Raises JobNotFound."""
    j, d = ctx.tables.jobs, ctx.tables.deps
    row = conn.execute(sa.select(j).where(j.c.id == job_id)).first()
    if row is None:
        raise JobNotFound(f"no job with id {job_id}")
    deps = conn.execute(
        sa.select(d.c.depends_on_id).where(d.c.job_id == job_id).order_by(d.c.depends_on_id)
    ).scalars()
    return info_from_row(row, tuple(int(x) for x in deps), progress_of(ctx, conn, job_id))


def progress_of(ctx: StoreContext, conn: Connection, job_id: int) -> JobProgress | None:
    """What the job's handler reported last with ``Job.progress``, or None."""
    c = ctx.tables.checkpoints
    row = conn.execute(
        sa.select(c.c.progress_current, c.c.progress_total, c.c.progress_message,
                  c.c.progress_at).where(c.c.job_id == job_id)
    ).first()
    return progress_from_row(row)


# The steps of one job that ``readyq show`` and the dashboard list (by name); beyond,
# they are counted.
STEP_ROWS = 100


def memory_report(
    ctx: StoreContext, conn: Connection, job_id: int
) -> tuple[JobProgress | None, SavedState | None, list[StepRecord], int]:
    """What a job's attempts kept, for the operator's views: its progress, its saved
    state, its first ``STEP_ROWS`` steps by name (their results' sizes, not the results)
    and the number of all its steps. Reads through the primary keys only."""
    c, s = ctx.tables.checkpoints, ctx.tables.steps
    row = conn.execute(
        sa.select(c.c.state, c.c.state_attempt, c.c.saved_at, ctx.dialect.octets(c.c.state)
                  .label("size"), c.c.progress_current, c.c.progress_total,
                  c.c.progress_message, c.c.progress_at).where(c.c.job_id == job_id)
    ).first()
    saved = None
    if row is not None and row.state is not None:
        saved = SavedState(
            value=decode_stored(row.state),
            attempt=None if row.state_attempt is None else int(row.state_attempt),
            saved_at=_float(row.saved_at), size=int(row.size or 0),
        )
    steps = [
        StepRecord(name=r.name, attempt=int(r.attempt), stored_at=float(r.stored_at),
                   size=int(r.size or 0))
        for r in conn.execute(
            sa.select(s.c.name, s.c.attempt, s.c.stored_at,
                      ctx.dialect.octets(s.c.result).label("size"))
            .where(s.c.job_id == job_id).order_by(s.c.name).limit(STEP_ROWS)
        )
    ]
    count = len(steps)
    if count == STEP_ROWS:
        count = int(conn.execute(
            sa.select(sa.func.count()).select_from(s).where(s.c.job_id == job_id)
        ).scalar_one())
    return progress_from_row(row), saved, steps, count


def progress_of_page(ctx: StoreContext, conn: Connection, ids: Iterable[int]
                     ) -> dict[int, JobProgress]:
    """The progress of each of ``ids`` that reported any, by job id (see
    :func:`readyq.sql.listing.progress_query`)."""
    out: dict[int, JobProgress] = {}
    for chunk in chunks(ids):
        for r in conn.execute(progress_query(ctx.tables, chunk)):
            p = progress_from_row(r)
            if p is not None:
                out[int(r.job_id)] = p
    return out


def _in_flight_with_progress(ctx: StoreContext) -> sa.Select[Any]:
    """The jobs in flight (through their index) joined to their progress."""
    j, c = ctx.tables.jobs, ctx.tables.checkpoints
    return (
        sa.select()
        .select_from(j.join(c, c.c.job_id == j.c.id))
        .where(state_in(ctx.tables, *IN_FLIGHT_STATES), c.c.progress_current.is_not(None))
    )


def in_flight_progress(ctx: StoreContext, conn: Connection, limit: int
                       ) -> list[RunningProgress]:
    """The first ``limit`` jobs in flight (by id) that reported progress."""
    j, c = ctx.tables.jobs, ctx.tables.checkpoints
    stmt = _in_flight_with_progress(ctx).add_columns(
        j.c.id, j.c.type, j.c.state, j.c.lease_owner, c.c.progress_current,
        c.c.progress_total, c.c.progress_message, c.c.progress_at,
    ).order_by(j.c.id).limit(limit)
    out = []
    for r in conn.execute(stmt):
        p = progress_from_row(r)
        assert p is not None  # the query keeps only rows with progress
        out.append(RunningProgress(int(r.id), r.type, r.state, r.lease_owner, p))
    return out


def progress_stats(ctx: StoreContext, conn: Connection) -> dict[str, ProgressStats]:
    """Per job type: its jobs in flight that reported progress, those that gave a total,
    and the mean fraction done of those. One grouped read of the jobs in flight (bounded
    by the workers' caps) and their checkpoints."""
    j, c = ctx.tables.jobs, ctx.tables.checkpoints
    cur, tot = c.c.progress_current, c.c.progress_total
    # current / total clamped to 0..1 (NULL without a total, which AVG leaves out), as
    # JobProgress.fraction computes it.
    fraction = sa.case(
        (tot.is_(None), sa.null()),
        (cur >= tot, sa.literal(1.0, sa.Double)),
        (cur <= 0, sa.literal(0.0, sa.Double)),
        else_=cur / tot,
    )
    stmt = _in_flight_with_progress(ctx).add_columns(
        j.c.type, sa.func.count().label("n"), sa.func.count(tot).label("with_total"),
        sa.func.avg(fraction).label("mean"),
    ).group_by(j.c.type).order_by(j.c.type)
    return {
        r.type: ProgressStats(
            type=r.type, reporting=int(r.n), with_total=int(r.with_total),
            mean_fraction=None if r.mean is None else float(r.mean),
        )
        for r in conn.execute(stmt)
    }


def progress_from_row(row: Any) -> JobProgress | None:
    """A JobProgress from a row's ``progress_*`` columns (None if it has none)."""
    if row is None or row.progress_current is None:
        return None
    return JobProgress(
        float(row.progress_current),
        None if row.progress_total is None else float(row.progress_total),
        row.progress_message, from_epoch(row.progress_at),
    )


def ready_types(ctx: StoreContext, conn: Connection, limit: int) -> list[str]:
    """The distinct types of ready jobs, in order, at most ``limit`` of them: a skip
    scan of the index of ready jobs by type, one probe per type found."""
    t = ctx.tables
    j = t.jobs
    column = j.c.type if t.traits.partial_indexes else j.c.ready_type
    ready = state_in(t, "ready") if t.traits.partial_indexes else column.is_not(None)
    found: list[str] = []
    while len(found) < limit:
        probe = sa.select(sa.func.min(column)).where(ready)
        if found:
            probe = probe.where(column > found[-1])
        nxt = conn.execute(probe).scalar()
        if nxt is None:
            break
        found.append(str(nxt))
    return found


def state_counts(ctx: StoreContext, conn: Connection) -> dict[str, int]:
    """Number of jobs per state."""
    j = ctx.tables.jobs
    stmt = sa.select(j.c.state, sa.func.count()).group_by(j.c.state)
    return {r[0]: int(r[1]) for r in conn.execute(stmt)}


def group_stats(ctx: StoreContext, conn: Connection) -> dict[str, GroupStats]:
    """Per group: claimable jobs, the longest wait among them, and jobs in flight.

    Two grouped reads, one over the ready rows and one over the leased and running rows
    (bounded by the cap); finished jobs are never read.
    """
    j = ctx.tables.jobs
    now = float(conn.execute(sa.select(ctx.now)).scalar_one())
    # As in ``status``: a ready job became claimable when it last changed, or when its
    # run_after passed if that came later.
    since = sa.case((j.c.run_after > j.c.updated_at, j.c.run_after), else_=j.c.updated_at)
    ready = conn.execute(
        sa.select(j.c.group_key, sa.func.count().label("n"), sa.func.min(since).label("since"))
        .where(runnable(ctx.tables, sa.literal(now, sa.Double), costed=True))
        .group_by(j.c.group_key)
    ).all()
    flight: dict[str, int] = {}
    uses: dict[str, dict[str, int]] = {}
    for key, stored, n, _ in ctx.dialect.in_flight_uses(conn, ctx.tables):
        flight[key] = flight.get(key, 0) + n
        mine = uses.setdefault(key, {})
        for name, units in decode_uses(stored).items():
            mine[name] = mine.get(name, 0) + units * n
    out = {
        r.group_key: GroupStats(
            group=r.group_key,
            ready=int(r.n),
            in_flight=flight.get(r.group_key, 0),
            oldest_ready_age=max(0.0, now - float(r.since)),
            uses=dict(sorted(uses.get(r.group_key, {}).items())),
        )
        for r in ready
    }
    for key, n in flight.items():
        if key not in out:
            out[key] = GroupStats(
                group=key, ready=0, in_flight=n, oldest_ready_age=None,
                uses=dict(sorted(uses.get(key, {}).items())),
            )
    return dict(sorted(out.items()))


# Runnable jobs read per resource report: what waits is counted up to this many.
WAITING_COUNT_MAX = 10_000


def known_resources(ctx: StoreContext, conn: Connection) -> dict[str, int]:
    """The resources workers' claims have recorded, with their capacities."""
    r = ctx.tables.resources
    return {row.name: int(row.capacity) for row in conn.execute(sa.select(r.c.name, r.c.capacity))}


def resource_stats(
    ctx: StoreContext,
    conn: Connection,
    defined: Sequence[str],
    handler_uses: Mapping[str, Mapping[str, int]],
) -> dict[str, ResourceStats]:
    """Per resource (those ``defined`` and those workers recorded): the capacity last
    recorded, the units in flight, the runnable jobs that use it (those stored without
    costs take ``handler_uses`` of their type, or, reserved, the costs their reservation
    holds) and the reservations that hold it."""
    t = ctx.tables
    j, r, res = t.jobs, t.resources, t.reservations
    now = float(conn.execute(sa.select(ctx.now)).scalar_one())
    seen = {
        row.name: (int(row.capacity), max(0.0, now - float(row.seen_at)))
        for row in conn.execute(sa.select(r.c.name, r.c.capacity, r.c.seen_at))
    }
    names = sorted(set(defined) | set(seen))
    in_use: dict[str, int] = {}
    for _, stored, n, _ in ctx.dialect.in_flight_uses(conn, t):
        for name, units in decode_uses(stored).items():
            in_use[name] = in_use.get(name, 0) + units * n
    waiting: dict[str, list[int]] = {}  # name -> [jobs, units, largest]

    def count(costs: Mapping[str, int], n: int) -> None:
        for name, units in costs.items():
            w = waiting.setdefault(name, [0, 0, 0])
            w[0] += n
            w[1] += units * n
            w[2] = max(w[2], units)

    live = runnable(t, sa.literal(now, sa.Double), costed=True)
    head = (
        sa.select(j.c.uses, j.c.type)
        .where(live, j.c.uses.is_not(None))
        .limit(WAITING_COUNT_MAX)
        .subquery()
    )
    for row in conn.execute(
        sa.select(head.c.uses, sa.func.count().label("n")).group_by(head.c.uses)
    ):
        count(decode_uses(row.uses), int(row.n))
    typed = sorted(k for k, v in handler_uses.items() if v)
    if typed:
        plain = (
            sa.select(j.c.type)
            .where(live, j.c.uses.is_(None), j.c.type.in_(typed))
            .limit(WAITING_COUNT_MAX)
            .subquery()
        )
        for row in conn.execute(
            sa.select(plain.c.type, sa.func.count().label("n")).group_by(plain.c.type)
        ):
            count(handler_uses[row.type], int(row.n))
    reserved: dict[str, int] = {}
    for row in conn.execute(
        sa.select(res.c.uses, j.c.uses.label("stored"), j.c.type)
        .select_from(res.join(j, j.c.id == res.c.job_id))
        .where(state_in(t, "ready"))
    ):
        costs = decode_uses(row.uses)
        for name in costs:
            reserved[name] = reserved.get(name, 0) + 1
        if row.stored is None and row.type not in typed:
            # Its handler's costs, unknown here but resolved by the claim that reserved it.
            count(costs, 1)
    out = {}
    for name in names:
        cap, age = seen.get(name, (None, None))
        jobs, units, largest = waiting.get(name, [0, 0, 0])
        out[name] = ResourceStats(
            name=name, capacity=cap, seen_age=age, in_use=in_use.get(name, 0),
            waiting=jobs, wanted=units, largest=largest, reserved=reserved.get(name, 0),
        )
    return out


def check_schema(ctx: StoreContext, conn: Connection) -> None:
    """Raise SchemaNotFound unless the tables exist (reads at most one row of each)."""
    j, gate = ctx.tables.jobs, ctx.tables.gate
    conn.execute(sa.select(j.c.id).limit(1)).first()
    conn.execute(sa.select(gate.c.id).limit(1)).first()



# What the report of stuck jobs reads at most, of the waiting jobs and of the containers
# that have not ended (each through its index), so that a status costs a bounded read.
STUCK_SCAN_MAX = 10_000
# Stuck jobs a status lists (Queue.stuck() takes its own limit).
STATUS_STUCK_MAX = 20


def stuck(
    ctx: StoreContext,
    conn: Connection,
    *,
    empty_after: float,
    limit: int,
    now: float | None = None,
) -> list[StuckJob]:
    """What cannot progress on its own, in id order, at most ``limit``: waiting jobs and
    open containers whose dependency ended badly without ending them, or whose count of
    unfinished dependencies disagrees with their dependencies, and containers without
    children or anything to wait for, unchanged for ``empty_after`` seconds (see
    :class:`readyq.reports.StuckJob`), each with the number of unfinished jobs that wait
    for it directly. Reads at most ``STUCK_SCAN_MAX`` waiting jobs and as many open
    containers, through their indexes, with their dependencies' rows."""
    t = ctx.tables
    j, d = t.jobs, t.deps
    if now is None:
        now = float(conn.execute(sa.select(ctx.now)).scalar_one())
    up = j.alias("up")
    # id -> (row, dependencies not done, the least dependency that ended badly)
    wrong: dict[int, tuple[Any, int, int | None]] = {}
    for waiting, where in ((True, waiting_of_types(t, None)), (False, active_containers(t))):
        w = (
            sa.select(j.c.id, j.c.type, j.c.state, j.c.is_container, j.c.group_key,
                      j.c.pending_deps, j.c.updated_at)
            .where(where)
            .limit(STUCK_SCAN_MAX)
            .subquery("w")
        )
        unfinished = sa.func.coalesce(
            sa.func.sum(sa.case((up.c.state != JobState.DONE.value, 1), else_=0)), 0
        )
        cause = sa.func.min(sa.case((up.c.state.in_(BAD_ENDS), up.c.id), else_=None))
        tests = [cause.is_not(None), unfinished != w.c.pending_deps]
        if waiting:
            tests.append(unfinished == 0)  # nothing left to release it
        for r in conn.execute(
            sa.select(*w.c, unfinished.label("unfinished"), cause.label("cause"))
            .select_from(
                w.outerjoin(d, d.c.job_id == w.c.id).outerjoin(up, up.c.id == d.c.depends_on_id)
            )
            .group_by(*w.c)
            .having(sa.or_(*tests))
            .order_by(w.c.id)
            .limit(limit)
        ):
            wrong[int(r.id)] = (r, int(r.unfinished), None if r.cause is None else int(r.cause))
    empty = {
        int(r.id): r
        for r in conn.execute(empty_containers(t, now - empty_after, limit))
        if int(r.id) not in wrong
    }
    ids = sorted({*wrong, *empty})[:limit]
    if not ids:
        return []
    causes = sorted({c for _, _, c in wrong.values() if c is not None})
    ended = {
        int(r.id): r.state
        for r in conn.execute(sa.select(j.c.id, j.c.state).where(j.c.id.in_(causes)))
    } if causes else {}
    blocks = {
        int(r[0]): int(r[1])
        for r in conn.execute(
            sa.select(d.c.depends_on_id, sa.func.count())
            .select_from(d.join(j, j.c.id == d.c.job_id))
            .where(d.c.depends_on_id.in_(ids), j.c.state.in_(("waiting", "active")))
            .group_by(d.c.depends_on_id)
        )
    }
    out: list[StuckJob] = []
    for i in ids:
        n_blocked = blocks.get(i, 0)
        behind = f"; {n_blocked} job(s) wait for it" if n_blocked else ""
        if i in empty:
            e = empty[i]
            since = float(e.updated_at)
            age = max(0.0, now - since)
            out.append(StuckJob(
                id=i, type=e.type, state=e.state, is_container=True, group=e.group_key,
                reason="empty_container", since=since, age=age, pending_deps=0, unfinished=0,
                blocks=n_blocked,
                detail=f"container {i} has no child and nothing to wait for, unchanged for "
                f"{duration_text(age)}{behind}",
                hint=f"add children with parent={i}, end it with close_container({i}) "
                f"(readyq close {i}), or cancel it",
            ))
            continue
        r, n, c = wrong[i]
        what = "container" if r.is_container else "job"
        since = float(r.updated_at)
        pending = int(r.pending_deps)
        if c is not None:
            reason = "upstream_ended"
            detail = (f"{what} {i} waits for job {c}, which ended {ended.get(c)}: it should "
                      "have ended upstream_failed with it")
            hint = f"retry job {c} (readyq retry {c}), which this {what} then follows; or " \
                   f"cancel the {what}"
        else:
            reason = "pending_mismatch"
            # A release makes it ready once its count reaches zero: see sql/jobs.py.
            if pending > n or n == 0:
                tail = "so it is never released"
            elif max(pending, 1) < n:
                tail = f"so it is released when {max(pending, 1)} of them are done"
            else:
                tail = "though it is still released with the last of them"
            detail = (f"{what} {i} counts {pending} unfinished dependencies where {n} are "
                      f"not done, {tail}")
            hint = f"cancel the {what} and enqueue it again"
        out.append(StuckJob(
            id=i, type=r.type, state=r.state, is_container=bool(r.is_container),
            group=r.group_key, reason=reason, detail=detail + behind, hint=hint, since=since,
            age=max(0.0, now - since), pending_deps=pending, unfinished=n, blocks=n_blocked,
            cause=c, cause_state=None if c is None else ended.get(c),
        ))
    return out


def status(
    ctx: StoreContext,
    conn: Connection,
    unclaimed_after: float = 60.0,
    empty_after: float = 60.0,
) -> Status:
    """Jobs per state and per group, what is in flight, the oldest runnable job's wait,
    the workers holding leases (distinct ``lease_owner`` of leased/running jobs), the
    types whose runnable jobs have waited more than ``unclaimed_after`` seconds with none
    of their jobs in flight, and the first jobs that are stuck (see :func:`stuck`)."""
    j = ctx.tables.jobs
    now = float(conn.execute(sa.select(ctx.now)).scalar_one())
    states: dict[str, int] = {}
    groups: dict[str, dict[str, int]] = defaultdict(dict)
    for r in conn.execute(
        sa.select(j.c.group_key, j.c.state, sa.func.count().label("n")).group_by(
            j.c.group_key, j.c.state
        )
    ):
        states[r.state] = states.get(r.state, 0) + int(r.n)
        groups[r.group_key][r.state] = int(r.n)
    # A ready job became claimable when it last changed (its updated_at) or, if later,
    # when its run_after passed.
    since = sa.case((j.c.run_after > j.c.updated_at, j.c.run_after), else_=j.c.updated_at)
    due = sa.and_(j.c.state == "ready", sa.or_(j.c.run_after.is_(None), j.c.run_after <= now))
    runnable = int(conn.execute(sa.select(sa.func.count()).where(due)).scalar_one())
    deferred = int(
        conn.execute(
            sa.select(sa.func.count()).where(j.c.state == "ready", j.c.run_after > now)
        ).scalar_one()
    )
    oldest = None
    row = conn.execute(
        sa.select(j.c.id, j.c.type, j.c.group_key, since.label("since"))
        .where(due)
        .order_by(since, j.c.id)
        .limit(1)
    ).first()
    if row is not None:
        oldest = OldestReady(
            id=int(row.id),
            type=row.type,
            group=row.group_key,
            since=float(row.since),
            age=max(0.0, now - float(row.since)),
        )
    # Per type: its runnable jobs and their longest wait, and whether any job of it is in
    # flight (that range is bounded by the cap).
    by_type = conn.execute(
        sa.select(j.c.type, sa.func.count().label("n"), sa.func.min(since).label("since"))
        .where(due)
        .group_by(j.c.type)
    ).all()
    busy = set(
        conn.execute(
            sa.select(j.c.type).where(state_in(ctx.tables, *IN_FLIGHT_STATES)).distinct()
        ).scalars()
    )
    unclaimed = [
        UnclaimedType(type=r.type, runnable=int(r.n), oldest_age=max(0.0, now - float(r.since)))
        for r in by_type
        if r.type not in busy and now - float(r.since) > unclaimed_after
    ]
    workers = []
    for r in conn.execute(
        sa.select(
            j.c.lease_owner,
            sa.func.sum(sa.case((j.c.state == "leased", 1), else_=0)).label("leased"),
            sa.func.sum(sa.case((j.c.state == "running", 1), else_=0)).label("running"),
            sa.func.max(j.c.heartbeat_at).label("hb"),
            sa.func.max(j.c.lease_expires).label("exp"),
        )
        .where(j.c.state.in_(IN_FLIGHT_STATES), j.c.lease_owner.is_not(None))
        .group_by(j.c.lease_owner)
    ):
        hb = None if r.hb is None else float(r.hb)
        exp = None if r.exp is None else float(r.exp)
        workers.append(
            WorkerSeen(
                owner=r.lease_owner,
                leased=int(r.leased or 0),
                running=int(r.running or 0),
                last_heartbeat=hb,
                heartbeat_age=None if hb is None else max(0.0, now - hb),
                lease_expires=exp,
                expired=exp is not None and exp < now,
            )
        )
    workers.sort(key=lambda w: (-(w.last_heartbeat or 0.0), w.owner))
    in_flight = sum(states.get(s, 0) for s in IN_FLIGHT_STATES)
    ordered = {k: ordered_states(v) for k, v in sorted(groups.items())}
    return Status(
        now=now,
        states=ordered_states(states),
        groups=ordered,
        in_flight=in_flight,
        runnable=runnable,
        deferred=deferred,
        oldest_ready=oldest,
        workers=workers,
        unclaimed_types=sorted(unclaimed, key=lambda u: -u.oldest_age),
        stuck=stuck(ctx, conn, empty_after=empty_after, limit=STATUS_STUCK_MAX, now=now),
    )



def _ref(row: Any) -> JobRef:
    return JobRef(
        id=int(row.id), type=row.type, state=row.state, is_container=bool(row.is_container)
    )


# The dependencies and dependents of one job read in full; beyond, they are counted.
EDGE_ROWS = 100


def job_detail(ctx: StoreContext, conn: Connection, job_id: int) -> JobDetail:
    """The job's fields, its first ``EDGE_ROWS`` dependencies and dependents with their
    states and all of them counted per state, its parent and (for a container) its
    children per state. Raises JobNotFound."""
    t = ctx.tables
    j, d = t.jobs, t.deps
    now = float(conn.execute(sa.select(ctx.now)).scalar_one())
    row = conn.execute(sa.select(j).where(j.c.id == job_id)).first()
    if row is None:
        raise JobNotFound(f"no job with id {job_id}")
    m = row._mapping
    fields: dict[str, Any] = {
        "id": int(m["id"]),
        "type": m["type"],
        "state": m["state"],
        "is_container": bool(m["is_container"]),
        "group": m["group_key"],
        "weight": int(m["weight"]),
        "priority": int(m["priority"]),
        "attempts": int(m["attempts"]),
        # None until the job first runs when enqueued without one (its handler decides).
        "max_attempts": _max_attempts(m["max_attempts"]),
        "timeout": m["timeout"],
        "retry_on_timeout": bool(m["retry_on_timeout"]),
        "pending_deps": int(m["pending_deps"]),
        "cancel_requested": bool(m["cancel_requested"]),
        "cancelled_by": m["cancelled_by"],
        "spawned_by": None if m["spawned_by"] is None else int(m["spawned_by"]),
        "lease_owner": m["lease_owner"],
        "lease_token": int(m["lease_token"]),
        "unique_key": m["unique_key"],
        # None: the handler's, if any (written when the job is claimed).
        "uses": None if m["uses"] is None else dict(decode_uses(m["uses"])),
        "parent_id": None if m["parent_id"] is None else int(m["parent_id"]),
        "args": decode_stored(m["args"]),
        "result": decode_stored(m["result"]),
        "error": m["error"],
    }
    if fields["is_container"]:
        fields["open_children"] = int(m["open_children"])
        fields["failed_children"] = int(m["failed_children"])
    for name in INSTANTS:
        value = m[name]
        fields[name] = None if value is None else float(value)
    cols = (j.c.id, j.c.type, j.c.state, j.c.is_container)
    edges = {
        "dependencies": (d.join(j, j.c.id == d.c.depends_on_id), d.c.job_id == job_id),
        "dependents": (d.join(j, j.c.id == d.c.job_id), d.c.depends_on_id == job_id),
    }
    refs: dict[str, list[JobRef]] = {}
    by_state: dict[str, dict[str, int]] = {}
    for name, (joined, where) in edges.items():
        refs[name] = [
            _ref(r)
            for r in conn.execute(
                sa.select(*cols).select_from(joined).where(where).order_by(j.c.id)
                .limit(EDGE_ROWS)
            )
        ]
        by_state[name] = (
            ordered_states({
                r.state: int(r.n)
                for r in conn.execute(
                    sa.select(j.c.state, sa.func.count().label("n")).select_from(joined)
                    .where(where).group_by(j.c.state)
                )
            })
            if len(refs[name]) == EDGE_ROWS
            else ordered_states(dict(Counter(r.state for r in refs[name])))
        )
    deps, dependents = refs["dependencies"], refs["dependents"]
    parent = None
    if fields["parent_id"] is not None:
        p = conn.execute(sa.select(*cols).where(j.c.id == fields["parent_id"])).first()
        parent = None if p is None else _ref(p)
    children: dict[str, int] = {}
    if fields["is_container"]:
        children = ordered_states(
            {
                r.state: int(r.n)
                for r in conn.execute(
                    sa.select(j.c.state, sa.func.count().label("n"))
                    .where(j.c.parent_id == job_id)
                    .group_by(j.c.state)
                )
            }
        )
    attempts = attempts_of(ctx, conn, job_id)
    progress, saved, steps, step_count = memory_report(ctx, conn, job_id)
    return JobDetail(
        fields=fields,
        dependencies=deps,
        dependents=dependents,
        dependency_states=by_state["dependencies"],
        dependent_states=by_state["dependents"],
        parent=parent,
        children=children,
        now=now,
        attempts=attempts,
        progress=progress,
        saved_state=saved,
        steps=steps,
        step_count=step_count,
    )


def graph(ctx: StoreContext, conn: Connection, job_id: int, max_nodes: int) -> Graph:
    """The graph around ``job_id`` (see :class:`readyq.reports.Graph`), at most
    ``max_nodes`` jobs. Raises JobNotFound."""
    t = ctx.tables
    j, d = t.jobs, t.deps
    node_cols = (j.c.id, j.c.type, j.c.state, j.c.is_container, j.c.parent_id, j.c.group_key,
                 j.c.spawned_by)

    def node(r: Any) -> Node:
        return Node(
            id=int(r.id),
            type=r.type,
            state=r.state,
            is_container=bool(r.is_container),
            parent_id=None if r.parent_id is None else int(r.parent_id),
            group=r.group_key,
            spawned_by=None if r.spawned_by is None else int(r.spawned_by),
        )

    row = conn.execute(sa.select(*node_cols).where(j.c.id == job_id)).first()
    if row is None:
        raise JobNotFound(f"no job with id {job_id}")
    g = Graph(root=job_id)
    g.nodes[job_id] = node(row)

    def fetch(ids: Iterable[int]) -> None:
        for chunk in chunks(i for i in ids if i not in g.nodes):
            for r in conn.execute(sa.select(*node_cols).where(j.c.id.in_(chunk))):
                g.nodes[int(r.id)] = node(r)

    def admit(candidates: Iterable[int], seen: set[int], limit: int) -> list[int]:
        fresh = []
        new_nodes = 0
        for c in sorted(set(candidates)):
            if c in seen:
                continue
            if c not in g.nodes:
                if len(g.nodes) + new_nodes >= limit:
                    g.truncated = True
                    continue
                new_nodes += 1
            seen.add(c)
            fresh.append(c)
        fetch(fresh)
        return fresh

    def walk_up(limit: int) -> None:
        """Dependencies, and the children of containers."""
        seen = {job_id}
        frontier = [job_id]
        while frontier:
            found: list[int] = []
            for chunk in chunks(frontier):
                found += [
                    int(x)
                    for x in conn.execute(
                        sa.select(d.c.depends_on_id).where(d.c.job_id.in_(chunk))
                    ).scalars()
                ]
                containers = [i for i in chunk if g.nodes[i].is_container]
                for part in chunks(containers):
                    found += [
                        int(x)
                        for x in conn.execute(
                            sa.select(j.c.id).where(j.c.parent_id.in_(part))
                        ).scalars()
                    ]
            frontier = admit(found, seen, limit)
        g.upstream = seen - {job_id}

    def walk_down(limit: int) -> None:
        """Dependents, and the containers jobs belong to."""
        seen = {job_id}
        frontier = [job_id]
        while frontier:
            found: list[int] = []
            for chunk in chunks(frontier):
                found += [
                    int(x)
                    for x in conn.execute(
                        sa.select(d.c.job_id).where(d.c.depends_on_id.in_(chunk))
                    ).scalars()
                ]
            found += [
                parent for i in frontier if (parent := g.nodes[i].parent_id) is not None
            ]
            frontier = admit(found, seen, limit)
        g.downstream = seen - {job_id}

    # Upstream takes at most half the budget first, so that a long history does not
    # leave nothing of what comes next; what downstream leaves goes back upstream.
    walk_up(1 + (max_nodes - 1) // 2)
    up_cut, g.truncated = g.truncated, False
    walk_down(max_nodes)
    down_cut, g.truncated = g.truncated, False
    if up_cut and len(g.nodes) < max_nodes:
        walk_up(max_nodes)
        up_cut = g.truncated
    g.truncated = up_cut or down_cut

    # Every edge between the nodes shown, also those no walk crossed.
    ids = sorted(g.nodes)
    for chunk in chunks(ids):
        for r in conn.execute(
            sa.select(d.c.depends_on_id, d.c.job_id).where(
                d.c.job_id.in_(chunk), d.c.depends_on_id.in_(ids)
            )
        ):
            g.deps.add((int(r.depends_on_id), int(r.job_id)))
    for n in g.nodes.values():
        if n.parent_id is not None and n.parent_id in g.nodes:
            g.contains.add((n.parent_id, n.id))
    return g


def info_from_row(
    row: Any, depends_on: tuple[int, ...], progress: JobProgress | None = None
) -> JobInfo:
    return JobInfo(
        id=int(row.id),
        type=row.type,
        state=JobState.stored(row.state),
        args=decode_stored(row.args),
        result=decode_stored(row.result),
        error=row.error,
        attempts=int(row.attempts),
        max_attempts=_max_attempts(row.max_attempts),
        group=row.group_key,
        weight=int(row.weight),
        priority=int(row.priority),
        parent_id=None if row.parent_id is None else int(row.parent_id),
        is_container=bool(row.is_container),
        depends_on=depends_on,
        created_at=from_epoch(row.created_at),
        run_after=from_epoch(row.run_after),
        started_at=from_epoch(row.started_at),
        finished_at=from_epoch(row.finished_at),
        lease_owner=row.lease_owner,
        unique_key=row.unique_key,
        cancelled_by=row.cancelled_by,
        spawned_by=None if row.spawned_by is None else int(row.spawned_by),
        key=row.batch_key,
        progress=progress,
    )


# -- listings -----------------------------------------------------------------------------


def clock_for(ctx: StoreContext, conn: Connection, flt: JobFilter) -> float:
    """The database's clock when ``flt`` has bounds given as durations, else 0 (unread)."""
    if not needs_clock(flt):
        return 0.0
    return float(conn.execute(sa.select(ctx.now)).scalar_one())


def check_time_range(flt: JobFilter, now: float) -> None:
    """Raise InvalidFilter for a time range that ends before it starts once the bounds
    given as durations are resolved."""
    for name, after, before in flt.time_bounds():
        if after is not None and before is not None and instant(after, now) > instant(
            before, now
        ):
            raise InvalidFilter(
                f"{name.removesuffix('_at')}_after is later than its _before: no job can match"
            )


def list_jobs(
    ctx: StoreContext,
    conn: Connection,
    flt: JobFilter,
    order: str,
    limit: int,
    cursor: str | None,
) -> JobPage:
    """One page of the jobs matching ``flt``: see ``Queue.jobs``. A keyset read by id
    after the cursor's id, ``limit + 1`` rows (the last one only tells whether another
    page follows), one read of the page's dependency edges and one of its progress."""
    t = ctx.tables
    after_id = None if cursor is None else decode_cursor(cursor, flt, order)
    now = float(conn.execute(sa.select(ctx.now)).scalar_one())
    check_time_range(flt, now)
    rows = conn.execute(
        page_query(t, flt, now, order=order, after_id=after_id, limit=limit + 1)
    ).all()
    more = len(rows) > limit
    rows = rows[:limit]
    deps: dict[int, list[int]] = defaultdict(list)
    d = t.deps
    for chunk in chunks(int(r.id) for r in rows):
        for e in conn.execute(
            sa.select(d.c.job_id, d.c.depends_on_id)
            .where(d.c.job_id.in_(chunk))
            .order_by(d.c.job_id, d.c.depends_on_id)
        ):
            deps[int(e.job_id)].append(int(e.depends_on_id))
    progress = progress_of_page(ctx, conn, (int(r.id) for r in rows))
    jobs = [
        info_from_row(r, tuple(deps.get(int(r.id), ())), progress.get(int(r.id)))
        for r in rows
    ]
    next_cursor = encode_cursor(flt, order, jobs[-1].id) if more and jobs else None
    return JobPage(
        jobs=jobs, next_cursor=next_cursor, order=order, limit=limit, filter=flt.to_json(),
        now=now,
    )


def matching_ids(
    ctx: StoreContext, conn: Connection, flt: JobFilter, now: float, after_id: int | None,
    limit: int,
) -> list[int]:
    """The ids of up to ``limit`` jobs matching ``flt`` above ``after_id``, oldest first
    (the bulk actions' walk)."""
    j = ctx.tables.jobs
    stmt = page_query(
        ctx.tables, flt, now, order="oldest", after_id=after_id, limit=limit, columns=(j.c.id,)
    )
    return [int(x) for x in conn.execute(stmt).scalars()]


# -- the dashboard's reads ------------------------------------------------------------------

# The overview's chart and the workers page read the newest jobs only, this many.
RECENT_ROWS = 20_000


def overview(
    ctx: StoreContext, conn: Connection, window: float, buckets: int, recent: int
) -> Overview:
    """The status, counts per type and state, each rate limit's starts within its
    period, each group's share of the jobs in flight against its weight, and the jobs
    done and failed per bucket over the last ``window`` seconds among the newest
    ``recent`` jobs (see :class:`readyq.reports.Overview`)."""
    t = ctx.tables
    j = t.jobs
    st = status(ctx, conn)
    now = st.now
    types: dict[str, dict[str, int]] = defaultdict(dict)
    for r in conn.execute(
        sa.select(j.c.type, j.c.state, sa.func.count().label("n")).group_by(j.c.type, j.c.state)
    ):
        types[r.type][r.state] = int(r.n)
    rates = []
    for r in conn.execute(sa.select(t.rate_limits).order_by(t.rate_limits.c.name)):
        used = conn.execute(
            sa.select(sa.func.count()).where(
                t.rate_slots.c.name == r.name, t.rate_slots.c.started_at > now - float(r.period)
            )
        ).scalar_one()
        rates.append(RateUse(r.name, int(r.capacity), float(r.period), int(used)))
    work: dict[str, list[int]] = {}  # group -> [weight, in flight, ready]
    for r in conn.execute(in_flight_by_group(t, *IN_FLIGHT_STATES)):
        work[r.group_key] = [int(r.w), int(r.n), 0]
    for r in conn.execute(
        sa.select(j.c.group_key, sa.func.count().label("n"), sa.func.max(j.c.weight).label("w"))
        .where(state_in(t, "ready"))
        .group_by(j.c.group_key)
    ):
        w, n, _ = work.get(r.group_key, [0, 0, 0])
        work[r.group_key] = [max(w, int(r.w)), n, int(r.n)]
    flying = sum(v[1] for v in work.values())
    weights = sum(v[0] for v in work.values())
    shares = [
        GroupShare(g, w, n, ready, n / flying if flying else 0.0, w / weights if weights else 0.0)
        for g, (w, n, ready) in sorted(work.items())
    ]
    step = window / buckets
    start = now - window
    newest = (
        sa.select(j.c.state, j.c.finished_at).order_by(j.c.id.desc()).limit(recent).subquery()
    )
    done = [0] * buckets
    failed = [0] * buckets
    for r in conn.execute(
        sa.select(newest.c.state, newest.c.finished_at).where(
            newest.c.finished_at >= start, newest.c.state.in_(("done", "failed"))
        )
    ):
        i = min(buckets - 1, int((float(r.finished_at) - start) // step))
        (done if r.state == "done" else failed)[i] += 1
    series = [(start + i * step, done[i], failed[i]) for i in range(buckets)]
    ordered = {k: ordered_states(v) for k, v in sorted(types.items())}
    return Overview(
        status=st, types=ordered, rates=rates, shares=shares, window=window, bucket=step,
        series=series, series_rows=recent,
    )


def worker_reports(ctx: StoreContext, conn: Connection, recent: int) -> list[WorkerReport]:
    """Every worker that holds a lease now or finished one of the newest ``recent``
    jobs, with the jobs it holds and when it was last seen (its latest heartbeat or
    finish), newest first."""
    j = ctx.tables.jobs
    now = float(conn.execute(sa.select(ctx.now)).scalar_one())
    held: dict[str, list[HeldJob]] = defaultdict(list)
    expires: dict[str, float] = {}
    seen: dict[str, float] = {}
    for r in conn.execute(
        sa.select(
            j.c.id, j.c.type, j.c.state, j.c.lease_owner, j.c.started_at, j.c.heartbeat_at,
            j.c.lease_expires,
        )
        .where(state_in(ctx.tables, *IN_FLIGHT_STATES), j.c.lease_owner.is_not(None))
        .order_by(j.c.id)
    ):
        owner = r.lease_owner
        job = HeldJob(
            int(r.id), r.type, r.state, _float(r.started_at), _float(r.heartbeat_at),
            _float(r.lease_expires),
        )
        held[owner].append(job)
        if job.lease_expires is not None:
            expires[owner] = max(expires.get(owner, 0.0), job.lease_expires)
        last = job.heartbeat_at or job.started_at
        if last is not None:
            seen[owner] = max(seen.get(owner, 0.0), last)
    newest = (
        sa.select(j.c.lease_owner, j.c.finished_at, j.c.state)
        .order_by(j.c.id.desc())
        .limit(recent)
        .subquery()
    )
    finished: dict[str, int] = {}
    for r in conn.execute(
        sa.select(
            newest.c.lease_owner, sa.func.count().label("n"),
            sa.func.max(newest.c.finished_at).label("last"),
        )
        .where(newest.c.lease_owner.is_not(None), newest.c.finished_at.is_not(None))
        .group_by(newest.c.lease_owner)
    ):
        finished[r.lease_owner] = int(r.n)
        seen[r.lease_owner] = max(seen.get(r.lease_owner, 0.0), float(r.last))
    out = []
    for owner in set(held) | set(finished):
        host, pid = _owner_parts(owner)
        last = seen.get(owner)
        out.append(
            WorkerReport(
                id=owner, host=host, pid=pid, held=held.get(owner, []),
                finished_recently=finished.get(owner, 0), last_seen=last,
                last_seen_age=None if last is None else max(0.0, now - last),
                expired=owner in expires and expires[owner] < now,
            )
        )
    out.sort(key=lambda w: (-(w.last_seen or 0.0), w.id))
    return out


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _owner_parts(owner: str) -> tuple[str | None, int | None]:
    """(host, pid) of a lease owner ``host:pid:random``, else (None, None)."""
    host, _, rest = owner.rpartition(":")
    host, _, pid = host.rpartition(":")
    if host and pid.isdigit() and rest:
        return host, int(pid)
    return None, None


def graph_size(ctx: StoreContext, conn: Connection, job_id: int, limit: int) -> int:
    """How many jobs :func:`graph` would show around ``job_id`` without a cap, counted
    up to ``limit``: the same walks (dependencies and children upstream, dependents and
    containers downstream), over ids only."""
    j, d = ctx.tables.jobs, ctx.tables.deps

    def walk(step: list[sa.Select[Any]]) -> set[int]:
        seen = {job_id}
        frontier = [job_id]
        while frontier and len(seen) < limit:
            found: set[int] = set()
            for chunk in chunks(frontier):
                for build in step:
                    found.update(
                        int(x) for x in conn.execute(build, {"ids": chunk}).scalars()
                        if x is not None
                    )
            frontier = sorted(found - seen)[: max(0, limit - len(seen))]
            seen.update(frontier)
        return seen

    ids: sa.BindParameter[Any] = sa.bindparam("ids", expanding=True)
    up = walk([
        sa.select(d.c.depends_on_id).where(d.c.job_id.in_(ids)),
        sa.select(j.c.id).where(j.c.parent_id.in_(ids)),
    ])
    down = walk([
        sa.select(d.c.job_id).where(d.c.depends_on_id.in_(ids)),
        sa.select(j.c.parent_id).where(j.c.id.in_(ids)),
    ])
    return min(limit, len(up | down))
