"""The Store: readyq's database work, one module per duty, behind one small facade.

* :mod:`~readyq.store.transactions`: the retry loop every unit runs in;
* :mod:`~readyq.store.enqueue`: adding jobs, batches and unique keys;
* :mod:`~readyq.store.graph`: what a job's end does to its dependents and container;
* :mod:`~readyq.store.claim`: the claim under the cap, fair share and rate limits;
* :mod:`~readyq.store.outcomes`: fenced starts, heartbeats and outcomes;
* :mod:`~readyq.store.sweeps`: expired leases and passed deadlines;
* :mod:`~readyq.store.control`: cancel, retry and prune;
* :mod:`~readyq.store.inspection`: the reads behind status, show, dag and metrics;
* :mod:`~readyq.store.schedules`: periodic schedules and their firings.

Each unit is a function of a :class:`~readyq.store.context.StoreContext` and an open
connection. The :class:`Store` connects on first use, picks the dialect, builds the
context and runs each public method as one transaction of those units (a few run more
than one: a reclaim reads before it writes; a prune deletes batch by batch).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from readyq.claim_order import ClaimOrder, StartPolicy
from readyq.dialects import (
    ClaimReceipt,
    Dialect,
    Listener,
    Notifies,
    connect,
    dialect_class,
    dialect_from_connection,
)
from readyq.errors import SchemaNotFound
from readyq.listing import JobFilter
from readyq.model import (
    ClaimedJob,
    GroupStats,
    JobInfo,
    Pause,
    ProgressStats,
    ResourceStats,
    ScheduleInfo,
    job_log_fields,
)
from readyq.planning.schedules import Timing
from readyq.reports import (
    AttemptRecord,
    BulkResult,
    Graph,
    JobDetail,
    JobPage,
    Overview,
    PruneResult,
    RetryResult,
    RunningProgress,
    Status,
    StuckJob,
    WorkerReport,
)
from readyq.resources import ResourceView
from readyq.resources import decode as decode_uses
from readyq.schema import GATE_ID, Tables, build_tables
from readyq.store import claim as claim_unit
from readyq.store import (
    control,
    enqueue,
    history,
    inspection,
    memory,
    outcomes,
    pauses,
    resource_claim,
    schedules,
    sweeps,
)
from readyq.store.context import Clock, Hooks, StoreContext
from readyq.store.records import (
    Applied,
    BatchJob,
    Lease,
    LeaseStatus,
    NewJob,
    Outcome,
    OutcomeKind,
    ReclaimedJob,
    ReclaimResult,
    Recorded,
)
from readyq.store.transactions import DEFAULT_TX_RETRIES, Transactions, pause_for
from readyq.untrusted import one_line

__all__ = [
    "Applied",
    "BatchJob",
    "Lease",
    "LeaseStatus",
    "NewJob",
    "Outcome",
    "OutcomeKind",
    "ReclaimResult",
    "ReclaimedJob",
    "Recorded",
    "ResourceView",
    "Store",
    "StoreContext",
]

log = logging.getLogger("readyq.store")

T = TypeVar("T")

class _DryRun(Exception):
    """Ends a dry run's unit so that its transaction is rolled back; carries what the
    unit counted (the number of jobs claimed, a bulk action's tally)."""


class Store:
    """Transactions over the readyq tables of one prefix.

    Args:
        engine: the engine to run on; the ``sync_engine`` of an AsyncEngine when the store
            runs in a greenlet for the asyncio API (see :mod:`readyq.store.transactions`).
        prefix: the table prefix.
        owned: whether readyq created the engine (the dialect may adapt an engine it
            owns in place, and one it does not on a copy).
        listen: ``False`` to send no wake-up notifications.
    """

    def __init__(
        self,
        engine: Engine,
        prefix: str,
        *,
        owned: bool,
        listen: bool | None = None,
        tx_retries: int = DEFAULT_TX_RETRIES,
    ) -> None:
        self.tables: Tables = build_tables(
            prefix, dialect_class(engine.dialect.name).table_traits
        )
        self.url = engine.url
        # A database file this store's first connection will create: removed again if
        # the store finds no tables in it (see ``_forget_created_file``).
        path = dialect_class(engine.dialect.name).database_file(engine.url)
        self._new_file = path if path is not None and not os.path.exists(path) else None
        self.clock = Clock()
        self.hooks = Hooks()
        self._given_engine = engine
        self._owned = owned
        self._listen = listen
        self._engine: Engine | None = None
        self._context: StoreContext | None = None
        self._init_lock = threading.Lock()
        # The resource capacities this store's claims last recorded.
        self._capacities = resource_claim.CapacityLog()
        # How to wait without holding anything up: ``time.sleep``, or on the event loop
        # when the store runs in a greenlet for the asyncio API.
        self.pause = pause_for(engine)
        self.transactions = Transactions(
            self._resolve, translate=self._translate, pause=self.pause, tx_retries=tx_retries
        )

    # -- plumbing -----------------------------------------------------------------------

    def _resolve(self) -> tuple[Engine, Dialect]:
        context = self.context
        assert self._engine is not None
        return self._engine, context.dialect

    @property
    def context(self) -> StoreContext:
        """The units' context; connects to the database the first time."""
        if self._context is None:
            with self._init_lock:
                if self._context is None:
                    with connect(self._given_engine) as conn:
                        dialect = dialect_from_connection(conn)
                        conn.rollback()
                        # This connection goes back to the pool: set it up as the
                        # prepared engine sets up its new ones.
                        dialect.prepare_connection(conn.connection.dbapi_connection)
                    # Once the connection is back in the pool, so that a dialect that
                    # starts a new pool closes it there instead of leaving it to the
                    # garbage collector with the old one.
                    self._engine = dialect.prepare_engine(
                        self._given_engine, owned=self._owned
                    )
                    notifier = None
                    if self._listen is not False and isinstance(dialect, Notifies):
                        notifier = dialect.ready_notifier(self.tables.prefix)
                    self._context = StoreContext(
                        tables=self.tables,
                        dialect=dialect,
                        now=self.clock.expression(dialect),
                        notifier=notifier,
                        hooks=self.hooks,
                    )
        return self._context

    @property
    def dialect(self) -> Dialect:
        return self.context.dialect

    @property
    def engine(self) -> Engine:
        """The engine readyq runs on (connects the first time)."""
        return self._resolve()[0]

    @property
    def connected_dialect(self) -> Dialect | None:
        """The dialect once the store has reached the database; None before (no
        connection attempt is made here)."""
        return None if self._context is None else self._context.dialect

    @property
    def clock_offset(self) -> float:
        """Seconds added to the database clock (see :class:`Clock`)."""
        return self.clock.offset

    @clock_offset.setter
    def clock_offset(self, seconds: float) -> None:
        self.clock.offset = seconds

    @property
    def on_claim_transaction(self) -> Callable[[Connection], None] | None:
        """Test hook: called with the connection inside each claim transaction."""
        return self.hooks.on_claim_transaction

    @on_claim_transaction.setter
    def on_claim_transaction(self, hook: Callable[[Connection], None] | None) -> None:
        self.hooks.on_claim_transaction = hook

    def now(self) -> sa.ColumnElement[float]:
        """The database clock plus ``clock_offset``, read when each statement runs."""
        return self.context.now

    def dispose(self) -> None:
        """Close the pooled connections of the engine the store was given."""
        self._given_engine.dispose()

    def _translate(self, exc: BaseException) -> None:
        context = self._context
        if context is not None and context.dialect.is_missing_table(exc):
            self._forget_created_file()
            raise SchemaNotFound(
                f"readyq tables with prefix {self.tables.prefix!r} are missing: "
                "call Queue.create_schema() first"
            ) from exc

    def _forget_created_file(self) -> None:
        """Remove the database file this store's connection created, if it holds no
        table at all: a typo in a path must not leave an empty database behind."""
        path, self._new_file = self._new_file, None
        if path is None or not os.path.exists(path):
            return
        engine = self._engine or self._given_engine
        with engine.connect() as conn:
            empty = not sa.inspect(conn).get_table_names()
        if empty:
            engine.dispose()
            for name in (path, f"{path}-wal", f"{path}-shm", f"{path}-journal"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(name)

    def write(
        self,
        unit: Callable[[Connection], T],
        *,
        connection: Connection | None = None,
        idempotent: bool = True,
        what: str = "write",
        after_commit: Callable[[T], T] | None = None,
        lost_commit: Callable[[T], None] | None = None,
        retries: int | None = None,
        single: bool = False,
    ) -> T:
        """Run ``unit`` in one write transaction: see :meth:`Transactions.write`."""
        return self.transactions.write(
            unit, connection=connection, idempotent=idempotent, what=what,
            after_commit=after_commit, lost_commit=lost_commit, retries=retries,
            single=single,
        )

    def read(self, unit: Callable[[Connection], T], *, single: bool = False) -> T:
        """Run a read-only unit: see :meth:`Transactions.read`."""
        return self.transactions.read(unit, single=single)

    # -- schema -------------------------------------------------------------------------

    def create_schema(self) -> None:
        """Create the tables and the gate row if missing (idempotent)."""
        t = self.tables
        t.metadata.create_all(self.engine, checkfirst=True)

        def gate(conn: Connection) -> None:
            row = conn.execute(sa.select(t.gate.c.id).where(t.gate.c.id == GATE_ID)).first()
            if row is None:
                conn.execute(sa.insert(t.gate).values(id=GATE_ID, vclock=0.0, seq=0))

        self.write(gate, what="create_schema")

    def drop_schema(self) -> None:
        self.tables.metadata.drop_all(self.engine, checkfirst=True)

    def check_schema(self) -> None:
        """Raise SchemaNotFound unless the tables exist (reads at most one row)."""
        self.read(lambda conn: inspection.check_schema(self.context, conn))

    # -- enqueue ------------------------------------------------------------------------

    def enqueue(self, job: NewJob, *, connection: Connection | None = None) -> int:
        if job.unique_key is not None:
            return self.enqueue_unique(job, connection=connection)[0]
        return self.write(
            lambda conn: enqueue.insert_job(self.context, conn, job),
            connection=connection, idempotent=False, what="enqueue",
            single=enqueue.inserts_in_one_statement(job),
        )

    def enqueue_unique(
        self, job: NewJob, *, connection: Connection | None = None
    ) -> tuple[int, bool]:
        """Insert a job with a unique key unless a job that has not ended holds the key.

        Returns (id, created); see :mod:`readyq.store.enqueue`.
        """
        return self.write(
            lambda conn: enqueue.insert_unique_job(self.context, conn, job),
            connection=connection, idempotent=False, what="enqueue",
        )

    def enqueue_many(
        self, batch: Sequence[BatchJob], *, connection: Connection | None = None
    ) -> list[int]:
        """Insert a batch in one transaction; returns the ids by batch position."""
        if not batch:
            return []
        if any(b.job.unique_key is not None for b in batch):
            created = self.write(
                lambda conn: enqueue.insert_unique_batch(self.context, conn, batch),
                connection=connection, idempotent=False, what="enqueue_many",
            )
            return [job_id for job_id, _ in created]
        return self.write(
            lambda conn: enqueue.insert_batch(self.context, conn, batch),
            connection=connection, idempotent=False, what="enqueue_many",
        )

    # -- the worker's cycle -------------------------------------------------------------

    def claim_jobs(self, order: ClaimOrder) -> list[ClaimedJob]:
        """Lease runnable jobs under the global cap, shared between groups fairly, in one
        transaction (see :mod:`readyq.store.claim`; with ``order.resources``,
        :mod:`readyq.store.resource_claim`). With ``order.start`` the claim also starts
        them, as :meth:`finish_and_claim` does."""
        if order.empty:
            return []
        claimed = self.write(lambda conn: self._claim(conn, order).read(), what="claim")
        self._capacities.committed()
        return claimed

    def _claim(self, conn: Connection, order: ClaimOrder) -> ClaimReceipt:
        if order.resources is None:
            return claim_unit.claim_jobs(self.context, conn, order)
        return resource_claim.claim_weighed(self.context, conn, order, self._capacities)

    def finish_and_claim(
        self, done: Sequence[Outcome], order: ClaimOrder, *, notified: bool = False
    ) -> tuple[Applied, list[ClaimedJob]]:
        """Record outcomes, claim new jobs and start them: one transaction, one commit.

        ``notified``: a database notification of new work woke the worker since its
        last claim.

        The outcomes are ``order.owner``'s; the slots they free count as free for the
        claim. With ``order.start``, the claim's own UPDATE also starts the jobs:
        ``running`` with ``started_at`` and a deadline (the job's own timeout, else its
        type's). A worker does this when it hands every claimed job to a handler at
        once, so that ``leased`` never needs a commit of its own.
        """
        owner = order.owner
        # Jobs leased by a try whose COMMIT reply was lost: that claim may have landed,
        # unknown to the worker, so the next try hands them back first.
        unknown: list[ClaimedJob] = []

        def lost(out: tuple[Applied, ClaimReceipt]) -> None:
            try:
                unknown.extend(out[1].read())
            except Exception:  # the rows cannot be read: their leases expire instead
                log.debug("finish_and_claim: the claimed rows of a lost commit cannot be "
                          "read", exc_info=True)

        def unit(conn: Connection) -> tuple[Applied, ClaimReceipt]:
            ctx = self.context
            if unknown:
                outcomes.hand_back(ctx, conn, owner, unknown)
            applied = outcomes.record_outcomes(ctx, conn, owner, done) if done else {}
            receipt = claim_unit.NOTHING if order.empty else self._claim(conn, order)
            return applied, receipt

        if not done and order.empty:
            return {}, []
        if (
            not done
            and not (notified and claim_unit.counts_before_gate(self.context, order))
            and not self.runnable_exists(order.types, costed=order.resources is not None)
        ):
            # An idle tick (a poll, or a notification that woke every listening worker)
            # reads the ready index without a lock: only a worker that sees a runnable
            # job opens a claim transaction and waits for the gate. After a notification
            # a claim that reads its counts before the gate is that read itself, one
            # round trip sooner.
            return {}, []
        # The claimed rows are read once committed: the gate row is released sooner.
        applied, receipt = self.write(unit, what="cycle", lost_commit=lost)
        self._capacities.committed()
        return applied, receipt.read()

    def dry_run_cycle(self, order: ClaimOrder) -> int:
        """Run a worker's transaction once and roll it back; return how many jobs its
        claim took.

        The claim of up to ``order.limit`` jobs, as :meth:`finish_and_claim` makes it, then
        their finish as done, in one transaction that is rolled back: nothing is kept
        (the NOTIFY of a released dependent is dropped with it). What it leaves behind
        is the SQL of those statements, built and compiled, and an error now rather than
        at the first claim if the tables do not match this readyq.
        """

        def unit(conn: Connection) -> int:
            ctx = self.context
            claimed = [] if order.empty else self._claim(conn, order).read()
            if claimed:
                outcomes.record_outcomes(
                    ctx, conn, order.owner, [Outcome(c, OutcomeKind.DONE, "null") for c in claimed]
                )
            raise _DryRun(len(claimed))

        try:
            self.write(unit, what="dry run")
        except _DryRun as done:
            return int(done.args[0])
        raise AssertionError("a dry run's unit always raises")  # pragma: no cover

    def reservation(self, job_id: int) -> dict[str, int] | None:
        """The costs held for the job if it is reserved (it was next in fair-share order
        and did not fit), else None."""
        r = self.tables.reservations
        row = self.read(
            lambda conn: conn.execute(sa.select(r.c.uses).where(r.c.job_id == job_id)).first()
        )
        return None if row is None else dict(decode_uses(row.uses))

    def known_resources(self) -> dict[str, int]:
        """The resources workers' claims have recorded, with their capacities."""
        return self.read(lambda conn: inspection.known_resources(self.context, conn))

    def resource_stats(
        self,
        defined: Sequence[str] = (),
        handler_uses: Mapping[str, Mapping[str, int]] | None = None,
    ) -> dict[str, ResourceStats]:
        """Per resource: capacity, units in flight, what waits for it (see
        :func:`readyq.store.inspection.resource_stats`)."""
        return self.read(
            lambda conn: inspection.resource_stats(
                self.context, conn, defined, handler_uses or {}
            )
        )

    def ready_types(self, limit: int = 20) -> list[str]:
        """The distinct types of ready jobs, in order, at most ``limit`` (see
        :func:`readyq.store.inspection.ready_types`)."""
        return self.read(lambda conn: inspection.ready_types(self.context, conn, limit))

    def runnable_exists(self, types: Sequence[str] | None, *, costed: bool = False) -> bool:
        """Whether any job of ``types`` is runnable now: one lock-free read (``costed``:
        jobs that take resources count, for a worker that defines resources)."""
        ctx = self.context
        # The typed probe is one statement; the untyped one pins the index order for the
        # rest of its transaction first.
        return self.read(
            lambda conn: ctx.dialect.any_runnable(conn, ctx.tables, ctx.now, types, costed),
            single=types is not None,
        )

    def has_unfinished(self, types: Sequence[str] | None = None) -> bool:
        """True while any non-container job (of ``types``) is not terminal: a probe of
        each index that holds unfinished jobs, so finished jobs are never read."""
        ctx = self.context
        return self.read(
            lambda conn: ctx.dialect.any_unfinished(conn, ctx.tables, types), single=True
        )

    def start_jobs(
        self, owner: str, starts: Sequence[tuple[ClaimedJob, StartPolicy]]
    ) -> set[int]:
        """Move leased jobs to running, each with the deadline and timeout rule of its
        :class:`readyq.claim_order.StartPolicy`; returns the ids moved."""
        if not starts:
            return set()
        return self.write(
            lambda conn: outcomes.start_jobs(self.context, conn, owner, starts), what="start"
        )

    def heartbeat(
        self, owner: str, leases: Sequence[Lease], lease_ttl: float, *, retries: int | None = None
    ) -> dict[int, LeaseStatus]:
        """Extend the leases still held, in one statement; report lost and cancelled jobs
        (``retries``: see :meth:`Transactions.write`)."""
        if not leases:
            return {}
        return self.write(
            lambda conn: outcomes.heartbeat(self.context, conn, owner, leases, lease_ttl),
            what="heartbeat", retries=retries,
        )

    def record_outcomes(self, owner: str, done: Sequence[Outcome]) -> Applied:
        """Record how attempts ended, each fenced by its lease, in one transaction; see
        :func:`readyq.store.outcomes.record_outcomes`."""
        if not done:
            return {}
        return self.write(
            lambda conn: outcomes.record_outcomes(self.context, conn, owner, done),
            what="finish",
        )

    def reclaim_due(self) -> bool:
        """Whether any lease has expired or any attempt is past its deadline: one
        lock-free read of the in-flight range of the state index."""
        ctx = self.context
        due = ctx.dialect.cached(
            ("reclaim_due", ctx.tables.jobs.name), lambda: sweeps.reclaim_due_statement(ctx)
        )
        return (
            self.read(lambda conn: ctx.dialect.execute(conn, due).first(), single=True)
            is not None
        )

    def reclaim_expired(self, *, limit: int = 500) -> ReclaimResult:
        """Return expired leases to ready (or failed), and end attempts past their
        deadline (see :mod:`readyq.store.sweeps`)."""
        # A plain read first: most ticks find nothing, and then take no write lock.
        if not self.reclaim_due():
            return ReclaimResult()
        result = self.write(
            lambda conn: sweeps.reclaim_expired(self.context, conn, limit), what="reclaim"
        )
        # Logged once committed: a unit that is retried must not log twice. A timeout is
        # an ordinary end, told as the worker that ran it would tell it (it stays quiet
        # when it learns that a sweep recorded it); an expired lease means a worker was
        # lost.
        for r in result.jobs:
            extra = {**job_log_fields(r.id, r.type, r.attempt, r.group),
                     "event": "job_reclaimed", "reason": r.reason, "state": r.outcome}
            if r.reason == "timeout":
                then = {"retried": f"retry in {r.retry_in:.1f}s",
                        "failed": "the job failed"}.get(r.outcome, r.outcome)
                log.log(logging.INFO if r.outcome == "retried" else logging.WARNING,
                        "job %d (%s) attempt %d %s; %s", r.id, one_line(r.type), r.attempt,
                        r.what, then, extra=extra)
            else:
                log.warning("job %d (%s) attempt %d reclaimed (%s): %s", r.id,
                            one_line(r.type), r.attempt, r.what, r.outcome, extra=extra)
        return result

    # -- control ------------------------------------------------------------------------

    def pause_jobs(
        self,
        group: str | None,
        type_: str | None,
        until_at: float | None = None,
        until_delay: float | None = None,
    ) -> None:
        """Pause a group, a type or a type within a group; see ``Queue.pause``."""
        self.write(
            lambda conn: pauses.pause(self.context, conn, group, type_, until_at, until_delay),
            what="pause",
        )

    def resume_jobs(self, group: str | None, type_: str | None) -> bool:
        """End a pause; see ``Queue.resume``."""
        return self.write(
            lambda conn: pauses.resume(self.context, conn, group, type_), what="resume"
        )

    def pauses(self) -> list[Pause]:
        """The pauses in force now."""
        return self.read(lambda conn: pauses.pauses(self.context, conn))

    def fire_schedule(
        self,
        name: str,
        timing: Timing,
        build: Callable[[int], Sequence[BatchJob]],
        *,
        report_conflict: bool = True,
    ) -> schedules.Firing:
        """Fire schedule ``name`` if an occurrence is due (see
        :func:`readyq.store.schedules.fire`): one transaction, run again after a
        deadlock or a lost connection (a firing that committed moved the row on, so the
        run again finds nothing due)."""
        return self.write(
            lambda conn: schedules.fire(
                self.context, conn, name, timing, build, report_conflict=report_conflict
            ),
            what="fire schedule",
        )

    def pause_schedule(self, name: str, paused: bool, timing: Timing | None) -> bool | None:
        """Pause or resume a schedule; see :func:`readyq.store.schedules.set_paused`."""
        return self.write(
            lambda conn: schedules.set_paused(self.context, conn, name, paused, timing),
            what="pause schedule" if paused else "resume schedule",
        )

    def schedules(self) -> list[ScheduleInfo]:
        """Every stored schedule, by name."""
        return self.read(lambda conn: schedules.schedules(self.context, conn))

    def forget_schedule(self, name: str) -> bool:
        """Remove a schedule's row; see :func:`readyq.store.schedules.forget`."""
        return self.write(
            lambda conn: schedules.forget(self.context, conn, name), what="forget schedule"
        )

    def cancel(self, job_id: int, by: str = "api") -> control.Cancelled | None:
        """Cancel a job; see ``Queue.cancel``. None when it had already ended, else what
        the cancel did (see :class:`readyq.store.control.Cancelled`). ``by`` names who
        asked (one of ``control.CANCEL_SOURCES``)."""
        return self.write(
            lambda conn: control.cancel(self.context, conn, job_id, by), what="cancel"
        )

    def close_container(self, job_id: int) -> None:
        """End an empty container done; see ``Queue.close_container``."""
        # Not run again after a COMMIT whose reply was lost: it would refuse the
        # container it had just closed.
        self.write(
            lambda conn: control.close_container(self.context, conn, job_id),
            idempotent=False,
            what="close container",
        )

    def retry(self, job_id: int, extra_attempts: int, *, fresh: bool = False) -> RetryResult:
        """Revive a failed job and what failed because of it; see ``admin.retry``."""
        return self.write(
            lambda conn: control.retry(self.context, conn, job_id, extra_attempts, fresh),
            idempotent=False,
            what="retry",
        )

    def prune(
        self,
        older_than: float,
        *,
        batch_size: int,
        progress: Callable[[int, int], None] | None = None,
    ) -> PruneResult:
        """Delete finished jobs older than ``older_than`` seconds, batch by batch; see
        ``admin.prune``."""
        cutoff, candidates = self.read(
            lambda conn: control.prune_candidates(self.context, conn, older_than)
        )
        deleted = edges = 0
        while True:
            below: int | None = None
            this_pass = 0
            while True:
                below, n, e = self.write(
                    lambda conn, b=below: control.prune_batch(  # type: ignore[misc]
                        self.context, conn, cutoff, b, batch_size
                    ),
                    what="prune",
                )
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

    def prune_preview(self, older_than: float) -> PruneResult:
        """What :meth:`prune` would delete now, deleting nothing (``dry_run`` set)."""

        def unit(conn: Connection) -> PruneResult:
            ctx = self.context
            cutoff = float(conn.execute(sa.select(ctx.now)).scalar_one()) - older_than
            candidates, jobs, edges = control.prune_preview(ctx, conn, cutoff)
            return PruneResult(
                cutoff=cutoff, candidates=candidates, deleted=jobs, edges=edges, dry_run=True
            )

        return self.read(unit)

    def bulk(
        self,
        action: str,
        flt: JobFilter,
        *,
        dry_run: bool,
        extra_attempts: int = 1,
        batch_size: int = 200,
        by: str = "api",
    ) -> BulkResult:
        """Retry or cancel every job matching ``flt`` (narrowed to the states the action
        applies to), ``batch_size`` jobs per transaction, oldest first. A dry run does
        the same in one transaction and rolls it back: its counts are what the action
        would change now, and nothing is kept."""
        ctx = self.context
        now = self.read(lambda conn: inspection.clock_for(ctx, conn, flt))
        inspection.check_time_range(flt, now)
        total = control.Tally()

        def batch(conn: Connection, after: int | None) -> tuple[int | None, control.Tally]:
            return control.bulk_batch(
                ctx, conn, action, flt, now, after, batch_size, extra_attempts, by
            )

        if dry_run:

            def unit(conn: Connection) -> None:
                tally = control.Tally()
                after: int | None = None
                while True:
                    after, part = batch(conn, after)
                    tally.add(part)
                    if after is None:
                        raise _DryRun(tally)

            try:
                self.write(unit, what=f"{action} dry run")
            except _DryRun as rolled_back:
                total = rolled_back.args[0]
        else:
            after: int | None = None
            while True:
                after, part = self.write(
                    lambda conn, a=after: batch(conn, a),  # type: ignore[misc]
                    idempotent=False,
                    what=action,
                )
                total.add(part)
                if after is None:
                    break
        return BulkResult(
            action=action,
            dry_run=dry_run,
            matched=total.matched,
            changed=len(total.changed),
            requested=total.requested,
            skipped=total.skipped,
            changed_ids=sorted(total.changed),
            reasons=total.reasons,
            filter=flt.to_json(),
        )

    # -- reads --------------------------------------------------------------------------

    def get(self, job_id: int) -> JobInfo:
        return self.read(lambda conn: inspection.job_info(self.context, conn, job_id))

    # -- what attempts keep (readyq.store.memory) -----------------------------------------

    def same_database(self, connection: Connection) -> bool:
        """Whether ``connection`` reaches this store's database (so that a write in it
        lands in readyq's tables): the same backend, host, port and database."""
        return self.dialect.same_database(self.engine.url, connection.engine.url)

    def save_state(
        self, holder: memory.Holder, state_json: str, *, connection: Connection | None = None
    ) -> None:
        """Save a job's state under its lease (``Job.save_state``); LeaseLost if gone."""
        self.write(lambda conn: memory.save_state(self.context, conn, holder, state_json),
                   connection=connection, what="save_state")

    def store_step(
        self, holder: memory.Holder, name: str, result_json: str, *,
        connection: Connection | None = None,
    ) -> None:
        """Store a step's result under the job's lease (``Job.step``); LeaseLost if gone."""
        self.write(
            lambda conn: memory.store_step(self.context, conn, holder, name, result_json),
            connection=connection, what="store_step",
        )

    def save_progress(self, holder: memory.Holder, progress: memory.Progress) -> None:
        """Record a job's progress under its lease (``Job.progress``); LeaseLost if gone."""
        self.write(lambda conn: memory.save_progress(self.context, conn, holder, progress),
                   what="progress")

    def memory_of(self, job_id: int) -> tuple[str | None, dict[str, str]]:
        """A job's saved state and stored steps (JSON texts), in one read."""
        def unit(conn: Connection) -> tuple[str | None, dict[str, str]]:
            return (memory.load_state(self.context, conn, job_id),
                    memory.load_steps(self.context, conn, job_id))
        return self.read(unit)

    def upstream(self, job_id: int, *, include_children: bool) -> list[memory.Upstream]:
        """The jobs ``job_id`` reads results from (``Job.upstream_results``)."""
        return self.read(lambda conn: memory.upstream(
            self.context, conn, job_id, include_children=include_children))

    def attempts(self, job_id: int) -> list[AttemptRecord]:
        """The job's attempts, oldest first; see ``Queue.attempts``."""
        return self.read(lambda conn: history.attempts_of(self.context, conn, job_id))

    def counts(self) -> dict[str, int]:
        """Number of jobs per state."""
        return self.read(lambda conn: inspection.state_counts(self.context, conn))

    def group_stats(self) -> dict[str, GroupStats]:
        """Per group: claimable jobs, the longest wait among them, and jobs in flight."""
        return self.read(lambda conn: inspection.group_stats(self.context, conn))

    def progress_stats(self) -> dict[str, ProgressStats]:
        """Per job type, how far its jobs in flight have got (``Job.progress``)."""
        return self.read(lambda conn: inspection.progress_stats(self.context, conn))

    def in_flight_progress(self, limit: int) -> list[RunningProgress]:
        """The first ``limit`` jobs in flight (by id) that reported progress."""
        return self.read(lambda conn: inspection.in_flight_progress(self.context, conn, limit))

    def status(self, *, unclaimed_after: float = 60.0, empty_after: float = 60.0) -> Status:
        """A snapshot of the queue, read in one pass with the database's clock."""
        return self.read(
            lambda conn: inspection.status(self.context, conn, unclaimed_after, empty_after)
        )

    def stuck(self, *, empty_after: float, limit: int) -> list[StuckJob]:
        """What cannot progress on its own: see :func:`readyq.store.inspection.stuck`."""
        return self.read(
            lambda conn: inspection.stuck(self.context, conn, empty_after=empty_after, limit=limit)
        )

    def job_detail(self, job_id: int) -> JobDetail:
        """Everything about one job: see :func:`readyq.store.inspection.job_detail`."""
        return self.read(lambda conn: inspection.job_detail(self.context, conn, job_id))

    def jobs(self, flt: JobFilter, *, order: str, limit: int, cursor: str | None) -> JobPage:
        """One page of a job listing: see :func:`readyq.store.inspection.list_jobs`."""
        return self.read(
            lambda conn: inspection.list_jobs(self.context, conn, flt, order, limit, cursor)
        )

    def overview(self, *, window: float, buckets: int) -> Overview:
        """The dashboard's overview: see :func:`readyq.store.inspection.overview`."""
        return self.read(
            lambda conn: inspection.overview(
                self.context, conn, window, buckets, inspection.RECENT_ROWS
            )
        )

    def workers(self) -> list[WorkerReport]:
        """The workers seen by their leases and latest finishes: see
        :func:`readyq.store.inspection.worker_reports`."""
        return self.read(
            lambda conn: inspection.worker_reports(self.context, conn, inspection.RECENT_ROWS)
        )

    def graph_size(self, job_id: int, *, limit: int) -> int:
        """How many jobs the graph around ``job_id`` holds, counted up to ``limit``."""
        return self.read(lambda conn: inspection.graph_size(self.context, conn, job_id, limit))

    def graph(self, job_id: int, *, max_nodes: int) -> Graph:
        """The dependency graph around one job: see :func:`readyq.store.inspection.graph`."""
        return self.read(lambda conn: inspection.graph(self.context, conn, job_id, max_nodes))

    # -- wake-ups -----------------------------------------------------------------------

    def start_listener(self, on_wake: Callable[[], None]) -> Listener:
        """Listen for this store's wake-ups (the dialect must implement ``Notifies``)."""
        dialect = self.dialect
        assert isinstance(dialect, Notifies)
        channel = self.read(lambda conn: dialect.listen_channel(conn, self.tables.prefix))
        return dialect.start_listener(self.url, channel, on_wake)

