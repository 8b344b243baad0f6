"""Schedules: their progress rows, and the firing that enqueues an occurrence's jobs.

A firing locks the schedule's row (``FOR UPDATE``; on SQLite the transaction holds the
write lock from ``BEGIN IMMEDIATE``), so workers on any number of hosts take turns on
it. Under that lock it reads the database's clock, enqueues the jobs of each due
occurrence, records the occurrence in ``schedule_fires`` (whose primary key refuses a
second enqueue of one occurrence) and moves ``next_fire_at`` on, in one transaction:
an occurrence is enqueued exactly once, or not at all when the transaction fails.

The first queue to write a schedule's row sets its definition. A queue that defines the
name differently fires nothing of it: it records the difference in the row (so that
``readyq schedules`` shows it) and leaves the row's definition as it is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from readyq.model import ScheduleInfo, from_epoch
from readyq.planning.schedules import Timing
from readyq.store import enqueue
from readyq.store.context import StoreContext
from readyq.store.records import BatchJob

# Seconds an occurrence's row is kept in ``schedule_fires`` after its time. The row's
# ``next_fire_at`` only moves forward, so older rows guard nothing a firing could redo.
FIRES_KEPT = 7 * 86400.0


@dataclass(frozen=True)
class Firing:
    """What one firing found and did.

    ``now`` is the database's clock (epoch seconds) when it ran. ``next_fire_at`` is the
    next occurrence due (None when ``conflict``: the definition that stands, in words,
    differs from the caller's). ``fired`` are the occurrences enqueued, oldest first,
    with the first job id of each in ``job_ids``; ``skipped``: due occurrences were left
    out under the catch-up policy.
    """

    now: float
    next_fire_at: int | None
    fired: tuple[int, ...] = ()
    job_ids: tuple[int, ...] = ()
    paused: bool = False
    skipped: bool = False
    conflict: str | None = None


def _db_now(ctx: StoreContext, conn: Connection) -> float:
    return float(conn.execute(sa.select(ctx.now)).scalar_one())


def _locked_row(ctx: StoreContext, conn: Connection, name: str) -> Any:
    s = ctx.tables.schedules
    return conn.execute(
        sa.select(s.c.fingerprint, s.c.definition, s.c.next_fire_at, s.c.paused, s.c.conflict)
        .where(s.c.name == name)
        .with_for_update()
    ).first()


def _ensure_row(
    ctx: StoreContext, conn: Connection, name: str, timing: Timing, now: float, paused: bool
) -> Any:
    """The schedule's row, locked; written first with ``timing`` when there is none (a
    new schedule fires first at its first occurrence after now, not at the past ones)."""
    row = _locked_row(ctx, conn, name)
    if row is not None:
        return row
    s = ctx.tables.schedules
    try:
        # A savepoint: another worker may insert the row at the same moment, and its
        # insert standing is as good as ours.
        with conn.begin_nested():
            conn.execute(sa.insert(s).values(
                name=name, fingerprint=timing.fingerprint(), definition=timing.describe(),
                last_fire_at=None, next_fire_at=timing.next_after(now), paused=paused,
                conflict=None, conflict_at=None, updated_at=now,
            ))
    except sa.exc.IntegrityError:
        pass
    row = _locked_row(ctx, conn, name)
    assert row is not None
    return row


def _record_conflict(
    ctx: StoreContext, conn: Connection, name: str, timing: Timing, now: float
) -> None:
    s = ctx.tables.schedules
    conn.execute(
        sa.update(s).where(s.c.name == name)
        .values(conflict=timing.describe(), conflict_at=now)
    )


def fire(
    ctx: StoreContext,
    conn: Connection,
    name: str,
    timing: Timing,
    build: Callable[[int], Sequence[BatchJob]],
    *,
    report_conflict: bool = True,
) -> Firing:
    """Fire schedule ``name`` if an occurrence is due: enqueue ``build(fire_at)`` for
    each occurrence the catch-up policy keeps, record them, and move the row on.

    ``build`` is called under the row's lock, inside the transaction. A paused schedule
    enqueues nothing; its due occurrences are skipped. With ``report_conflict``, a
    definition that differs from the row's is recorded in the row.
    """
    s, fires = ctx.tables.schedules, ctx.tables.schedule_fires
    now = _db_now(ctx, conn)
    fingerprint, definition, next_fire_at, paused, _ = _ensure_row(
        ctx, conn, name, timing, now, paused=False
    )
    if fingerprint != timing.fingerprint():
        if report_conflict:
            _record_conflict(ctx, conn, name, timing, now)
        return Firing(now, None, conflict=str(definition))
    next_at = int(next_fire_at)
    if next_at > now:
        # A resume stores its own instant as the bound (it knows no definition): the
        # first worker to look stores the occurrence that follows it instead.
        following = timing.next_after(next_at - 1)
        if following != next_at:
            next_at = following
            conn.execute(sa.update(s).where(s.c.name == name).values(next_fire_at=next_at))
        return Firing(now, next_at, paused=bool(paused))
    plan = timing.plan(next_at, now)
    due = plan.fire
    if paused:
        due = ()
    elif due:
        done = set(conn.execute(
            sa.select(fires.c.fire_at).where(
                fires.c.name == name, fires.c.fire_at >= due[0], fires.c.fire_at <= due[-1]
            )
        ).scalars())
        due = tuple(t for t in due if t not in done)
    job_ids: list[int] = []
    for fire_at in due:
        batch = build(fire_at)
        ids: list[int] = []
        if batch:
            if any(b.job.unique_key is not None for b in batch):
                ids = [i for i, _ in enqueue.insert_unique_batch(ctx, conn, batch)]
            else:
                ids = enqueue.insert_batch(ctx, conn, batch)
        first = min(ids) if ids else None
        conn.execute(sa.insert(fires).values(
            name=name, fire_at=fire_at, job_id=first, created_at=now
        ))
        if first is not None:
            job_ids.append(first)
    values: dict[str, object] = {"next_fire_at": plan.next_fire_at, "updated_at": now}
    if due:
        values["last_fire_at"] = due[-1]
        conn.execute(sa.delete(fires).where(
            fires.c.name == name, fires.c.fire_at < math.floor(now - FIRES_KEPT)
        ))
    conn.execute(sa.update(s).where(s.c.name == name).values(**values))
    return Firing(
        now, plan.next_fire_at, fired=tuple(due), job_ids=tuple(job_ids),
        paused=bool(paused), skipped=plan.skipped,
    )


def set_paused(
    ctx: StoreContext, conn: Connection, name: str, paused: bool, timing: Timing | None
) -> bool | None:
    """Pause or resume schedule ``name``; whether it was paused before (None: no row,
    and no ``timing`` to write one with). With ``timing`` (the caller defines the
    schedule), a missing row is written first, paused as asked."""
    s = ctx.tables.schedules
    if timing is not None:
        row = _ensure_row(ctx, conn, name, timing, _db_now(ctx, conn), paused=paused)
    else:
        row = _locked_row(ctx, conn, name)
        if row is None:
            return None
    was = bool(row.paused)
    values: dict[str, object] = {"paused": paused, "updated_at": ctx.now}
    if was and not paused:
        # Occurrences due while it was paused stay skipped, whether or not a worker
        # ran meanwhile: the next one to fire is the first from now on.
        start = math.ceil(_db_now(ctx, conn))
        values["next_fire_at"] = sa.case(
            (s.c.next_fire_at < start, start), else_=s.c.next_fire_at
        )
    conn.execute(sa.update(s).where(s.c.name == name).values(**values))
    return was


def schedules(ctx: StoreContext, conn: Connection) -> list[ScheduleInfo]:
    """Every stored schedule, by name."""
    s = ctx.tables.schedules
    rows = conn.execute(sa.select(s).order_by(s.c.name)).all()
    out = []
    for r in rows:
        next_fire, updated = from_epoch(r.next_fire_at), from_epoch(r.updated_at)
        assert next_fire is not None and updated is not None
        out.append(ScheduleInfo(
            name=r.name, definition=r.definition, last_fire=from_epoch(r.last_fire_at),
            next_fire=next_fire, paused=bool(r.paused), conflict=r.conflict,
            conflict_at=from_epoch(r.conflict_at), updated_at=updated,
        ))
    return out


def forget(ctx: StoreContext, conn: Connection, name: str) -> bool:
    """Remove schedule ``name``'s row (not its fired occurrences); whether one was
    stored. The next queue to fire the name writes its own definition."""
    s = ctx.tables.schedules
    return bool(conn.execute(sa.delete(s).where(s.c.name == name)).rowcount)
