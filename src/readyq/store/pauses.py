"""Pauses: their rows, and what they take out of a claim.

A pause or a resume locks the gate row, as claims do, so a claim either ran before it
committed or sees it: from the commit on, no worker on any host claims what it names.
The gate row's ``pauses`` column counts the rows; a claim reads them only when it is not
0 (:func:`standing`), and the first claim after a pause's ``until`` removes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from readyq.model import Pause, from_epoch
from readyq.planning.pauses import Standing
from readyq.schema import ANY, GATE_ID
from readyq.sql.ready import state_in
from readyq.store.context import StoreContext


def _lock_gate(ctx: StoreContext, conn: Connection) -> None:
    g = ctx.tables.gate
    conn.execute(sa.select(g.c.id).where(g.c.id == GATE_ID).with_for_update()).first()


def _live(ctx: StoreContext) -> sa.ColumnElement[bool]:
    p = ctx.tables.pauses
    return sa.or_(p.c.until.is_(None), p.c.until > ctx.now)


def _recount(ctx: StoreContext, conn: Connection) -> None:
    """Drop the pauses that have ended and store how many stand in the gate row."""
    t = ctx.tables
    conn.execute(sa.delete(t.pauses).where(~_live(ctx)))
    n = conn.execute(sa.select(sa.func.count()).select_from(t.pauses)).scalar_one()
    conn.execute(sa.update(t.gate).where(t.gate.c.id == GATE_ID).values(pauses=int(n)))


def pause(
    ctx: StoreContext,
    conn: Connection,
    group: str | None,
    type_: str | None,
    until_at: float | None,
    until_delay: float | None,
) -> None:
    """Pause ``group``, ``type_`` or both (a pause already standing for them is
    replaced), and release the reservations held by the jobs it names."""
    t = ctx.tables
    p, j, r = t.pauses, t.jobs, t.reservations
    _lock_gate(ctx, conn)
    key = {"group_key": group or ANY, "type": type_ or ANY}
    until: Any = None
    if until_at is not None:
        until = until_at
    elif until_delay is not None:
        until = ctx.now + until_delay
    conn.execute(sa.delete(p).where(p.c.group_key == key["group_key"], p.c.type == key["type"]))
    conn.execute(sa.insert(p).values(**key, until=until, created_at=ctx.now))
    named: list[sa.ColumnElement[bool]] = []
    if group is not None:
        named.append(j.c.group_key == group)
    if type_ is not None:
        named.append(j.c.type == type_)
    held = sa.select(j.c.id).where(j.c.id == r.c.job_id, *named)
    conn.execute(sa.delete(r).where(sa.exists(held)))
    _recount(ctx, conn)


def resume(ctx: StoreContext, conn: Connection, group: str | None, type_: str | None) -> bool:
    """End the pause of exactly ``group``/``type_``; whether one stood. Workers that
    listen are woken: the jobs it held may be runnable now."""
    p = ctx.tables.pauses
    _lock_gate(ctx, conn)
    gone = conn.execute(
        sa.delete(p).where(p.c.group_key == (group or ANY), p.c.type == (type_ or ANY), _live(ctx))
    ).rowcount
    _recount(ctx, conn)
    if gone:
        ctx.notify_ready(conn)
    return bool(gone)


def pauses(ctx: StoreContext, conn: Connection) -> list[Pause]:
    """The pauses in force now, by group then type."""
    p = ctx.tables.pauses
    rows = conn.execute(
        sa.select(p.c.group_key, p.c.type, p.c.until, p.c.created_at)
        .where(_live(ctx))
        .order_by(p.c.group_key, p.c.type)
    ).all()
    out = []
    for group, type_, until, since in rows:
        made = from_epoch(since)
        assert made is not None
        out.append(Pause(group or None, type_ or None, from_epoch(until), made))
    return out


def standing(ctx: StoreContext, conn: Connection) -> Standing:
    """The pauses in force, read by a claim that holds the gate row's lock (the caller
    reads them only when the gate counts any). Pauses that have ended are removed."""
    p = ctx.tables.pauses
    rows = conn.execute(sa.select(p.c.group_key, p.c.type, _live(ctx).label("live"))).all()
    if any(not live for _, _, live in rows):
        _recount(ctx, conn)
    return Standing.of((group, type_) for group, type_, live in rows if live)


def claim_types(
    ctx: StoreContext, conn: Connection, paused: Standing, types: Sequence[str] | None
) -> list[str] | None:
    """The types a claim of ``types`` may take under ``paused`` (None: every type, when
    no type is paused anywhere). A claim of every type names the ready types itself
    when some are paused."""
    if types is None:
        if not paused.types and not paused.pairs:
            return None
        j = ctx.tables.jobs
        types = conn.execute(
            sa.select(j.c.type).where(state_in(ctx.tables, "ready")).distinct()
        ).scalars().all()
    return paused.allowed_types(types)


def unpaused_counts(
    ctx: StoreContext,
    conn: Connection,
    paused: Standing,
    ready: Mapping[str, tuple[int, int]],
    types: Sequence[str] | None,
    cap: int,
    costed: bool = False,
) -> tuple[dict[str, tuple[int, int]], dict[str, list[str]]]:
    """``ready`` (group -> runnable count, largest weight) without the paused groups,
    and a group in which only some types are paused counted again without them. Also
    the types each such group may still run, for its claim."""
    out = {key: v for key, v in ready.items() if key not in paused.groups}
    by_group: dict[str, list[str]] = {}
    if types is None:
        return out, by_group
    for group in sorted(paused.narrowed_groups() & set(out)):
        mine = paused.group_types(group, types)
        by_group[group] = mine
        counted = None
        if mine:
            counts, _ = ctx.dialect.runnable_counts(conn, ctx.tables, ctx.now, mine, cap,
                                                    costed=costed)
            counted = counts.get(group)
        if counted is None:
            del out[group]
        else:
            out[group] = counted
    return out, by_group
