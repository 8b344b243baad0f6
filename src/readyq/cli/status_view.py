"""What `readyq status` and `readyq top` draw: the status as rich tables and lines, and
the jobs in flight that report progress."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from readyq.cli.output import one_line, progress_cell, state_text, styled
from readyq.reports import ago


def render_status(st: Any, database: str, prefix: str, *, max_rows: int | None = None) -> Any:
    """The status as rich renderables: one table of jobs per group and state (with an
    ``all`` row), the oldest runnable job, and the workers holding leases. ``max_rows``
    caps the group and worker rows (for ``top``)."""
    from rich.console import Group

    from readyq.admin import iso

    parts: list[Any] = [
        styled(
            f"readyq on {database} (prefix {prefix}) at {iso(st.now)} (database clock): "
            f"{st.total} jobs, {st.in_flight} in flight, {st.runnable} runnable now"
            + (f", {st.deferred} ready but deferred" if st.deferred else "")
            + (f", {len(st.stuck)} stuck" if st.stuck else ""),
            "bold",
        )
    ]
    parts.append(_jobs_table(st, max_rows))
    oldest = st.oldest_ready
    parts.append(
        styled(
            "oldest runnable job: none"
            if oldest is None
            else f"oldest runnable job: #{oldest.id} {oldest.type} (group {oldest.group}), "
            f"waiting {ago(oldest.age)}"
        )
    )
    parts.append(_workers_table(st, max_rows))
    parts += _resource_parts(st)
    parts += _warnings(st)
    if st.stuck:
        parts.append(_stuck_table(st, max_rows))
    return Group(*parts)


def _jobs_table(st: Any, max_rows: int | None) -> Any:
    """Jobs per group (the busiest ``max_rows`` of them) and state, and an ``all`` row."""
    from rich.table import Table

    from readyq.admin import STATE_ORDER

    # Known states in their order, then any other a row holds (written by hand).
    present = [s for s in STATE_ORDER if st.states.get(s)]
    present += sorted(s for s in st.states if s not in STATE_ORDER and st.states[s])
    table = Table(title="Jobs per group and state", title_justify="left")
    table.add_column("group")
    for s in present:
        table.add_column(state_text(s), justify="right")
    table.add_column("total", justify="right")
    groups = sorted(st.groups.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
    hidden = 0
    if max_rows is not None and len(groups) > max_rows:
        hidden, groups = len(groups) - max_rows, groups[:max_rows]
    for name, counts in sorted(groups):
        table.add_row(
            styled(name),
            *[styled(counts.get(s, 0) or "") for s in present],
            styled(sum(counts.values())),
        )
    if hidden:
        table.add_row(styled(f"... {hidden} more groups", "bright_black"))
    table.add_section()
    table.add_row(
        styled("all", "bold"),
        *[styled(st.states.get(s, 0), "bold") for s in present],
        styled(st.total, "bold"),
    )
    return table


def _workers_table(st: Any, max_rows: int | None) -> Any:
    """The workers holding leases (a line when there are none)."""
    from rich.table import Table

    if not st.workers:
        return styled("workers holding leases: none")
    workers = Table(title="Workers holding leases", title_justify="left")
    for col, just in (
        ("worker", "left"),
        ("leased", "right"),
        ("running", "right"),
        ("last heartbeat", "right"),
        ("lease", "left"),
    ):
        workers.add_column(col, justify=just)  # type: ignore[arg-type]
    shown = st.workers if max_rows is None else st.workers[:max_rows]
    for w in shown:
        workers.add_row(
            styled(w.owner),
            styled(w.leased),
            styled(w.running),
            styled(f"{ago(w.heartbeat_age)} ago"),
            styled("expired", "bold red") if w.expired else styled("live", "green"),
        )
    if len(shown) < len(st.workers):
        workers.add_row(styled(f"... {len(st.workers) - len(shown)} more", "bright_black"))
    return workers


def _resource_parts(st: Any) -> list[Any]:
    """The resources table, and a line for each resource that runnable jobs wait for."""
    from rich.table import Table

    if not st.resources:
        return []
    res = Table(title="Resources", title_justify="left")
    for col in ("resource", "capacity", "in use", "waiting jobs", "units wanted",
                "largest", "reserved"):
        res.add_column(col, justify="left" if col == "resource" else "right")
    for r in st.resources:
        cap = "unknown" if r.capacity is None else str(r.capacity)
        full = r.capacity is not None and r.in_use >= r.capacity
        res.add_row(
            styled(r.name), styled(cap), styled(r.in_use, "bold" if full else ""),
            styled(r.waiting or ""), styled(r.wanted or ""), styled(r.largest or ""),
            styled(r.reserved or ""),
        )
    parts: list[Any] = [res]
    for r in st.resources:
        if r.waiting and (r.capacity is None or r.in_use + 1 > r.capacity):
            parts.append(
                styled(
                    f"{r.waiting} runnable jobs wait for resource {r.name!r}: "
                    + ("no worker has recorded its capacity yet (start a worker "
                       "that defines it)" if r.capacity is None
                       else f"{r.in_use} of {r.capacity} units in use"),
                    "yellow",
                )
            )
    return parts


def _warnings(st: Any) -> list[Any]:
    """A line per pause in force and per job type that no worker seems to run."""
    parts: list[Any] = []
    if st.pauses:
        from readyq.reports import pause_line

        for pause in st.pauses:
            parts.append(styled(pause_line(pause), "bold yellow"))
    for u in st.unclaimed_types:
        parts.append(
            styled(
                f"no worker seems to run job type {u.type!r}: {u.runnable} runnable, the "
                f"oldest waiting {ago(u.oldest_age)}, none in flight (start a worker "
                "with a handler for it)",
                "bold yellow",
            )
        )
    return parts


def _stuck_table(st: Any, max_rows: int | None) -> Any:
    """The jobs and containers that cannot progress on their own."""
    from rich.table import Table

    stuck = Table(
        title="Stuck: these cannot progress on their own", title_justify="left",
        title_style="bold yellow",
    )
    for col in ("id", "type", "state", "why", "what to do"):
        stuck.add_column(col, justify="right" if col == "id" else "left")
    shown = st.stuck if max_rows is None else st.stuck[:max_rows]
    for j in shown:
        stuck.add_row(
            styled(j.id), styled(j.type), state_text(j.state), styled(j.detail), styled(j.hint)
        )
    if len(shown) < len(st.stuck):
        stuck.add_row(styled(f"... {len(st.stuck) - len(shown)} more", "bright_black"))
    return stuck


def render_progress(moving: Sequence[Any], max_rows: int) -> Any:
    """The jobs in flight that report progress (``top``), at most ``max_rows`` of them."""
    from rich.table import Table

    table = Table(title="Jobs in flight reporting progress", title_justify="left")
    for name in ("id", "type", "worker", "progress", "message"):
        table.add_column(name, justify="right" if name == "id" else "left")
    for r in moving[:max_rows]:
        table.add_row(styled(r.id), styled(r.type), styled(r.worker or "-"),
                      progress_cell(r.progress), styled(one_line(r.progress.message, 60)))
    if len(moving) > max_rows:
        table.add_row(styled("..."), styled("more", "bright_black"))
    return table
