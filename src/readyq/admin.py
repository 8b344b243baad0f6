"""Operator functions behind the ``readyq`` command: migrations, status, inspection,
retry, cancel and prune.

The reads and writes themselves are the store's (:mod:`readyq.store.inspection`,
:mod:`readyq.store.control`), run through the queue's store, so they use the queue's
engine, its table prefix, its retry rules and the database's clock. The results are the
dataclasses of :mod:`readyq.reports`, each with a ``to_json()``; this module adds the
checks of the operator's arguments and the graph's text formats.
"""

from __future__ import annotations

import dataclasses
import io
import math
import re
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from readyq.building import check_job_id
from readyq.dialects import dialect_for
from readyq.errors import (
    AdminError,
    InvalidArgument,
    NotCancellable,
    NotRetryable,
    SchemaNotVersioned,
)
from readyq.listing import JobFilter, bulk_filter, filter_of
from readyq.migrations import (
    PREFIX_ATTRIBUTE,
    script_location,
    version_table,
)
from readyq.queue import Queue
from readyq.reports import (
    STATE_ORDER,
    BulkResult,
    CancelResult,
    Graph,
    JobDetail,
    JobRef,
    Node,
    OldestReady,
    PruneResult,
    RetryResult,
    RunningProgress,
    Status,
    WorkerSeen,
    iso,
    pause_line,
    pauses_of,
    resource_waits,
)
from readyq.schema import DEFAULT_PREFIX, MAX_ATTEMPTS, MAX_SECONDS, validate_prefix
from readyq.store.control import CANCEL_SOURCES
from readyq.store.enqueue import is_live_key_conflict

__all__ = [
    "STATE_ORDER",
    "AdminError",
    "BulkResult",
    "CancelResult",
    "Graph",
    "JobDetail",
    "JobRef",
    "Node",
    "NotCancellable",
    "NotRetryable",
    "OldestReady",
    "PruneResult",
    "RetryResult",
    "SchemaNotVersioned",
    "Status",
    "WorkerSeen",
    "cancel",
    "cancel_many",
    "check_schema",
    "current_revision",
    "dag",
    "downgrade",
    "in_flight_progress",
    "iso",
    "migrate",
    "migration_sql",
    "parse_duration",
    "prune",
    "retry",
    "retry_many",
    "show",
    "stamp",
    "status",
    "to_dot",
    "to_mermaid",
]

MAX_DAG_NODES = 2000
# The most jobs one transaction of a prune deletes.
MAX_BATCH_SIZE = 100_000


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
    if seconds > MAX_SECONDS:
        raise ValueError(f"bad duration {text!r}: must be at most a century")
    return seconds


def _seconds_arg(value: Any, what: str) -> float:
    """A duration argument in seconds: a finite number from 0 to a century."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 <= value <= MAX_SECONDS
    ):
        raise InvalidArgument(
            f"{what} must be a number of seconds from 0 to a century "
            f"({MAX_SECONDS:,.0f}), not {value!r}"
        )
    return float(value)


def _int_arg(value: Any, what: str, high: int) -> int:
    """An int argument from 1 to ``high``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise InvalidArgument(f"{what} must be an int from 1 to {high:,}, not {value!r}")
    return value


# -- migrations --------------------------------------------------------------------------


def _engine_of(url_or_engine: str | sa.URL | Engine | Queue) -> tuple[Engine, bool]:
    """The engine to migrate on, prepared by its dialect (on SQLite: the WAL journal and
    the busy timeout), and whether it was made here."""
    if isinstance(url_or_engine, Queue):
        return url_or_engine.engine, False
    if isinstance(url_or_engine, Engine):
        return dialect_for(url_or_engine).prepare_engine(url_or_engine, owned=False), False
    engine = sa.create_engine(sa.make_url(url_or_engine), poolclass=sa.NullPool)
    return dialect_for(engine).prepare_engine(engine, owned=True), True


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


# -- status and inspection ---------------------------------------------------------------


def check_schema(queue: Queue) -> None:
    """Raise SchemaNotFound unless the queue's tables exist (reads at most one row)."""
    queue.store.check_schema()


def status(
    queue: Queue, *, unclaimed_after: float = 60.0, empty_after: float = 60.0
) -> Status:
    """Jobs per state and per group, what is in flight, the oldest runnable job's wait,
    the workers holding leases (distinct ``lease_owner`` of leased/running jobs), the
    job types that seem to have no worker (runnable jobs waiting more than
    ``unclaimed_after`` seconds while none of the type is in flight), and the first 20
    stuck jobs (``Queue.stuck``; empty containers after ``empty_after`` seconds), and
    the pauses in force."""
    unclaimed_after = _seconds_arg(unclaimed_after, "unclaimed_after")
    empty_after = _seconds_arg(empty_after, "empty_after")
    st = queue.store.status(unclaimed_after=unclaimed_after, empty_after=empty_after)
    pauses = queue.pauses()
    # A type paused everywhere waits for its resume, not for a worker.
    paused_types = {p.type for p in pauses if p.group is None}
    return dataclasses.replace(
        st,
        resources=list(queue.resource_stats().values()),
        pauses=pauses,
        unclaimed_types=[u for u in st.unclaimed_types if u.type not in paused_types],
    )


def in_flight_progress(queue: Queue, *, limit: int = 1000) -> list[RunningProgress]:
    """The first ``limit`` jobs in flight, by id, that reported progress
    (``Job.progress``), with what they reported last."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidArgument(f"limit must be a positive integer, not {limit!r}")
    return queue.store.in_flight_progress(limit)


def show(queue: Queue, job_id: int) -> JobDetail:
    """The job's fields, its dependencies with their states, its dependents, its parent
    and (for a container) its children per state; for a ready job that takes resources,
    the resources it waits for. Raises JobNotFound (InvalidJobId for a value that
    cannot be a job id)."""
    job_id = check_job_id(job_id)
    detail = queue.store.job_detail(job_id)
    f = detail.fields
    if f["state"] != "ready" or f["is_container"]:
        return detail
    paused = pauses_of(queue.pauses(), f["group"], f["type"])
    if paused:
        return dataclasses.replace(detail, waits_for=[pause_line(p) for p in paused])
    held = queue.store.reservation(job_id)
    uses = f["uses"]
    if uses is None:
        # The handler's costs: this queue's registration, else what the worker that
        # reserved the job resolved.
        spec = queue.handlers.get(f["type"])
        uses = dict(spec.uses) if spec is not None else (held or {})
    if not uses:
        return detail
    stats = queue.resource_stats()
    waits = resource_waits(uses, stats, held is not None)
    return dataclasses.replace(detail, waits_for=waits)


def dag(queue: Queue, job_id: int, *, max_nodes: int = 200) -> Graph:
    """The graph around ``job_id`` (see :class:`readyq.reports.Graph`), at most
    ``max_nodes`` jobs."""
    job_id = check_job_id(job_id)
    _int_arg(max_nodes, "max_nodes", MAX_DAG_NODES)
    return queue.store.graph(job_id, max_nodes=max_nodes)


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


# -- retry, cancel, prune ------------------------------------------------------------------


def retry(
    queue: Queue, job_id: int, *, extra_attempts: int = 1, fresh: bool = False
) -> RetryResult:
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
    * A container that ended ``upstream_failed`` through its own dependencies is
      revived (to ``active``) by the retry of the job at the root, like a job; a retry
      of the container itself is refused, naming that job.
    * Retrying a container retries every ``failed`` or ``cancelled`` job inside it (at
      any depth) whose dependencies allow it, with the same consequences.
    * A job brought back takes its unique key back: the retry is refused if another
      job that has not ended holds that key now.
    * What its attempts kept (stored steps, saved state, progress) is kept, so that the
      retried job resumes; with ``fresh`` it is deleted, for every job revived.

    Everything happens in one transaction, with the rows it reads locked. Raises
    JobNotFound, InvalidJobId for a value that cannot be a job id, and InvalidArgument
    for ``extra_attempts`` that is not an int from 1 to 1,000,000.
    """
    job_id = check_job_id(job_id)
    _int_arg(extra_attempts, "extra_attempts", MAX_ATTEMPTS)
    store = queue.store
    try:
        if not isinstance(fresh, bool):
            raise InvalidArgument(f"fresh must be True or False, not {fresh!r}")
        return store.retry(job_id, extra_attempts, fresh=fresh)
    except sa.exc.IntegrityError as exc:
        # A job enqueued with the same unique key since the check in the retry.
        if is_live_key_conflict(exc, store.tables):
            raise NotRetryable(
                f"job {job_id} cannot be retried: a job that has not ended took its "
                "unique key meanwhile"
            ) from exc
        raise


def _cancel_source(by: Any) -> str:
    if by not in CANCEL_SOURCES:
        raise InvalidArgument(f"by must be one of {', '.join(CANCEL_SOURCES)}, not {by!r}")
    return str(by)


def cancel(queue: Queue, job_id: int, *, by: str = "api") -> CancelResult:
    """``Queue.cancel`` plus the states before and after. Raises NotCancellable for a job
    that had already ended, JobNotFound for a missing one. ``by`` ("api", "cli" or
    "dashboard") is recorded as who asked (``JobInfo.cancelled_by``)."""
    job_id = check_job_id(job_id)
    by = _cancel_source(by)
    queue.check_open()
    before = queue.get(job_id).state.value
    done = queue.store.cancel(job_id, by)
    if done is None:
        after = queue.get(job_id).state.value
        raise NotCancellable(f"job {job_id} has already ended ({after}); nothing to cancel")
    return CancelResult(job_id=job_id, before=before, after=queue.get(job_id).state.value,
                        ended=done.ended, stopping=done.requested)


def prune(
    queue: Queue,
    older_than: float,
    *,
    batch_size: int = 500,
    progress: Callable[[int, int], None] | None = None,
    dry_run: bool = False,
) -> PruneResult:
    """Delete finished jobs whose ``finished_at`` is more than ``older_than`` seconds ago.

    A job is deleted only if no remaining job depends on it and no remaining job is
    inside it (so never a dependency of an unfinished job, nor a container with
    children left). Its own job_deps rows are deleted first, in the same transaction.
    Batches of ``batch_size`` run newest id first, each in its own transaction, so
    dependents go before the jobs they depend on and children before their container;
    passes repeat until one deletes nothing. ``progress(deleted, candidates)`` is called
    after each batch. The cutoff is taken once, from the database clock.

    With ``dry_run``, nothing is deleted: the result counts the jobs and dependency rows
    a prune would delete now (``dry_run`` set), in one read.

    Raises InvalidArgument, before anything is read, for an ``older_than`` that is not
    a number of seconds from 0 to a century, or a ``batch_size`` that is not an int from
    1 to 100,000.
    """
    older_than = _seconds_arg(older_than, "older_than")
    _int_arg(batch_size, "batch_size", MAX_BATCH_SIZE)
    if dry_run:
        return queue.store.prune_preview(older_than)
    return queue.store.prune(older_than, batch_size=batch_size, progress=progress)


def _bulk(
    queue: Queue,
    action: str,
    filter: JobFilter | None,
    criteria: dict[str, Any],
    *,
    dry_run: bool,
    extra_attempts: int = 1,
    by: str = "api",
) -> BulkResult:
    queue.check_open()
    flt = bulk_filter(filter_of(filter, criteria), action)
    store = queue.store
    try:
        return store.bulk(
            action, flt, dry_run=dry_run, extra_attempts=extra_attempts, by=by
        )
    except sa.exc.IntegrityError as exc:
        if is_live_key_conflict(exc, store.tables):
            raise NotRetryable(
                "a job could not be retried: a job that has not ended took its unique key "
                "meanwhile; the jobs retried before it in its batch were rolled back"
            ) from exc
        raise


def retry_many(
    queue: Queue,
    filter: JobFilter | None = None,
    *,
    dry_run: bool = False,
    extra_attempts: int = 1,
    **criteria: Any,
) -> BulkResult:
    """Retry every job matching a filter, with the rules of :func:`retry`.

    The filter is a :class:`readyq.JobFilter` or its criteria as keywords (``state``,
    ``type``, ``group``, ``parent``, time bounds, ``unique_key``, ``id``); at least one
    is needed. Without a state it takes the jobs that ``failed``; states other than
    failed, cancelled and upstream_failed are refused (:class:`readyq.InvalidFilter`).
    Jobs are retried oldest first, 200 per transaction; a job that :func:`retry`
    refuses (an upstream_failed job whose failed dependency is not retried with it, a
    container with nothing to retry) is skipped with the reason, and its dependents
    revived by the retry of another are counted once. The result says how many matched,
    how many jobs changed (the dependents and containers revived with them included)
    and why jobs were skipped.

    With ``dry_run``, the same runs in one transaction that is rolled back: the counts
    are what a retry would change now, and nothing changes.

    Example::

        report = admin.retry_many(queue, state="failed", type="resize", dry_run=True)
        print(report.matched, report.changed)
    """
    _int_arg(extra_attempts, "extra_attempts", MAX_ATTEMPTS)
    return _bulk(
        queue, "retry", filter, criteria, dry_run=dry_run, extra_attempts=extra_attempts
    )


def cancel_many(
    queue: Queue,
    filter: JobFilter | None = None,
    *,
    dry_run: bool = False,
    by: str = "api",
    **criteria: Any,
) -> BulkResult:
    """Cancel every job matching a filter, with the rules of ``Queue.cancel``, recording
    ``by`` as who asked (see :func:`cancel`).

    The filter is given as for :func:`retry_many`; without a state it takes every job
    that has not ended, and a state of ended jobs is refused. Waiting and ready jobs end
    ``cancelled`` (``changed``; their dependents end ``upstream_failed``), running ones
    are asked to stop (``requested``), containers cancel their children. With
    ``dry_run`` nothing changes and the counts are what a cancel would do now.
    """
    return _bulk(queue, "cancel", filter, criteria, dry_run=dry_run, by=_cancel_source(by))
