"""Operator functions behind the ``readyq`` command: migrations, status, inspection,
retry, cancel and prune.

Everything except the migration helpers takes a :class:`readyq.Queue` and runs through
its store (``queue._store.read`` / ``write``), so it uses the queue's engine, its table
prefix, its retry rules and the database's clock. Results are plain dataclasses with a
``to_json()`` method; rendering them is the CLI's business.
"""

from __future__ import annotations

import io
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from readyq import unique
from readyq.errors import JobNotFound, ReadyqError
from readyq.migrations import (
    PREFIX_ATTRIBUTE,
    script_location,
    version_table,
)
from readyq.model import BAD_ENDS, IN_FLIGHT_STATES, TERMINAL_STATES, JobState
from readyq.payload import decode
from readyq.queue import Queue
from readyq.schema import DEFAULT_PREFIX, validate_prefix

TERMINAL = tuple(sorted(s.value for s in TERMINAL_STATES))
STATE_ORDER = tuple(s.value for s in JobState)
# IN lists are sent in chunks of this many ids (well under every database's limit).
CHUNK = 500
MAX_DAG_NODES = 2000


class AdminError(ReadyqError):
    """An operator command cannot do what was asked (the message says why)."""


class NotRetryable(AdminError):
    """The job is not in a state that ``retry`` can revive."""


class NotCancellable(AdminError):
    """The job has already ended; there is nothing to cancel."""


class SchemaNotVersioned(AdminError):
    """readyq's tables exist but carry no migration history (see ``migrate --stamp``)."""


def iso(epoch: float | None) -> str | None:
    """An epoch instant as ISO 8601 UTC with milliseconds, or None."""
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat(timespec="milliseconds")


def _chunks(ids: Iterable[int], size: int = CHUNK) -> Iterable[list[int]]:
    items = sorted(set(ids))
    for i in range(0, len(items), size):
        yield items[i : i + size]


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(w|d|h|m|s)", re.IGNORECASE)
_UNITS = {"w": 604800.0, "d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}


def parse_duration(text: str) -> float:
    """Seconds in ``"7d"``, ``"12h"``, ``"1d12h"``, ``"90m"``, ``"45s"`` or ``"3600"``."""
    value = text.strip()
    try:
        seconds = float(value)
    except ValueError:
        pos, seconds = 0, 0.0
        for m in _DURATION.finditer(value):
            if m.start() != pos:
                break
            seconds += float(m.group(1)) * _UNITS[m.group(2).lower()]
            pos = m.end()
        if pos != len(value) or not value:
            raise ValueError(
                f"bad duration {text!r}: use a number of seconds or units like 7d, 12h, "
                "30m, 45s, 1w, 1d12h"
            ) from None
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"bad duration {text!r}: must be a finite, non-negative duration")
    return seconds


# -- migrations --------------------------------------------------------------------------


def _engine_of(url_or_engine: str | sa.URL | Engine | Queue) -> tuple[Engine, bool]:
    if isinstance(url_or_engine, Queue):
        return url_or_engine.engine, False
    if isinstance(url_or_engine, Engine):
        return url_or_engine, False
    return sa.create_engine(sa.make_url(url_or_engine), poolclass=sa.NullPool), True


def _alembic_config(
    prefix: str,
    *,
    connection: Connection | None = None,
    url: str | None = None,
    output: io.StringIO | None = None,
) -> Any:
    from alembic.config import Config

    cfg = Config(output_buffer=output) if output is not None else Config()
    cfg.set_main_option("script_location", script_location())
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes[PREFIX_ATTRIBUTE] = prefix
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def _sqlite_wal(engine: Engine) -> None:
    if engine.dialect.name == "sqlite" and (engine.url.database or ":memory:") != ":memory:":
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA journal_mode=WAL")
            conn.commit()


def current_revision(
    url_or_engine: str | sa.URL | Engine | Queue, prefix: str = DEFAULT_PREFIX
) -> str | None:
    """The readyq revision recorded in ``<prefix>alembic_version``, or None."""
    from alembic.runtime.migration import MigrationContext

    validate_prefix(prefix)
    engine, owned = _engine_of(url_or_engine)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"version_table": version_table(prefix)})
            rev = ctx.get_current_revision()
            conn.rollback()
            return rev
    finally:
        if owned:
            engine.dispose()


def migrate(
    url_or_engine: str | sa.URL | Engine | Queue,
    prefix: str = DEFAULT_PREFIX,
    revision: str = "head",
) -> str | None:
    """Upgrade readyq's tables for ``prefix`` to ``revision``; return the revision now current.

    Uses readyq's own version table ``<prefix>alembic_version``; running it again is a
    no-op. If the tables exist without that history (made by ``Queue.create_schema()``),
    it raises :class:`SchemaNotVersioned` rather than guess: :func:`stamp` records them.
    """
    from alembic import command

    validate_prefix(prefix)
    engine, owned = _engine_of(url_or_engine)
    try:
        _sqlite_wal(engine)
        with engine.begin() as conn:
            inspector = sa.inspect(conn)
            if inspector.has_table(f"{prefix}jobs") and not inspector.has_table(
                version_table(prefix)
            ):
                raise SchemaNotVersioned(
                    f"readyq tables with prefix {prefix!r} exist but have no migration history "
                    f"(no {version_table(prefix)} table), as Queue.create_schema() leaves them: "
                    "record them as the current revision with `readyq migrate --stamp` "
                    "(admin.stamp) and migrate from there"
                )
            command.upgrade(_alembic_config(prefix, connection=conn), revision)
        return current_revision(engine, prefix)
    finally:
        if owned:
            engine.dispose()


def stamp(
    url_or_engine: str | sa.URL | Engine | Queue,
    prefix: str = DEFAULT_PREFIX,
    revision: str = "head",
) -> str | None:
    """Record ``revision`` as applied without running it (adopt a create_schema() schema)."""
    from alembic import command

    validate_prefix(prefix)
    engine, owned = _engine_of(url_or_engine)
    try:
        with engine.begin() as conn:
            command.stamp(_alembic_config(prefix, connection=conn), revision)
        return current_revision(engine, prefix)
    finally:
        if owned:
            engine.dispose()


def downgrade(
    url_or_engine: str | sa.URL | Engine | Queue,
    prefix: str = DEFAULT_PREFIX,
    revision: str = "base",
) -> str | None:
    """Downgrade readyq's tables to ``revision`` (``base`` drops them, with every job)."""
    from alembic import command

    validate_prefix(prefix)
    engine, owned = _engine_of(url_or_engine)
    try:
        with engine.begin() as conn:
            command.downgrade(_alembic_config(prefix, connection=conn), revision)
        return current_revision(engine, prefix)
    finally:
        if owned:
            engine.dispose()


def migration_sql(url: str | sa.URL, prefix: str = DEFAULT_PREFIX, revision: str = "head") -> str:
    """The SQL that :func:`migrate` would run on a fresh database of ``url``'s kind."""
    from alembic import command

    validate_prefix(prefix)
    parsed = sa.make_url(url)
    out = io.StringIO()
    cfg = _alembic_config(prefix, url=parsed.render_as_string(hide_password=True), output=out)
    command.upgrade(cfg, revision, sql=True)
    return out.getvalue()


# -- status ------------------------------------------------------------------------------


def check_schema(queue: Queue) -> None:
    """Raise SchemaNotFound unless the queue's tables exist (reads at most one row)."""
    store = queue._store
    j, gate = store.tables.jobs, store.tables.gate

    def unit(conn: Connection) -> None:
        conn.execute(sa.select(j.c.id).limit(1)).first()
        conn.execute(sa.select(gate.c.id).limit(1)).first()

    store.read(unit)


@dataclass(frozen=True)
class WorkerSeen:
    """A worker that holds leases now, as its jobs' rows show it.

    ``expired``: every lease it holds has expired, so it has most likely stopped; the
    next sweep of any worker reclaims its jobs.
    """

    owner: str
    leased: int
    running: int
    last_heartbeat: float | None
    heartbeat_age: float | None
    lease_expires: float | None
    expired: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "leased": self.leased,
            "running": self.running,
            "last_heartbeat": iso(self.last_heartbeat),
            "heartbeat_age_seconds": _round(self.heartbeat_age),
            "lease_expires": iso(self.lease_expires),
            "expired": self.expired,
        }


@dataclass(frozen=True)
class OldestReady:
    """The runnable job that has waited longest to be claimed."""

    id: int
    type: str
    group: str
    since: float
    age: float

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "group": self.group,
            "since": iso(self.since),
            "age_seconds": _round(self.age),
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


@dataclass(frozen=True)
class Status:
    """A snapshot of the queue, read in one pass with the database's clock."""

    now: float
    states: dict[str, int]
    groups: dict[str, dict[str, int]]
    in_flight: int
    runnable: int
    deferred: int
    oldest_ready: OldestReady | None
    workers: list[WorkerSeen]

    @property
    def total(self) -> int:
        return sum(self.states.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "now": iso(self.now),
            "total": self.total,
            "states": {s: self.states.get(s, 0) for s in STATE_ORDER},
            "groups": self.groups,
            "in_flight": self.in_flight,
            "runnable": self.runnable,
            "deferred": self.deferred,
            "oldest_ready": None if self.oldest_ready is None else self.oldest_ready.to_json(),
            "workers": [w.to_json() for w in self.workers],
        }


def status(queue: Queue) -> Status:
    """Jobs per state and per group, what is in flight, the oldest runnable job's wait,
    and the workers holding leases (distinct ``lease_owner`` of leased/running jobs)."""
    store = queue._store
    j = store.tables.jobs

    def unit(conn: Connection) -> Status:
        now = float(conn.execute(sa.select(store.now())).scalar_one())
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
        ordered = {k: _ordered(v) for k, v in sorted(groups.items())}
        return Status(
            now=now,
            states=_ordered(states),
            groups=ordered,
            in_flight=in_flight,
            runnable=runnable,
            deferred=deferred,
            oldest_ready=oldest,
            workers=workers,
        )

    return store.read(unit)


def _ordered(counts: dict[str, int]) -> dict[str, int]:
    known = [s for s in STATE_ORDER if s in counts]
    other = sorted(s for s in counts if s not in STATE_ORDER)
    return {s: counts[s] for s in known + other}


# -- show --------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobRef:
    """Another job, as a line in a listing."""

    id: int
    type: str
    state: str
    is_container: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "state": self.state,
            "is_container": self.is_container,
        }


_INSTANTS = (
    "created_at",
    "updated_at",
    "run_after",
    "started_at",
    "finished_at",
    "heartbeat_at",
    "lease_expires",
    "deadline",
)


@dataclass(frozen=True)
class JobDetail:
    """Everything about one job: its row, its edges and, for a container, its children."""

    fields: dict[str, Any]
    dependencies: list[JobRef]
    dependents: list[JobRef]
    parent: JobRef | None
    children: dict[str, int]
    now: float

    @property
    def id(self) -> int:
        return int(self.fields["id"])

    def to_json(self) -> dict[str, Any]:
        out = dict(self.fields)
        for name in _INSTANTS:
            out[name] = iso(out[name])
        out["dependencies"] = [d.to_json() for d in self.dependencies]
        out["dependents"] = [d.to_json() for d in self.dependents]
        out["parent"] = None if self.parent is None else self.parent.to_json()
        if self.fields["is_container"]:
            out["children"] = self.children
        return out


def _ref(row: Any) -> JobRef:
    return JobRef(
        id=int(row.id), type=row.type, state=row.state, is_container=bool(row.is_container)
    )


def show(queue: Queue, job_id: int) -> JobDetail:
    """The job's fields, its dependencies with their states, its dependents, its parent
    and (for a container) its children per state. Raises JobNotFound."""
    store = queue._store
    t = store.tables
    j, d = t.jobs, t.deps

    def unit(conn: Connection) -> JobDetail:
        now = float(conn.execute(sa.select(store.now())).scalar_one())
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
            "max_attempts": int(m["max_attempts"]),
            "timeout": m["timeout"],
            "retry_on_timeout": bool(m["retry_on_timeout"]),
            "pending_deps": int(m["pending_deps"]),
            "cancel_requested": bool(m["cancel_requested"]),
            "lease_owner": m["lease_owner"],
            "lease_token": int(m["lease_token"]),
            "parent_id": None if m["parent_id"] is None else int(m["parent_id"]),
            "args": decode(m["args"]),
            "result": decode(m["result"]),
            "error": m["error"],
        }
        if fields["is_container"]:
            fields["open_children"] = int(m["open_children"])
            fields["failed_children"] = int(m["failed_children"])
        for name in _INSTANTS:
            value = m[name]
            fields[name] = None if value is None else float(value)
        cols = (j.c.id, j.c.type, j.c.state, j.c.is_container)
        deps = [
            _ref(r)
            for r in conn.execute(
                sa.select(*cols)
                .select_from(d.join(j, j.c.id == d.c.depends_on_id))
                .where(d.c.job_id == job_id)
                .order_by(j.c.id)
            )
        ]
        dependents = [
            _ref(r)
            for r in conn.execute(
                sa.select(*cols)
                .select_from(d.join(j, j.c.id == d.c.job_id))
                .where(d.c.depends_on_id == job_id)
                .order_by(j.c.id)
            )
        ]
        parent = None
        if fields["parent_id"] is not None:
            p = conn.execute(sa.select(*cols).where(j.c.id == fields["parent_id"])).first()
            parent = None if p is None else _ref(p)
        children: dict[str, int] = {}
        if fields["is_container"]:
            children = _ordered(
                {
                    r.state: int(r.n)
                    for r in conn.execute(
                        sa.select(j.c.state, sa.func.count().label("n"))
                        .where(j.c.parent_id == job_id)
                        .group_by(j.c.state)
                    )
                }
            )
        return JobDetail(
            fields=fields,
            dependencies=deps,
            dependents=dependents,
            parent=parent,
            children=children,
            now=now,
        )

    return store.read(unit)


# -- dag ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    id: int
    type: str
    state: str
    is_container: bool
    parent_id: int | None
    group: str

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "state": self.state,
            "is_container": self.is_container,
            "parent_id": self.parent_id,
            "group": self.group,
        }


@dataclass
class Graph:
    """The dependency graph around one job.

    ``upstream``: every job that must end before the root can finish: its dependencies,
    theirs, and the children of any container among them (the root's own children too).
    ``downstream``: every job the root's end affects: its dependents, theirs, and the
    containers they belong to. ``deps`` holds edges (dependency, dependent) and
    ``contains`` edges (container, child), both between nodes of the graph.
    """

    root: int
    nodes: dict[int, Node] = field(default_factory=dict)
    deps: set[tuple[int, int]] = field(default_factory=set)
    contains: set[tuple[int, int]] = field(default_factory=set)
    upstream: set[int] = field(default_factory=set)
    downstream: set[int] = field(default_factory=set)
    truncated: bool = False

    def dependencies_of(self, node: int) -> list[int]:
        return sorted(a for a, b in self.deps if b == node)

    def dependents_of(self, node: int) -> list[int]:
        return sorted(b for a, b in self.deps if a == node)

    def children_of(self, node: int) -> list[int]:
        return sorted(b for a, b in self.contains if a == node)

    def container_of(self, node: int) -> int | None:
        for a, b in self.contains:
            if b == node:
                return a
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "nodes": [self.nodes[i].to_json() for i in sorted(self.nodes)],
            "edges": [{"from": a, "to": b, "kind": "depends"} for a, b in sorted(self.deps)]
            + [{"from": a, "to": b, "kind": "contains"} for a, b in sorted(self.contains)],
            "upstream": sorted(self.upstream),
            "downstream": sorted(self.downstream),
            "truncated": self.truncated,
        }


def dag(queue: Queue, job_id: int, *, max_nodes: int = 200) -> Graph:
    """The graph around ``job_id`` (see :class:`Graph`), at most ``max_nodes`` jobs."""
    if max_nodes < 1 or max_nodes > MAX_DAG_NODES:
        raise ValueError(f"max_nodes must be from 1 to {MAX_DAG_NODES}, not {max_nodes}")
    store = queue._store
    t = store.tables
    j, d = t.jobs, t.deps
    node_cols = (j.c.id, j.c.type, j.c.state, j.c.is_container, j.c.parent_id, j.c.group_key)

    def node(r: Any) -> Node:
        return Node(
            id=int(r.id),
            type=r.type,
            state=r.state,
            is_container=bool(r.is_container),
            parent_id=None if r.parent_id is None else int(r.parent_id),
            group=r.group_key,
        )

    def unit(conn: Connection) -> Graph:
        row = conn.execute(sa.select(*node_cols).where(j.c.id == job_id)).first()
        if row is None:
            raise JobNotFound(f"no job with id {job_id}")
        g = Graph(root=job_id)
        g.nodes[job_id] = node(row)

        def fetch(ids: Iterable[int]) -> None:
            for chunk in _chunks(i for i in ids if i not in g.nodes):
                for r in conn.execute(sa.select(*node_cols).where(j.c.id.in_(chunk))):
                    g.nodes[int(r.id)] = node(r)

        def admit(candidates: Iterable[int], seen: set[int]) -> list[int]:
            fresh = []
            new_nodes = 0
            for c in sorted(set(candidates)):
                if c in seen:
                    continue
                if c not in g.nodes:
                    if len(g.nodes) + new_nodes >= max_nodes:
                        g.truncated = True
                        continue
                    new_nodes += 1
                seen.add(c)
                fresh.append(c)
            fetch(fresh)
            return fresh

        # Upstream: dependencies, and the children of containers.
        seen_up = {job_id}
        frontier = [job_id]
        while frontier:
            found: list[int] = []
            for chunk in _chunks(frontier):
                found += [
                    int(x)
                    for x in conn.execute(
                        sa.select(d.c.depends_on_id).where(d.c.job_id.in_(chunk))
                    ).scalars()
                ]
                containers = [i for i in chunk if g.nodes[i].is_container]
                for part in _chunks(containers):
                    found += [
                        int(x)
                        for x in conn.execute(
                            sa.select(j.c.id).where(j.c.parent_id.in_(part))
                        ).scalars()
                    ]
            frontier = admit(found, seen_up)
        g.upstream = seen_up - {job_id}

        # Downstream: dependents, and the containers jobs belong to.
        seen_down = {job_id}
        frontier = [job_id]
        while frontier:
            found = []
            for chunk in _chunks(frontier):
                found += [
                    int(x)
                    for x in conn.execute(
                        sa.select(d.c.job_id).where(d.c.depends_on_id.in_(chunk))
                    ).scalars()
                ]
            found += [
                parent for i in frontier if (parent := g.nodes[i].parent_id) is not None
            ]
            frontier = admit(found, seen_down)
        g.downstream = seen_down - {job_id}

        # Every edge between the nodes shown, also those no walk crossed.
        ids = sorted(g.nodes)
        for chunk in _chunks(ids):
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

    return store.read(unit)


_STATE_COLOURS = {
    "waiting": "#e0e0e0",
    "ready": "#cfe8ff",
    "leased": "#ffe9a8",
    "running": "#ffd166",
    "active": "#e6d7ff",
    "done": "#c8f0c8",
    "failed": "#ffb3b3",
    "cancelled": "#d9d9d9",
    "upstream_failed": "#ffd6d6",
}


def _label(n: Node) -> str:
    kind = " (container)" if n.is_container else ""
    return f"#{n.id} {n.type}{kind}\n{n.state}"


def to_mermaid(g: Graph) -> str:
    """A Mermaid flowchart: ``A --> B`` means B depends on A; ``C -. contains .-> X``."""

    def text(s: str) -> str:
        return (
            s.replace("&", "#amp;")
            .replace('"', "#quot;")
            .replace("<", "#lt;")
            .replace(">", "#gt;")
            .replace("\n", "<br/>")
        )

    lines = ["flowchart TD"]
    for i in sorted(g.nodes):
        n = g.nodes[i]
        lines.append(f'    j{i}["{text(_label(n))}"]')
    for a, b in sorted(g.deps):
        lines.append(f"    j{a} --> j{b}")
    for a, b in sorted(g.contains):
        lines.append(f"    j{a} -. contains .-> j{b}")
    by_state: dict[str, list[int]] = defaultdict(list)
    for n in g.nodes.values():
        by_state[n.state].append(n.id)
    for state in sorted(by_state):
        colour = _STATE_COLOURS.get(state, "#ffffff")
        lines.append(f"    classDef {state} fill:{colour},stroke:#555")
        lines.append(f"    class {','.join(f'j{i}' for i in sorted(by_state[state]))} {state}")
    lines.append(f"    style j{g.root} stroke-width:3px")
    return "\n".join(lines) + "\n"


def to_dot(g: Graph) -> str:
    """A Graphviz digraph: ``A -> B`` means B depends on A; dashed edges are containment."""

    def text(s: str) -> str:
        return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    lines = [
        "digraph readyq {",
        "    rankdir=TB;",
        '    node [shape=box, style="rounded,filled", fontname="Helvetica"];',
    ]
    for i in sorted(g.nodes):
        n = g.nodes[i]
        extra = ", penwidth=3" if i == g.root else ""
        colour = _STATE_COLOURS.get(n.state, "#ffffff")
        lines.append(f'    j{i} [label="{text(_label(n))}", fillcolor="{colour}"{extra}];')
    for a, b in sorted(g.deps):
        lines.append(f"    j{a} -> j{b};")
    for a, b in sorted(g.contains):
        lines.append(f'    j{a} -> j{b} [style=dashed, label="contains"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


# -- retry -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryResult:
    """What a retry changed, in one transaction.

    ``revived``: (job id, new state) for every job set back to ``ready`` or ``waiting``,
    the retried job(s) first. ``reopened``: containers set back to ``active``.
    """

    job_id: int
    revived: list[tuple[int, str]]
    reopened: list[int]

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "revived": [{"id": i, "state": s} for i, s in self.revived],
            "reopened": self.reopened,
        }


def retry(queue: Queue, job_id: int, *, extra_attempts: int = 1) -> RetryResult:
    """Put a failed, cancelled or upstream_failed job back, with what failed because of it.

    * The job goes to ``ready`` if every job it depends on is done, else ``waiting`` (its
      counter of unfinished dependencies is recomputed). Its error, result, finish time
      and lease fields are cleared; ``attempts`` is kept, so ``(job.id, job.attempt)``
      stays a unique idempotency key, and ``max_attempts`` is raised to at least
      ``attempts + extra_attempts`` so that the job gets that many more attempts.
    * It is refused (:class:`NotRetryable`) for a job that is not finished or is done,
      and for a job that depends on a job that ended badly: the message names the job
      at the root of the failure, whose retry revives this one too.
    * Dependents that ended ``upstream_failed`` are revived too (to ``waiting``), and
      theirs, as long as every job they depend on is now either not failed or revived
      in this same retry: a dependent that also depends on another failed job stays
      ``upstream_failed``.
    * A container the revived jobs belong to counts them as open again; a container
      that had already ended ``failed`` goes back to ``active`` (and its parent
      container likewise), and its ``upstream_failed`` dependents are revived by the
      same rule. It rolls up again when its last child ends.
    * Retrying a container retries every ``failed`` or ``cancelled`` job inside it (at
      any depth) whose dependencies allow it, with the same consequences.
    * A job brought back takes its unique key back: the retry is refused if another
      job that has not ended holds that key now.

    Everything happens in one transaction, with the rows it reads locked.
    """
    if (
        isinstance(extra_attempts, bool)
        or not isinstance(extra_attempts, int)
        or extra_attempts < 1
    ):
        raise ValueError(f"extra_attempts must be an int >= 1, not {extra_attempts!r}")
    store = queue._store
    try:
        return store.write(
            lambda conn: _retry(queue, conn, job_id, extra_attempts),
            idempotent=False,
            what="retry",
        )
    except sa.exc.IntegrityError as exc:
        # A job enqueued with the same unique key since the check in _retry.
        if unique.is_live_key_conflict(exc, store.tables):
            raise NotRetryable(
                f"job {job_id} cannot be retried: a job that has not ended took its "
                "unique key meanwhile"
            ) from exc
        raise


def _retry(queue: Queue, conn: Connection, job_id: int, extra: int) -> RetryResult:
    store = queue._store
    t = store.tables
    j, d = t.jobs, t.deps
    lock = store.dialect.lock_rows
    now = store.now()
    cols = (j.c.id, j.c.state, j.c.is_container, j.c.parent_id)

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
        for chunk in _chunks(i for i in ids if i not in info):
            for r in conn.execute(lock(sa.select(*cols).where(j.c.id.in_(chunk)))):
                info[int(r.id)] = r

    # Dependencies of each job considered, with their states (rows locked, so none of
    # them can end unseen while this transaction decides).
    dep_states: dict[int, dict[int, str]] = {}

    def load_deps(ids: Iterable[int]) -> None:
        todo = [i for i in ids if i not in dep_states]
        for i in todo:
            dep_states[i] = {}
        for chunk in _chunks(todo):
            edges = conn.execute(
                sa.select(d.c.job_id, d.c.depends_on_id).where(d.c.job_id.in_(chunk))
            ).all()
            load(int(e.depends_on_id) for e in edges)
            for e in edges:
                dep_states[int(e.job_id)][int(e.depends_on_id)] = info[int(e.depends_on_id)].state

    if row.is_container:
        roots = []
        frontier = [job_id]
        while frontier:
            kids = []
            for chunk in _chunks(frontier):
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
        load_deps(roots)
        bad = sorted(dep for dep, state in dep_states[job_id].items() if state in BAD_ENDS)
        if bad:
            causes = _root_causes(conn, queue, bad)
            raise NotRetryable(
                f"job {job_id} depends on job {bad[0]}, which ended {info[bad[0]].state}: "
                f"retry {_jobs_phrase(causes)} instead; that revives this job too"
            )

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
        load_deps(i for i in wave if not info[i].is_container)
        admitted = []
        for i in sorted(set(wave)):
            if i in revived or i in reopened or info[i].is_container:
                continue
            if i not in allowed and info[i].state != "upstream_failed":
                continue
            if not admissible(i):
                continue
            revived[i] = sum(1 for s in dep_states[i].values() if s != "done")
            order.append(i)
            admitted.append(i)
            admitted += reopen_parents(i)
        # Next wave: dependents of everything revived or reopened in this one.
        nxt: list[int] = []
        for chunk in _chunks(admitted):
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

    taken = unique.taken_keys(store, conn, sorted(revived))
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
        for chunk in _chunks(ids):
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
                    max_attempts=sa.case((j.c.max_attempts < bump, bump), else_=j.c.max_attempts),
                    updated_at=now,
                )
            )
    for chunk in _chunks(reopened):
        conn.execute(
            sa.update(j)
            .where(j.c.id.in_(chunk), j.c.state.in_(BAD_ENDS))
            .values(state="active", error=None, finished_at=None, updated_at=now)
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
    return RetryResult(
        job_id=job_id,
        revived=[(i, "ready" if revived[i] == 0 else "waiting") for i in order],
        reopened=reopened,
    )


def _root_causes(conn: Connection, queue: Queue, bad: Sequence[int]) -> list[int]:
    """Follow ``upstream_failed`` jobs up to the jobs that failed or were cancelled."""
    t = queue._store.tables
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
        for chunk in _chunks(up):
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


# -- cancel ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CancelResult:
    job_id: int
    before: str
    after: str

    @property
    def requested(self) -> bool:
        """The job was running: it was asked to stop and ends at its next heartbeat."""
        return self.before in IN_FLIGHT_STATES and self.after in IN_FLIGHT_STATES

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "before": self.before,
            "after": self.after,
            "requested": self.requested,
        }


def cancel(queue: Queue, job_id: int) -> CancelResult:
    """``Queue.cancel`` plus the states before and after. Raises NotCancellable for a job
    that had already ended, JobNotFound for a missing one."""
    before = queue.get(job_id).state.value
    if not queue.cancel(job_id):
        after = queue.get(job_id).state.value
        raise NotCancellable(f"job {job_id} has already ended ({after}); nothing to cancel")
    return CancelResult(job_id=job_id, before=before, after=queue.get(job_id).state.value)


# -- prune -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PruneResult:
    """``deleted`` jobs (and ``edges`` job_deps rows); ``kept``: finished jobs older than
    the cutoff that stay because a job that stays depends on them or is inside them."""

    cutoff: float
    candidates: int
    deleted: int
    edges: int

    @property
    def kept(self) -> int:
        return max(0, self.candidates - self.deleted)

    def to_json(self) -> dict[str, Any]:
        return {
            "cutoff": iso(self.cutoff),
            "candidates": self.candidates,
            "deleted": self.deleted,
            "edges_deleted": self.edges,
            "kept": self.kept,
        }


def prune(
    queue: Queue,
    older_than: float,
    *,
    batch_size: int = 500,
    progress: Callable[[int, int], None] | None = None,
) -> PruneResult:
    """Delete finished jobs whose ``finished_at`` is more than ``older_than`` seconds ago.

    A job is deleted only if no remaining job depends on it and no remaining job is
    inside it (so never a dependency of an unfinished job, nor a container with
    children left). Its own job_deps rows are deleted first, in the same transaction.
    Batches of ``batch_size`` run newest id first, each in its own transaction, so
    dependents go before the jobs they depend on and children before their container;
    passes repeat until one deletes nothing. ``progress(deleted, candidates)`` is called
    after each batch. The cutoff is taken once, from the database clock.
    """
    if older_than < 0 or not math.isfinite(older_than):
        raise ValueError(
            f"older_than must be a finite, non-negative number of seconds, not {older_than!r}"
        )
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, not {batch_size!r}")
    store = queue._store
    t = store.tables
    j, d = t.jobs, t.deps
    child = j.alias("child")

    def start(conn: Connection) -> tuple[float, int]:
        cutoff = float(conn.execute(sa.select(store.now())).scalar_one()) - older_than
        n = conn.execute(
            sa.select(sa.func.count()).where(j.c.state.in_(TERMINAL), j.c.finished_at < cutoff)
        ).scalar_one()
        return cutoff, int(n)

    cutoff, candidates = store.read(start)
    old = sa.and_(j.c.state.in_(TERMINAL), j.c.finished_at < cutoff)
    leaf = sa.and_(
        ~sa.exists().where(d.c.depends_on_id == j.c.id),
        ~sa.exists().where(child.c.parent_id == j.c.id),
    )

    def batch(conn: Connection, below: int | None) -> tuple[int | None, int, int]:
        stmt = sa.select(j.c.id).where(old, leaf)
        if below is not None:
            stmt = stmt.where(j.c.id < below)
        ids = [
            int(x)
            for x in conn.execute(
                store.dialect.lock_rows(stmt.order_by(j.c.id.desc()).limit(batch_size))
            ).scalars()
        ]
        if not ids:
            return None, 0, 0
        # Re-check under the locks: a job enqueued meanwhile may depend on one of them
        # (enqueue locks the rows it depends on, so none can appear after this).
        blocked = set(
            int(x)
            for x in conn.execute(
                sa.select(d.c.depends_on_id).where(d.c.depends_on_id.in_(ids))
            ).scalars()
        )
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

    deleted = edges = 0
    while True:
        below: int | None = None
        this_pass = 0
        while True:
            below, n, e = store.write(lambda conn, b=below: batch(conn, b), what="prune")  # type: ignore[misc]
            deleted += n
            edges += e
            this_pass += n
            if progress is not None:
                progress(deleted, max(candidates, deleted))
            if below is None:
                break
        if this_pass == 0:
            break
    return PruneResult(
        cutoff=cutoff, candidates=max(candidates, deleted), deleted=deleted, edges=edges
    )
