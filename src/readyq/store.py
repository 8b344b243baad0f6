"""The Store: the only place that opens transactions, calls the dialect and retries.

Each public method is one unit of work run in one transaction. Units that may safely run
again (claims, heartbeats, fenced finalizations, reclaims) are retried after deadlocks,
serialization failures, SQLITE_BUSY and lost connections, with bounded backoff. Every
write about a claimed job is fenced by ``lease_owner`` plus ``lease_token``: a write whose
fence no longer matches changes nothing and is reported back as lost.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from functools import partial
from operator import attrgetter
from typing import Any, NamedTuple, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from readyq import unique
from readyq.dialects import ClaimRequest, Dialect, dialect_for
from readyq.errors import (
    DependencyCycle,
    DependencyNotFound,
    InvalidParent,
    JobNotFound,
    SchemaNotFound,
)
from readyq.model import (
    BAD_ENDS,
    IN_FLIGHT_STATES,
    UNFINISHED_STATES,
    ClaimedJob,
    GroupStats,
    JobInfo,
    JobState,
    from_epoch,
    job_log_fields,
)
from readyq.payload import decode
from readyq.planning.backoff import retry_delay
from readyq.planning.fair_share import (
    GroupDemand,
    Progress,
    account,
    plan_claims,
    planned_progress,
)
from readyq.rates import RateLimit, open_budget
from readyq.schema import (
    BULK_COLUMNS,
    BULK_CONSTANTS,
    GATE_ID,
    ROW_KEYS,
    Tables,
    build_tables,
)
from readyq.sql.ready import runnable, runnable_head, state_in, values_in, waiting_of_types
from readyq.transient import is_raw_driver_error

log = logging.getLogger("readyq.store")

# Outcomes in job id order (each transaction updates rows in one order: no deadlocks).
_BY_JOB_ID = attrgetter("job.id")

T = TypeVar("T")

MAX_ERROR_CHARS = 8000
DEFAULT_TX_RETRIES = 12
_STATE_VALUES = {state: state.value for state in JobState}
_NONE: frozenset[int] = frozenset()


class NewJob(NamedTuple):
    """A validated job, ready to insert."""

    type: str
    args_json: str
    group: str = "default"
    weight: int = 1
    priority: int = 0
    max_attempts: int = 3
    timeout: float | None = None
    run_after_at: float | None = None
    run_after_delay: float | None = None
    depends_on: tuple[int, ...] = ()
    parent: int | None = None
    is_container: bool = False
    unique_key: str | None = None


class BatchJob(NamedTuple):
    """A job of a batch: ``job`` plus references to other jobs of the same batch.

    ``deps_in_batch`` and ``parent_in_batch`` are positions in the batch; the batch is
    ordered so that they always point to earlier positions.
    """

    job: NewJob
    deps_in_batch: tuple[int, ...] = ()
    parent_in_batch: int | None = None


class Outcome(NamedTuple):
    """How one attempt ended, as the worker reports it.

    ``kind`` is ``done`` (with ``result_json``), ``retry`` (back to ready after
    ``delay`` seconds), ``fail`` (terminal failure), ``cancel`` (terminal, the job was
    cancelled while it ran) or ``release`` (handed back unrun by a stopping worker, the
    attempt not charged).
    """

    job: ClaimedJob
    kind: str
    result_json: str | None = None
    error: str | None = None
    delay: float = 0.0
    # Seconds the handler ran, and the class name of what it raised: for logs and metrics.
    duration: float = 0.0
    error_type: str | None = None


@dataclass(frozen=True)
class ReclaimedJob:
    """One attempt ended by a sweep: ``outcome`` is retried, failed or cancelled and
    ``reason`` is ``timeout`` or ``lease_expired``."""

    id: int
    type: str
    attempt: int
    group: str
    outcome: str
    reason: str


@dataclass(frozen=True)
class ReclaimResult:
    """What one sweep of expired leases and passed deadlines did."""

    retried: int = 0
    failed: int = 0
    timed_out: int = 0
    cancelled: int = 0
    jobs: tuple[ReclaimedJob, ...] = ()

    @property
    def total(self) -> int:
        return self.retried + self.failed + self.cancelled


@dataclass
class Lease:
    """The fence of one claimed job."""

    id: int
    token: int


@dataclass(frozen=True)
class LeaseStatus:
    """What a heartbeat learned about one job."""

    lost: bool
    cancel_requested: bool


def retry_pause(
    dialect: Dialect,
    exc: BaseException,
    attempt: int,
    tx_retries: int,
    *,
    committing: bool = False,
    idempotent: bool = True,
    connected: bool = True,
) -> float | None:
    """Seconds to wait before running a failed unit again, or None to raise.

    Shared by the sync and asyncio stores, so both retry the same errors the same way.
    A driver or OS error that SQLAlchemy did not wrap (see :mod:`readyq.transient`) counts
    as a lost connection once the unit had a connection (``connected``); failing to
    connect at all is raised at once, for the caller to wait out (a worker backs off).
    """
    retryable = connected if is_raw_driver_error(exc) else dialect.is_retryable(exc)
    if not retryable or attempt > tx_retries or (committing and not idempotent):
        return None
    return float(min(2.0, 0.005 * (2 ** min(attempt, 9))) * (0.5 + random.random()))


def _database_error(exc: BaseException) -> bool:
    """An error from the database or its driver, wrapped by SQLAlchemy or not."""
    return isinstance(exc, sa.exc.DBAPIError) or is_raw_driver_error(exc)


def _discard_if_broken(conn: Connection, exc: Exception) -> None:
    """After an error SQLAlchemy did not wrap, the connection's state is unknown:
    invalidate it so that the pool never hands it out again."""
    if is_raw_driver_error(exc):
        with contextlib.suppress(Exception):
            conn.invalidate(exc)


def _inserted_id(result: Any) -> int:
    """The id of the row an INSERT of one row made."""
    return int(result.inserted_primary_key[0])


def _truncate(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_ERROR_CHARS:
        return text
    return text[: MAX_ERROR_CHARS - 20] + "\n... (truncated)"


class _Rehearsed(Exception):
    """Ends a rehearsal's unit so that its transaction is rolled back (see
    ``Store.rehearse``); carries the number of jobs claimed."""


def _no_jobs() -> list[ClaimedJob]:
    return []


def _jobs(jobs: list[ClaimedJob]) -> Callable[[], list[ClaimedJob]]:
    return lambda: jobs


def progress_rows(progress: Progress) -> list[tuple[str, float, int]]:
    """(group, vfinish, served_seq) for each group a claim served."""
    return [(key, v, progress.served_seq[key]) for key, v in progress.vfinish.items()]


class Store:
    """Transactions over the readyq tables of one prefix."""

    def __init__(
        self,
        engine: Engine,
        prefix: str,
        *,
        owned: bool,
        tx_retries: int = DEFAULT_TX_RETRIES,
    ) -> None:
        self.tables: Tables = build_tables(prefix, engine.dialect.name)
        self._raw_engine = engine
        self._owned = owned
        self._engine: Engine | None = None
        self._dialect: Dialect | None = None
        self._init_lock = threading.Lock()
        self.tx_retries = tx_retries
        # Seconds added to the database clock. Tests move time forward with it instead of
        # sleeping; it shifts every comparison the same way, as a faster clock would.
        self.clock_offset = 0.0
        self._now: sa.ColumnElement[float] | None = None
        # Test hook: called with the connection inside each claim transaction.
        self.on_claim_transaction: Callable[[Connection], None] | None = None
        # Called inside a transaction that made jobs ready (enqueue, or a completion that
        # releases dependents); readyq.wakeup sends a NOTIFY from it on PostgreSQL.
        self.on_ready: Callable[[Connection], None] | None = None
        # The same signal as an expression a single enqueue's INSERT can return (None
        # from the callable when it is not wanted).
        self.ready_notice: Callable[[], sa.ColumnElement[Any] | None] | None = None

    # -- plumbing -----------------------------------------------------------------------

    def _ensure(self) -> tuple[Engine, Dialect]:
        if self._dialect is None or self._engine is None:
            with self._init_lock:
                if self._dialect is None:
                    dialect = dialect_for(self._raw_engine)
                    self._engine = dialect.prepare_engine(self._raw_engine, owned=self._owned)
                    self._dialect = dialect
        assert self._engine is not None and self._dialect is not None
        return self._engine, self._dialect

    @property
    def dialect(self) -> Dialect:
        return self._ensure()[1]

    @property
    def engine(self) -> Engine:
        return self._ensure()[0]

    @property
    def connected_dialect(self) -> Dialect | None:
        """The dialect once the store has reached the database; None before (no
        connection attempt is made here)."""
        return self._dialect

    def now(self) -> sa.ColumnElement[float]:
        """The database clock plus ``clock_offset``, read when each statement runs.

        The offset is a bound parameter whose value is taken at execution, so statements
        built once (see ``Dialect.cached``) follow a test's clock moves.
        """
        if self._now is None:
            offset = sa.bindparam(
                "rq_clock_offset", type_=sa.Double, callable_=lambda: self.clock_offset
            )
            self._now = self.dialect.now() + offset
        return self._now

    def _translate(self, exc: BaseException) -> None:
        if self.dialect.is_missing_table(exc):
            raise SchemaNotFound(
                f"readyq tables with prefix {self.tables.jobs.name[:-4]!r} are missing: "
                "call Queue.create_schema() first"
            ) from exc

    def write(
        self,
        unit: Callable[[Connection], T],
        *,
        connection: Connection | None = None,
        idempotent: bool = True,
        what: str = "write",
        after_commit: Callable[[T], T] | None = None,
        lost_commit: Callable[[T], None] | None = None,
    ) -> T:
        """Run ``unit`` in one write transaction, committed here, retried when safe.

        With ``connection`` the unit runs inside the caller's transaction: nothing is
        begun, committed or retried here. When ``idempotent`` is False a failure during
        COMMIT is raised rather than retried, since the first commit may have landed.
        ``after_commit`` maps the unit's result once committed, the connection still
        open (to read a result the unit left in the driver). ``lost_commit`` is given
        the unit's result when its COMMIT failed, before the unit runs again: that
        commit may have landed.
        """
        engine, dialect = self._ensure()
        if connection is not None:
            try:
                out = unit(connection)
                return out if after_commit is None else after_commit(out)
            except sa.exc.DBAPIError as exc:
                self._translate(exc)
                raise
        attempt = 0
        while True:
            committing = False
            connected = False
            try:
                with engine.connect() as conn:
                    connected = True
                    try:
                        dialect.begin_write(conn)
                        out = unit(conn)
                        committing = True
                        conn.commit()
                        committing = False
                        return out if after_commit is None else after_commit(out)
                    except Exception as exc:
                        _discard_if_broken(conn, exc)
                        raise
            except Exception as exc:
                if not _database_error(exc):
                    raise
                self._translate(exc)
                attempt += 1
                delay = retry_pause(
                    dialect, exc, attempt, self.tx_retries,
                    committing=committing, idempotent=idempotent, connected=connected,
                )
                if delay is None:
                    raise
                if committing and lost_commit is not None:
                    lost_commit(out)
                log.debug("%s: retrying after %s (attempt %d)", what, exc.__class__.__name__,
                          attempt)
                time.sleep(delay)

    def read(self, unit: Callable[[Connection], T], *, single: bool = False) -> T:
        """Run a read-only unit (retried like writes).

        ``single`` says the unit runs one statement, which needs no transaction around
        it: where the dialect allows (``Dialect.autocommit_reads``), it then runs in
        autocommit, without the BEGIN and COMMIT round trips. An idle worker asks two
        such questions at every tick (is a job runnable, is a lease due for reclaim).
        """
        engine, dialect = self._ensure()
        autocommit = single and dialect.autocommit_reads
        attempt = 0
        while True:
            connected = False
            try:
                with engine.connect() as conn:
                    connected = True
                    try:
                        if autocommit:
                            conn.execution_options(isolation_level="AUTOCOMMIT")
                            return unit(conn)
                        out = unit(conn)
                        # COMMIT, not ROLLBACK: ending a read-only transaction costs the
                        # same, and psycopg drops its prepared statements on a ROLLBACK.
                        conn.commit()
                        return out
                    except Exception as exc:
                        _discard_if_broken(conn, exc)
                        raise
            except Exception as exc:
                if not _database_error(exc):
                    raise
                self._translate(exc)
                attempt += 1
                delay = retry_pause(dialect, exc, attempt, self.tx_retries, connected=connected)
                if delay is None:
                    raise
                time.sleep(delay)

    # -- schema -------------------------------------------------------------------------

    def create_schema(self) -> None:
        """Create the tables and the gate row if missing (idempotent)."""
        engine, dialect = self._ensure()
        t = self.tables
        if dialect.name == "sqlite":
            with engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA journal_mode=WAL")
                conn.commit()
        t.metadata.create_all(engine, checkfirst=True)

        def gate(conn: Connection) -> None:
            row = conn.execute(sa.select(t.gate.c.id).where(t.gate.c.id == GATE_ID)).first()
            if row is None:
                conn.execute(sa.insert(t.gate).values(id=GATE_ID, vclock=0.0, seq=0))

        self.write(gate, what="create_schema")

    def drop_schema(self) -> None:
        self.tables.metadata.drop_all(self.engine, checkfirst=True)

    # -- enqueue ------------------------------------------------------------------------

    def enqueue(self, job: NewJob, *, connection: Connection | None = None) -> int:
        if job.unique_key is not None:
            return self.enqueue_unique(job, connection=connection)[0]
        return self.write(
            lambda conn: self._insert_job(conn, job),
            connection=connection,
            idempotent=False,
            what="enqueue",
        )

    def enqueue_unique(
        self, job: NewJob, *, connection: Connection | None = None
    ) -> tuple[int, bool]:
        """Insert a job with a unique key unless a job that has not ended holds the key.

        Returns (id, created); see :mod:`readyq.unique`.
        """
        return self.write(
            lambda conn: unique.enqueue_one(self, conn, job),
            connection=connection,
            idempotent=False,
            what="enqueue",
        )

    def enqueue_many(
        self, batch: Sequence[BatchJob], *, connection: Connection | None = None
    ) -> list[int]:
        """Insert a batch in one transaction; returns the ids by batch position."""
        if not batch:
            return []
        if any(b.job.unique_key is not None for b in batch):
            return [
                job_id
                for job_id, _ in self.write(
                    lambda conn: unique.enqueue_batch(self, conn, batch),
                    connection=connection,
                    idempotent=False,
                    what="enqueue_many",
                )
            ]
        return self.write(
            lambda conn: self._insert_batch(conn, batch),
            connection=connection,
            idempotent=False,
            what="enqueue_many",
        )

    def _insert_batch(self, conn: Connection, batch: Sequence[BatchJob]) -> list[int]:
        t = self.tables
        j = t.jobs
        d = self.dialect
        now = self.now()
        size = len(batch)
        # Existing jobs the batch refers to: lock containers first, then dependencies,
        # each in id order, as single enqueues do.
        outer_parents = sorted({b.job.parent for b in batch if b.job.parent is not None})
        # outside container -> (its chain of containers, the dependencies they pass down)
        inherited: dict[int, tuple[set[int], set[int]]] = {}
        if outer_parents:
            rows = conn.execute(
                d.lock_rows(
                    sa.select(j.c.id, j.c.is_container, j.c.state)
                    .where(j.c.id.in_(outer_parents))
                    .order_by(j.c.id)
                )
            ).all()
            found = {int(r.id): r for r in rows}
            for pid in outer_parents:
                r = found.get(pid)
                if r is None:
                    raise InvalidParent(f"parent job {pid} does not exist")
                if not r.is_container:
                    raise InvalidParent(f"job {pid} is not a container")
                if r.state != JobState.ACTIVE.value:
                    raise InvalidParent(f"container {pid} has already finished ({r.state})")
                ancestors = self._ancestors(conn, pid)
                passed = {
                    int(x)
                    for x in conn.execute(
                        sa.select(t.deps.c.depends_on_id).where(t.deps.c.job_id.in_(ancestors))
                    ).scalars()
                }
                inherited[pid] = (set(ancestors), passed)
        # Effective outside dependencies per position (a container's apply to its children).
        outer: list[AbstractSet[int]] = []
        outer_chain: list[AbstractSet[int]] = []
        for b in batch:
            job = b.job
            if job.parent is None and b.parent_in_batch is None:
                # No container: nothing inherited, no container to depend on.
                outer.append(set(job.depends_on) if job.depends_on else _NONE)
                outer_chain.append(_NONE)
                continue
            deps = set(job.depends_on)
            chain: AbstractSet[int] = _NONE
            if job.parent is not None:
                chain, passed = inherited[job.parent]
                deps |= passed
            elif b.parent_in_batch is not None:
                chain = outer_chain[b.parent_in_batch]
                deps |= outer[b.parent_in_batch]
            looped = set(job.depends_on) & chain
            if looped:
                raise DependencyCycle(
                    f"a job cannot depend on its own container {min(looped)}: "
                    "the container only finishes after the job"
                )
            outer.append(deps)
            outer_chain.append(chain)
        wanted = sorted(set().union(*(x for x in outer if x)))
        states: dict[int, str] = {}
        if wanted:
            rows = conn.execute(
                d.lock_rows(
                    sa.select(j.c.id, j.c.state).where(j.c.id.in_(wanted)).order_by(j.c.id)
                )
            ).all()
            states = {int(r.id): r.state for r in rows}
            missing = sorted(set(wanted) - states.keys())
            if missing:
                raise DependencyNotFound(
                    f"depends_on names job(s) that do not exist: {', '.join(map(str, missing))}"
                )
        # Born states, in batch order (references point backwards).
        inner: list[AbstractSet[int]] = []
        born: list[tuple[JobState, int, str | None]] = []
        upstream_failed, done = JobState.UPSTREAM_FAILED, JobState.DONE.value
        for pos, b in enumerate(batch):
            deps_in: AbstractSet[int] = set(b.deps_in_batch) if b.deps_in_batch else _NONE
            if b.parent_in_batch is not None:
                deps_in = deps_in | inner[b.parent_in_batch]
            inner.append(deps_in)
            out = outer[pos]
            bad_out = sorted(x for x in out if states[x] in BAD_ENDS) if out else ()
            bad_in = (
                sorted(x for x in deps_in if born[x][0] is upstream_failed) if deps_in else ()
            )
            pending = len(deps_in)
            if out:
                pending += sum(1 for x in out if states[x] != done)
            error = None
            if b.job.is_container:
                state = JobState.ACTIVE
            elif bad_out:
                state = upstream_failed
                error = f"dependency {bad_out[0]} ended {states[bad_out[0]]}"
            elif bad_in:
                state = upstream_failed
                error = f"dependency #{bad_in[0]} of the batch ended upstream_failed"
            elif pending:
                state = JobState.WAITING
            else:
                state = JobState.READY
            born.append((state, pending, error))
        if any(b.job.parent is not None or b.parent_in_batch is not None for b in batch):
            self._refuse_wait_cycles(
                conn,
                [
                    (set(), set(), b.job.parent, b.parent_in_batch)
                    if born[pos][0] is JobState.UPSTREAM_FAILED
                    else (outer[pos], inner[pos], b.job.parent, b.parent_in_batch)
                    for pos, b in enumerate(batch)
                ],
            )
        children = Counter(b.parent_in_batch for b in batch if b.parent_in_batch is not None)
        # Insert in waves: a container's row before its children's.
        depth = [0] * size
        for pos, b in enumerate(batch):
            if b.parent_in_batch is not None:
                depth[pos] = depth[b.parent_in_batch] + 1
        ids: list[int] = [0] * size
        for wave in range(max(depth) + 1):
            positions = [pos for pos in range(size) if depth[pos] == wave]
            rows_values = []
            for pos in positions:
                b = batch[pos]
                state, pending, error = born[pos]
                parent_id = (
                    ids[b.parent_in_batch] if b.parent_in_batch is not None else b.job.parent
                )
                rows_values.append(
                    self._row_values(b.job, state, pending, error, parent_id, children[pos])
                )
            new_ids = self._insert_rows(conn, rows_values, now)
            for pos, new_id in zip(positions, new_ids, strict=True):
                ids[pos] = new_id
        edges = [
            {"job_id": ids[pos], "depends_on_id": dep}
            for pos in range(size)
            if outer[pos] or inner[pos]
            for dep in sorted({*outer[pos], *(ids[x] for x in inner[pos])})
        ]
        if edges:
            d.insert_edges(conn, t, edges)
        for pid, n in Counter(b.job.parent for b in batch if b.job.parent is not None).items():
            conn.execute(
                sa.update(j)
                .where(j.c.id == pid)
                .values(open_children=j.c.open_children + n, updated_at=now)
            )
        born_bad = [
            (ids[pos], JobState.UPSTREAM_FAILED.value,
             ids[b.parent_in_batch] if b.parent_in_batch is not None else b.job.parent)
            for pos, b in enumerate(batch)
            if born[pos][0] is JobState.UPSTREAM_FAILED
        ]
        if born_bad:
            self._propagate(conn, born_bad)
        if self.on_ready is not None and any(b[0] is JobState.READY for b in born):
            self.on_ready(conn)
        return ids

    @staticmethod
    def _row_values(
        job: NewJob,
        state: JobState,
        pending: int,
        error: str | None,
        parent_id: int | None,
        open_children: int,
    ) -> tuple[Any, ...]:
        """The values of a new row, in the order of :data:`ROW_KEYS`."""
        return (
            job.type,
            job.args_json,
            _STATE_VALUES[state],
            error,
            job.is_container,
            parent_id,
            job.group,
            job.weight,
            job.priority,
            job.max_attempts,
            job.timeout,
            pending,
            open_children,
            job.unique_key,
            job.run_after_at,
            job.run_after_delay,
            0.0 if state is JobState.UPSTREAM_FAILED else None,
        )

    def _insert_rows(
        self, conn: Connection, rows: list[tuple[Any, ...]], now: sa.ColumnElement[float]
    ) -> list[int]:
        """Insert rows and return their ids in order.

        The dialect may do it its own way (PostgreSQL: ids from the sequence, then COPY
        or one INSERT over a JSON text); otherwise one multi-row INSERT ... RETURNING per
        1000 rows where the database returns ids in order, else one INSERT per row.
        """
        ids = self.dialect.insert_jobs(conn, self.tables, rows, now)
        if ids is not None:
            return ids
        params = [dict(zip(ROW_KEYS, row, strict=True)) for row in rows]
        j = self.tables.jobs
        stmt = sa.insert(j).values(
            {
                **{c: sa.bindparam(c) for c in BULK_COLUMNS},
                **BULK_CONSTANTS,
                # Explicit casts: PostgreSQL cannot infer the type of a bare parameter.
                "run_after": sa.func.coalesce(
                    sa.cast(sa.bindparam("run_after_at"), sa.Double),
                    now + sa.cast(sa.bindparam("run_after_delay"), sa.Double),
                ),
                "created_at": now,
                "updated_at": now,
                # 0 for jobs born terminal, NULL otherwise.
                "finished_at": now + sa.cast(sa.bindparam("finished_offset"), sa.Double),
            }
        )
        if conn.dialect.insert_executemany_returning_sort_by_parameter_order:
            result = conn.execute(stmt.returning(j.c.id, sort_by_parameter_order=True), params)
            return [int(r[0]) for r in result]
        return [_inserted_id(conn.execute(stmt, row)) for row in params]

    def _refuse_wait_cycles(
        self,
        conn: Connection,
        new: Sequence[tuple[AbstractSet[int], AbstractSet[int], int | None, int | None]],
    ) -> None:
        """Raise DependencyCycle if a new job would wait for itself through a container.

        ``new`` holds, per new job (by batch position): the existing jobs and the batch
        positions it waits for, and its existing or in-batch container. A container ends
        only after its children, so a child whose dependencies wait, directly or through
        other jobs and containers, for one of its own containers never starts. Edges only
        point from a new job to older ones, except container -> child, so such a cycle
        always passes through a new child: the unfinished graph reachable from the new
        jobs is loaded (its containers locked, so that two transactions cannot each close
        half of a cycle unseen) and searched.
        """
        j, dt = self.tables.jobs, self.tables.deps
        live = (*UNFINISHED_STATES, JobState.ACTIVE.value)
        succ: dict[Any, set[Any]] = defaultdict(set)  # node -> nodes it waits for
        for pos, (outer, inner, parent, parent_in) in enumerate(new):
            succ[("new", pos)].update(outer, (("new", x) for x in inner))
            if parent_in is not None:
                succ[("new", parent_in)].add(("new", pos))
            if parent is not None:
                succ[parent].add(("new", pos))
        # Without an existing container gaining a child, no path leads back into the batch.
        frontier = (
            set().union(*(outer for outer, _, _, _ in new))
            if any(parent is not None for _, _, parent, _ in new)
            else set()
        )
        seen: set[int] = set()
        while frontier:
            ids = sorted(frontier - seen)
            seen.update(ids)
            rows = conn.execute(
                sa.select(j.c.id, j.c.is_container).where(j.c.id.in_(ids), j.c.state.in_(live))
            ).all()
            waiting = [int(r.id) for r in rows]
            boxes = [int(r.id) for r in rows if r.is_container]
            if boxes:
                conn.execute(
                    self.dialect.lock_rows(
                        sa.select(j.c.id).where(j.c.id.in_(boxes)).order_by(j.c.id)
                    )
                ).all()
            frontier = set()
            if not waiting:
                break
            edges = list(conn.execute(
                sa.select(dt.c.job_id, dt.c.depends_on_id).where(dt.c.job_id.in_(waiting))
            ))
            if boxes:
                edges += conn.execute(
                    sa.select(j.c.parent_id, j.c.id).where(
                        j.c.parent_id.in_(boxes), j.c.state.in_(live)
                    )
                ).all()
            for a, b in edges:
                succ[int(a)].add(int(b))
                if int(b) not in seen:
                    frontier.add(int(b))
        # Depth-first search for a cycle from the new jobs.
        color: dict[Any, int] = {}
        for pos in range(len(new)):
            root = ("new", pos)
            if root in color:
                continue
            color[root] = 1
            path = [root]
            stack = [iter(sorted(succ.get(root, ()), key=str))]
            while stack:
                nxt = next(stack[-1], None)
                if nxt is None:
                    color[path.pop()] = 2
                    stack.pop()
                elif color.get(nxt) == 1:
                    loop = [*path[path.index(nxt):], nxt]
                    names = [f"new job #{x[1]}" if isinstance(x, tuple) else str(x) for x in loop]
                    raise DependencyCycle(
                        "dependency cycle through a container (a container only ends after "
                        "its children): " + " waits for ".join(names)
                    )
                elif nxt not in color:
                    color[nxt] = 1
                    path.append(nxt)
                    stack.append(iter(sorted(succ.get(nxt, ()), key=str)))

    def _ancestors(self, conn: Connection, parent: int) -> list[int]:
        j = self.tables.jobs
        chain = [parent]
        seen = {parent}
        current: int | None = parent
        while current is not None:
            row = conn.execute(sa.select(j.c.parent_id).where(j.c.id == current)).first()
            current = None if row is None or row.parent_id is None else int(row.parent_id)
            if current is not None:
                if current in seen:  # corrupted data; never loop forever
                    break
                seen.add(current)
                chain.append(current)
        return chain

    def _insert_job(self, conn: Connection, job: NewJob) -> int:
        t = self.tables
        j = t.jobs
        d = self.dialect
        now = self.now()
        deps = set(job.depends_on)
        if job.parent is not None:
            parent = conn.execute(
                d.lock_rows(
                    sa.select(j.c.id, j.c.is_container, j.c.state).where(j.c.id == job.parent)
                )
            ).first()
            if parent is None:
                raise InvalidParent(f"parent job {job.parent} does not exist")
            if not parent.is_container:
                raise InvalidParent(
                    f"job {job.parent} is not a container; create one with enqueue_container()"
                )
            if parent.state != JobState.ACTIVE.value:
                raise InvalidParent(
                    f"container {job.parent} has already finished ({parent.state})"
                )
            ancestors = self._ancestors(conn, job.parent)
            looped = deps.intersection(ancestors)
            if looped:
                raise DependencyCycle(
                    f"a job cannot depend on its own container {sorted(looped)[0]}: "
                    "the container only finishes after the job"
                )
            # A container's dependencies hold for every job inside it.
            inherited = conn.execute(
                sa.select(t.deps.c.depends_on_id).where(t.deps.c.job_id.in_(ancestors))
            ).scalars()
            deps.update(int(x) for x in inherited)
        states: dict[int, str] = {}
        if deps:
            rows = conn.execute(
                d.lock_rows(
                    sa.select(j.c.id, j.c.state).where(j.c.id.in_(sorted(deps))).order_by(j.c.id)
                )
            ).all()
            states = {int(r.id): r.state for r in rows}
            missing = sorted(deps - states.keys())
            if missing:
                raise DependencyNotFound(
                    f"depends_on names job(s) that do not exist: {', '.join(map(str, missing))}"
                )
        bad = sorted(dep for dep, state in states.items() if state in BAD_ENDS)
        pending = sum(1 for state in states.values() if state != JobState.DONE.value)
        if job.parent is not None and deps and not bad:
            self._refuse_wait_cycles(conn, [(deps, set(), job.parent, None)])
        if job.is_container:
            state = JobState.ACTIVE
        elif bad:
            state = JobState.UPSTREAM_FAILED
        elif pending:
            state = JobState.WAITING
        else:
            state = JobState.READY
        if job.run_after_at is not None:
            run_after: Any = job.run_after_at
        elif job.run_after_delay is not None:
            run_after = now + job.run_after_delay
        else:
            run_after = None
        values: dict[str, Any] = {
            "type": job.type,
            "args": job.args_json,
            "state": state.value,
            "is_container": job.is_container,
            "parent_id": job.parent,
            "group_key": job.group,
            "weight": job.weight,
            "priority": job.priority,
            "attempts": 0,
            "max_attempts": job.max_attempts,
            "timeout": job.timeout,
            "retry_on_timeout": True,
            "pending_deps": pending,
            "open_children": 0,
            "failed_children": 0,
            "cancel_requested": False,
            "lease_token": 0,
            "run_after": run_after,
            "created_at": now,
            "updated_at": now,
            "unique_key": job.unique_key,
        }
        if state is JobState.UPSTREAM_FAILED:
            values["error"] = f"dependency {bad[0]} ended {states[bad[0]]}"
            values["finished_at"] = now
        insert = sa.insert(j).values(**values)
        notice = None
        if state is JobState.READY and self.ready_notice is not None:
            notice = self.ready_notice()
        if notice is not None:
            # The wake-up rides on the INSERT itself: one round trip, then the commit.
            new_id = int(conn.execute(insert.returning(j.c.id, notice)).one()[0])
        else:
            new_id = _inserted_id(conn.execute(insert))
        if deps:
            conn.execute(
                sa.insert(t.deps), [{"job_id": new_id, "depends_on_id": dep} for dep in deps]
            )
        if job.parent is not None:
            conn.execute(
                sa.update(j)
                .where(j.c.id == job.parent)
                .values(open_children=j.c.open_children + 1, updated_at=now)
            )
            if state is JobState.UPSTREAM_FAILED:
                self._propagate(conn, [(new_id, state.value, job.parent)])
        if state is JobState.READY and notice is None and self.on_ready is not None:
            self.on_ready(conn)
        return new_id

    # -- propagation --------------------------------------------------------------------

    def _release_statement(self, now: sa.ColumnElement[float]) -> sa.Update:
        """Dependents ``:r_ids`` each count ``:r_n`` fewer unfinished upstream jobs; a
        waiting one whose count reaches zero becomes ready. Built once."""
        j = self.tables.jobs
        n = sa.bindparam("r_n", type_=sa.Integer)
        # SET order matters on MySQL, which evaluates assignments left to right with
        # already-updated values: decide the state from the old counter.
        return (
            sa.update(j)
            .where(self.dialect.ids_in(j.c.id, "r_ids"))
            .ordered_values(
                (
                    j.c.state,
                    sa.case(
                        (sa.and_(j.c.state == "waiting", j.c.pending_deps <= n), "ready"),
                        else_=j.c.state,
                    ),
                ),
                (j.c.pending_deps, j.c.pending_deps - n),
                (j.c.updated_at, now),
            )
        )

    def _release_notifying(
        self, now: sa.ColumnElement[float], notice: sa.ColumnElement[Any]
    ) -> sa.Select[Any]:
        """The release as a data-modifying CTE, and ``notice`` (a NOTIFY) evaluated once
        if one of the rows it updated is ready now (PostgreSQL)."""
        released = (
            self._release_statement(now).returning(self.tables.jobs.c.state).cte("released")
        )
        return sa.select(notice).select_from(released).where(released.c.state == "ready").limit(1)

    def _propagate(
        self,
        conn: Connection,
        ended: Iterable[tuple[int, str, int | None]],
        *,
        done_edges: Counter[int] | None = None,
    ) -> None:
        """Apply the consequences of jobs reaching a terminal state, in this transaction.

        Dependents of a ``done`` job count one fewer unfinished upstream job and become
        ready at zero; dependents of a job that ended badly end ``upstream_failed``, and so
        on down the graph. A container whose last child ended rolls up to ``done`` or
        ``failed`` and propagates in turn. Each wave is a few statements for the whole
        batch, not a few per job. ``done_edges`` gives the first wave's dependents of its
        ``done`` jobs when the caller has read them already.
        """
        t = self.tables
        j, d = t.jobs, t.deps
        now = self.now()
        work = list(ended)
        while work:
            wave, work = work, []
            done = JobState.DONE.value
            done_ids = sorted(i for i, state, _ in wave if state == done)
            bad = {i: state for i, state, _ in wave if state != done}
            if done_ids and done_edges is not None:
                edges, done_edges = done_edges, None
            elif done_ids:
                dependents = self.dialect.cached(
                    ("dependents", d.name),
                    lambda: sa.select(d.c.job_id).where(
                        self.dialect.ids_in(d.c.depends_on_id, "ids")
                    ),
                )
                edges = Counter(self.dialect.execute(conn, dependents, {"ids": done_ids}).scalars())
            if done_ids:
                by_count: dict[int, list[int]] = defaultdict(list)
                for dependent, n in edges.items():
                    by_count[n].append(int(dependent))
                notice = self.ready_notice() if self.ready_notice is not None else None
                if notice is not None:
                    # The NOTIFY rides on the release itself, sent only if a dependent
                    # became ready.
                    release: sa.Executable = self.dialect.cached(
                        ("release_notify", j.name),
                        partial(self._release_notifying, now, notice),
                    )
                else:
                    if by_count and self.on_ready is not None:
                        self.on_ready(conn)
                    release = self.dialect.cached(
                        ("release", j.name), lambda: self._release_statement(now)
                    )
                for n, ids in sorted(by_count.items()):
                    self.dialect.execute(conn, release, {"r_ids": sorted(ids), "r_n": n})
            if bad:
                # Locked, so the 'waiting' check cannot race another transaction failing
                # the same dependent: each dependent ends once and is counted once.
                rows = conn.execute(
                    self.dialect.lock_rows(
                        sa.select(j.c.id, j.c.parent_id, d.c.depends_on_id)
                        .select_from(d.join(j, j.c.id == d.c.job_id))
                        .where(d.c.depends_on_id.in_(sorted(bad)), j.c.state == "waiting")
                        .order_by(j.c.id)
                    )
                ).all()
                first: dict[int, tuple[int, int | None]] = {}
                for r in rows:
                    first.setdefault(int(r.id), (int(r.depends_on_id), r.parent_id))
                by_dep: dict[int, list[int]] = defaultdict(list)
                for dependent, (dep, _) in first.items():
                    by_dep[dep].append(dependent)
                for dep, ids in sorted(by_dep.items()):
                    conn.execute(
                        sa.update(j)
                        .where(j.c.id.in_(ids), j.c.state == "waiting")
                        .values(
                            state=JobState.UPSTREAM_FAILED.value,
                            error=f"dependency {dep} ended {bad[dep]}",
                            finished_at=now,
                            updated_at=now,
                        )
                    )
                work.extend(
                    (dependent, JobState.UPSTREAM_FAILED.value, parent)
                    for dependent, (_, parent) in first.items()
                )
            children: dict[int, list[int]] = defaultdict(lambda: [0, 0])
            for _, state, parent_id in wave:
                if parent_id is not None:
                    children[int(parent_id)][0] += 1
                    children[int(parent_id)][1] += state != JobState.DONE.value
            for parent_id, (n, n_bad) in sorted(children.items()):
                conn.execute(
                    sa.update(j)
                    .where(j.c.id == parent_id)
                    .values(
                        open_children=j.c.open_children - n,
                        failed_children=j.c.failed_children + n_bad,
                        updated_at=now,
                    )
                )
            if children:
                parents = conn.execute(
                    sa.select(
                        j.c.id, j.c.state, j.c.open_children, j.c.failed_children, j.c.parent_id
                    ).where(j.c.id.in_(sorted(children)))
                ).all()
                for p in parents:
                    if p.state != "active" or p.open_children > 0:
                        continue
                    final = "done" if p.failed_children == 0 else "failed"
                    error = (
                        None
                        if final == "done"
                        else f"{p.failed_children} child job(s) did not end done"
                    )
                    rolled = conn.execute(
                        sa.update(j)
                        .where(j.c.id == p.id, j.c.state == "active")
                        .values(state=final, error=error, finished_at=now, updated_at=now)
                    )
                    if rolled.rowcount == 1:
                        work.append((int(p.id), final, p.parent_id))

    # -- claim --------------------------------------------------------------------------

    def claim(
        self,
        *,
        owner: str,
        cap: int,
        limit: int,
        ttl: float,
        types: Sequence[str] | None,
        rate_limits: Mapping[str, RateLimit] | None = None,
    ) -> list[ClaimedJob]:
        """Lease runnable jobs under the global cap, shared between groups fairly.

        One transaction: lock the gate row (claims that decide the cap and the
        fair-share clock take turns), count what is in flight across every worker,
        plan per group, claim per group through the dialect, record the fair-share
        progress. ``rate_limits`` maps job types to the limits on their starts (see
        :mod:`readyq.rates`); ``types`` must then be given.
        """
        if cap <= 0 or limit <= 0:
            return []
        return self.write(
            lambda conn: self._claim(conn, owner, cap, limit, ttl, types, None, rate_limits),
            what="claim",
        )

    def cycle(
        self,
        owner: str,
        outcomes: Sequence[Outcome],
        *,
        cap: int,
        limit: int,
        ttl: float,
        types: Sequence[str] | None,
        start: Mapping[str, tuple[float | None, bool]] | None = None,
        rate_limits: Mapping[str, RateLimit] | None = None,
    ) -> tuple[dict[tuple[int, int], bool], list[ClaimedJob]]:
        """Record outcomes, claim new jobs and start them: one transaction, one commit.

        The slots freed by the outcomes count as free for the claim. With ``start``
        (job type → (timeout, retry_on_timeout)), the claim's own UPDATE also starts the
        jobs: ``running`` with ``started_at`` and a deadline (the job's own timeout, else
        its type's). A worker does this when it hands every claimed job to a handler at
        once, so that ``leased`` never needs a commit of its own.
        """

        # Jobs leased by a try whose COMMIT reply was lost: that claim may have landed,
        # unknown to the worker, so the next try hands them back first.
        unknown: list[ClaimedJob] = []

        def lost(out: tuple[Any, Any]) -> None:
            # The unit's claimed rows: a function that reads them, or (the asyncio API
            # reads them before its COMMIT) the rows.
            try:
                unknown.extend(out[1]() if callable(out[1]) else out[1])
            except Exception:  # the rows cannot be read: their leases expire instead
                log.debug("cycle: the claimed rows of a lost commit cannot be read",
                          exc_info=True)

        def unit(
            conn: Connection,
        ) -> tuple[dict[tuple[int, int], bool], Callable[[], list[ClaimedJob]]]:
            if unknown:
                self._hand_back(conn, owner, unknown)
            applied = self._finish(conn, owner, outcomes) if outcomes else {}
            claimed = _no_jobs
            if cap > 0 and limit > 0:
                claimed = self._claim_deferred(
                    conn, owner, cap, limit, ttl, types, start, rate_limits
                )
            return applied, claimed

        if not outcomes and (cap <= 0 or limit <= 0):
            return {}, []
        if not outcomes and not self.runnable_exists(types):
            # An idle tick (a poll, or a notification that woke every listening worker)
            # reads the ready index without a lock: only a worker that sees a runnable
            # job opens a claim transaction and waits for the gate.
            return {}, []
        # The claimed rows are read once committed: the gate row is released sooner.
        applied, claimed = self.write(
            unit, what="cycle", after_commit=lambda out: (out[0], out[1]()), lost_commit=lost
        )
        return applied, claimed

    def rehearse(
        self,
        owner: str,
        *,
        cap: int,
        limit: int,
        ttl: float,
        types: Sequence[str] | None,
        start: Mapping[str, tuple[float | None, bool]] | None = None,
        rate_limits: Mapping[str, RateLimit] | None = None,
    ) -> int:
        """Run a worker's transaction once and roll it back; return how many jobs its
        claim took.

        The claim of up to ``limit`` jobs, as ``cycle`` makes it, then their finish as
        done, in one transaction that is rolled back: nothing is kept (the NOTIFY of a
        released dependent is dropped with it). What it leaves behind is the SQL of those
        statements, built and compiled, and an error now rather than at the first claim
        if the tables do not match this readyq.
        """

        def unit(conn: Connection) -> int:
            claimed: list[ClaimedJob] = []
            if cap > 0 and limit > 0:
                claimed = self._claim_deferred(
                    conn, owner, cap, limit, ttl, types, start, rate_limits
                )()
            if claimed:
                self._finish(conn, owner, [Outcome(c, "done", "null") for c in claimed])
            raise _Rehearsed(len(claimed))

        try:
            self.write(unit, what="rehearsal")
        except _Rehearsed as done:
            return int(done.args[0])
        raise AssertionError("a rehearsal's unit always raises")  # pragma: no cover

    def _hand_back(self, conn: Connection, owner: str, jobs: Sequence[ClaimedJob]) -> int:
        """Put back, uncharged, jobs leased by a claim whose COMMIT reply was lost.

        Fenced by each job's lease token and owner as that claim set them, so a claim
        that did not land, or a lease since reclaimed, is left alone. A job whose
        cancellation was asked meanwhile is left to the lease sweep, which cancels it.
        """
        j = self.tables.jobs
        now = self.now()
        return int(
            conn.execute(
                sa.update(j)
                .where(
                    self._fence(owner, [Lease(c.id, c.lease_token) for c in jobs]),
                    j.c.state.in_(("leased", "running")),
                    j.c.cancel_requested == sa.false(),
                )
                .values(
                    state="ready",
                    attempts=j.c.attempts - 1,
                    run_after=None,
                    lease_expires=None,
                    deadline=None,
                    started_at=None,
                    updated_at=now,
                )
            ).rowcount
        )

    def runnable_exists(self, types: Sequence[str] | None) -> bool:
        """Whether any job of ``types`` is runnable now: one lock-free read."""
        j = self.tables.jobs
        t = self.tables

        def build() -> sa.Select[Any]:
            if types is None:
                # In the ready index's order, so that no plan reads the table instead.
                return (
                    sa.select(j.c.id)
                    .where(runnable(t, self.now(), types=None))
                    .order_by(j.c.group_key, j.c.priority.desc(), j.c.id)
                    .limit(1)
                )
            # The ready jobs of these types only, through the index that holds them by
            # type (``first_ready_type``): a min(), which needs no pinned order.
            first = self.dialect.first_ready_type(
                t, types, sa.or_(j.c.run_after.is_(None), j.c.run_after <= self.now())
            )
            return sa.select(sa.literal(1)).where(first.is_not(None))

        stmt = self.dialect.cached(
            ("runnable_exists", j.name, None if types is None else tuple(types)), build
        )

        def unit(conn: Connection) -> bool:
            if types is None:
                self.dialect.pin_index_order(conn)
            return self.dialect.execute(conn, stmt).first() is not None

        # The typed probe is one statement; the untyped one pins the index order for the
        # rest of its transaction first.
        return self.read(unit, single=types is not None)

    def _claim(
        self,
        conn: Connection,
        owner: str,
        cap: int,
        limit: int,
        ttl: float,
        types: Sequence[str] | None,
        start: Mapping[str, tuple[float | None, bool]] | None = None,
        rate_limits: Mapping[str, RateLimit] | None = None,
    ) -> list[ClaimedJob]:
        return self._claim_deferred(conn, owner, cap, limit, ttl, types, start, rate_limits)()

    def _claim_deferred(
        self,
        conn: Connection,
        owner: str,
        cap: int,
        limit: int,
        ttl: float,
        types: Sequence[str] | None,
        start: Mapping[str, tuple[float | None, bool]] | None = None,
        rate_limits: Mapping[str, RateLimit] | None = None,
    ) -> Callable[[], list[ClaimedJob]]:
        """The claim; returns a function that reads the claimed jobs, which may be called
        after the transaction commits (see ``Dialect.claim_groups_recording``)."""
        t = self.tables
        d = self.dialect
        if self.on_claim_transaction is not None:
            self.on_claim_transaction(conn)
        d.pin_index_order(conn)
        now = self.now()
        # Where the database reads them in one statement, the runnable counts are read
        # before the gate row is locked: they only shape the plan, and every other claim
        # waits while the lock is held. (Rate limits may narrow the types after the
        # in-flight count: those claims read step by step.)
        early = None if rate_limits else d.ready_counts(conn, t, now, types, cap)
        if early is None and not rate_limits and d.capabilities.skip_locked:
            # The portable reads, for a database whose claims lock rows rather than the
            # whole database: the same split, in two statements.
            early, _ = self._runnable_counts(
                conn, d.ready_groups(conn, t, types), now, types, cap, with_history=False
            )
        if early is not None and not early:
            return _no_jobs
        gate = d.execute(
            conn,
            d.cached(
                ("gate", t.gate.name),
                lambda: d.lock_rows(
                    sa.select(t.gate.c.vclock, t.gate.c.seq).where(t.gate.c.id == GATE_ID)
                ),
            )
        ).first()
        if gate is None:
            raise SchemaNotFound("the readyq gate row is missing: call Queue.create_schema()")
        history: dict[str, tuple[float, int]]
        if early is not None:
            ready = early
            flight, history = d.flight_and_history(conn, t, sorted(ready))
        else:
            flight = self._in_flight(conn)
        total_in_flight = sum(n for n, _ in flight.values())
        if cap - total_in_flight <= 0:
            return _no_jobs
        budget = open_budget(self, conn, rate_limits, types, min(limit, cap - total_in_flight))
        if budget is not None:
            types = budget.allowed(types or ())
            if not types:
                return _no_jobs
        claim = d.claim if budget is None else budget.claim
        if early is None:
            # Runnable jobs per group, counted only up to the cap, for the groups a skip
            # scan of the ready index finds: the cost follows the number of groups, not
            # the backlog.
            ready, history = self._runnable_counts(
                conn, d.ready_groups(conn, t, types), now, types, cap
            )
        if not ready:
            return _no_jobs
        if len(set(ready) | set(flight)) == 1:
            # One group alone has nothing to share with: claim for it directly and leave
            # the fair-share clocks as they are (a group that joins later starts level).
            (key,) = ready
            limit = min(limit, cap - total_in_flight)
            return _jobs(
                claim(
                    conn,
                    t,
                    ClaimRequest(
                        owner=owner, group=key, limit=limit, ttl=ttl, types=types,
                        start=start,
                    ),
                    now,
                )
            )
        demands = []
        for key in sorted(set(ready) | set(flight)):
            n_ready, w_ready = ready.get(key, (0, 0))
            n_flight, w_flight = flight.get(key, (0, 0))
            hist = history.get(key)
            demands.append(
                GroupDemand(
                    key=key,
                    weight=max(w_ready, w_flight, 1),
                    in_flight=n_flight,
                    runnable=n_ready,
                    vfinish=None if hist is None else hist[0],
                    served_seq=0 if hist is None else hist[1],
                )
            )
        vclock = float(gate.vclock)
        plan = plan_claims(cap, demands, vclock, max_claims=limit)
        requests = [
            ClaimRequest(
                owner=owner, group=key, limit=plan.claims[key], ttl=ttl, types=types, start=start
            )
            for key in dict.fromkeys(plan.picks)
        ]
        seq = int(gate.seq)
        recorded: Progress | None = None
        expected: Progress | None = None
        claimed: list[ClaimedJob]
        if budget is None:
            # Where the database can, the claim also stores the progress the plan
            # expects; it is corrected below in the rare case that fewer jobs came back
            # (rows locked by another transaction are skipped).
            expected = planned_progress(plan, seq)
            got = d.claim_groups_recording(
                conn, t, requests, now,
                (progress_rows(expected), expected.vclock, expected.seq),
            )
            if got is not None:
                n, read = got
                if n == sum(plan.claims.values()):
                    # Each group got at most what was planned for it, so every group got
                    # all of it: the rows can wait for the commit.
                    return read
                recorded = expected
                claimed = read()
            else:
                claimed = d.claim_groups(conn, t, requests, now)
        else:
            claimed = [c for req in requests for c in budget.claim(conn, t, req, now)]
        counts: dict[str, int] = Counter(c.group for c in claimed)
        if recorded is not None:
            # Undo what was recorded for the plan, then record what happened: a planned
            # group that got nothing goes back to its stored history (a group that had
            # none, to the clock it would have started from).
            progress = account(plan, counts, demands, vclock, seq)
            rows = progress_rows(progress)
            served = set(progress.vfinish)
            for key in recorded.vfinish:
                if key not in served:
                    rows.append((key, *history.get(key, (vclock, 0))))
            d.record_progress(conn, t, rows, set(history) | set(recorded.vfinish),
                              progress.vclock, progress.seq)
            return _jobs(claimed)
        if not claimed:
            return _no_jobs
        progress = (
            expected  # every planned job was claimed: the plan's own progress
            if expected is not None and counts == plan.claims
            else account(plan, counts, demands, vclock, seq)
        )
        d.record_progress(conn, t, progress_rows(progress), set(history), progress.vclock,
                          progress.seq)
        return _jobs(claimed)

    def _in_flight(self, conn: Connection) -> dict[str, tuple[int, int]]:
        """group -> (jobs in flight, their largest weight): a range of the state index,
        bounded by the cap."""
        in_flight = self.dialect.cached(
            ("in_flight", self.tables.jobs.name),
            lambda: self.dialect.in_flight_counts(self.tables),
        )
        return {
            r.group_key: (int(r.n), int(r.w)) for r in self.dialect.execute(conn, in_flight)
        }

    def _runnable_counts(
        self,
        conn: Connection,
        groups: Sequence[str],
        now: sa.ColumnElement[float],
        types: Sequence[str] | None,
        cap: int,
        *,
        with_history: bool = True,
    ) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[float, int]]]:
        """group -> (runnable jobs counted up to ``cap``, their largest weight), and (with
        ``with_history``) the fair-share history of those groups, read in the same
        statement."""
        j = self.tables.jobs
        g = self.tables.groups
        d = self.dialect
        shape = None if types is None else tuple(types)

        def build(n: int) -> sa.Executable:
            parts = []
            for i in range(n):
                key = sa.bindparam(f"g{i}", type_=j.c.group_key.type)
                cap_param = sa.bindparam("cap", type_=sa.Integer)
                head = d.by_type(
                    runnable_head(self.tables, now, key, types, cap_param), self.tables, types
                ).subquery()
                columns: list[Any] = [
                    sa.literal(i).label("i"),
                    sa.func.count().label("n"),
                    sa.func.max(head.c.weight).label("w"),
                ]
                if with_history:
                    columns += [
                        sa.select(g.c.vfinish)
                        .where(g.c.group_key == key)
                        .scalar_subquery()
                        .label("vfinish"),
                        sa.select(g.c.served_seq)
                        .where(g.c.group_key == key)
                        .scalar_subquery()
                        .label("served_seq"),
                    ]
                parts.append(sa.select(*columns).select_from(head))
            return parts[0] if n == 1 else sa.union_all(*parts)

        out: dict[str, tuple[int, int]] = {}
        history: dict[str, tuple[float, int]] = {}
        for start in range(0, len(groups), 100):
            chunk = groups[start : start + 100]
            n = len(chunk)
            stmt = d.cached(
                ("runnable_counts", j.name, shape, n, with_history), partial(build, n)
            )
            params: dict[str, Any] = {f"g{i}": key for i, key in enumerate(chunk)}
            params["cap"] = cap
            for r in d.execute(conn, stmt, params):
                key = chunk[int(r.i)]
                if int(r.n):
                    out[key] = (int(r.n), int(r.w))
                if with_history and r.vfinish is not None:
                    history[key] = (float(r.vfinish), int(r.served_seq))
        return out, history

    # -- fenced writes ------------------------------------------------------------------

    def _fence(self, owner: str, leases: Sequence[Lease]) -> sa.ColumnElement[bool]:
        j = self.tables.jobs
        return sa.and_(
            self.dialect.pairs_match(j.c.id, j.c.lease_token, [(x.id, x.token) for x in leases]),
            j.c.lease_owner == owner,
        )

    def mark_running(
        self, owner: str, starts: Sequence[tuple[ClaimedJob, float | None, bool]]
    ) -> set[int]:
        """Move leased jobs to running, setting each job's deadline; returns the ids moved.

        ``starts`` holds (job, timeout seconds or None, retry_on_timeout).
        """
        if not starts:
            return set()
        return self.write(lambda conn: self._mark_running(conn, owner, starts), what="start")

    def _mark_running(
        self,
        conn: Connection,
        owner: str,
        starts: Sequence[tuple[ClaimedJob, float | None, bool]],
    ) -> set[int]:
        j = self.tables.jobs
        now = self.now()
        by_policy: dict[tuple[float | None, bool], list[Lease]] = {}
        for job, timeout, retry in starts:
            by_policy.setdefault((timeout, retry), []).append(Lease(job.id, job.lease_token))
        moved = 0
        for (timeout, retry), leases in by_policy.items():
            moved += conn.execute(
                sa.update(j)
                .where(self._fence(owner, leases), j.c.state == "leased")
                .values(
                    state="running",
                    started_at=now,
                    deadline=None if timeout is None else now + timeout,
                    retry_on_timeout=retry,
                    updated_at=now,
                )
            ).rowcount
        ids = [job.id for job, _, _ in starts]
        if moved == len(ids):
            return set(ids)
        tokens = {job.id: job.lease_token for job, _, _ in starts}
        rows = conn.execute(
            sa.select(j.c.id, j.c.lease_token, j.c.lease_owner, j.c.state).where(
                self.dialect.ids_match(j.c.id, ids)
            )
        ).all()
        return {
            int(r.id)
            for r in rows
            if r.state == "running" and r.lease_owner == owner and r.lease_token == tokens[r.id]
        }

    def heartbeat(self, owner: str, leases: Sequence[Lease], ttl: float) -> dict[int, LeaseStatus]:
        """Extend the leases still held, in one statement; report lost and cancelled jobs."""
        if not leases:
            return {}
        j = self.tables.jobs
        tokens = {x.id: x.token for x in leases}

        def unit(conn: Connection) -> dict[int, LeaseStatus]:
            now = self.now()
            conn.execute(
                sa.update(j)
                .where(self._fence(owner, leases), state_in(self.tables, *IN_FLIGHT_STATES))
                .values(lease_expires=now + ttl, heartbeat_at=now)
            )
            rows = conn.execute(
                sa.select(
                    j.c.id, j.c.lease_token, j.c.lease_owner, j.c.state, j.c.cancel_requested
                ).where(self.dialect.ids_match(j.c.id, list(tokens)))
            ).all()
            status = {x.id: LeaseStatus(lost=True, cancel_requested=False) for x in leases}
            for r in rows:
                held = (
                    r.lease_owner == owner
                    and r.lease_token == tokens[r.id]
                    and r.state in IN_FLIGHT_STATES
                )
                status[int(r.id)] = LeaseStatus(
                    lost=not held, cancel_requested=bool(r.cancel_requested)
                )
            return status

        return self.write(unit, what="heartbeat")

    def finish(
        self, owner: str, outcomes: Sequence[Outcome]
    ) -> dict[tuple[int, int], bool]:
        """Record how attempts ended, each fenced by its lease, in one transaction.

        Returns (job id, lease token) → True if the outcome was recorded, False if fenced
        out. The token is part of the key: a worker may hand in the late outcome of an
        attempt it gave up on together with that of the job's next attempt. Running
        the unit again after an ambiguous commit is safe: an outcome already recorded
        under the same lease is recognised and reported True again.
        """
        if not outcomes:
            return {}
        return self.write(lambda conn: self._finish(conn, owner, outcomes), what="finish")

    def _finish(
        self, conn: Connection, owner: str, outcomes: Sequence[Outcome]
    ) -> dict[tuple[int, int], bool]:
        applied: dict[tuple[int, int], bool] = {}
        ended: list[tuple[int, str, int | None]] = []
        done = sorted((o for o in outcomes if o.kind == "done"), key=_BY_JOB_ID)
        edges = None
        if done:
            edges = self._finish_done(conn, owner, done, applied, ended)
        for o in sorted((o for o in outcomes if o.kind != "done"), key=_BY_JOB_ID):
            self._finish_one(conn, owner, o, applied, ended)
        self._propagate(conn, ended, done_edges=edges)
        return applied

    def _finish_done(
        self,
        conn: Connection,
        owner: str,
        done: Sequence[Outcome],
        applied: dict[tuple[int, int], bool],
        ended: list[tuple[int, str, int | None]],
    ) -> Counter[int] | None:
        """Mark a batch done in one statement, each row fenced by its own lease.

        Returns the dependents of the batch (dependent id -> edges from the batch) when
        the dialect read them in the same statement and every row was marked.
        """
        j = self.tables.jobs
        now = self.now()
        count, edges = self.dialect.mark_done(
            conn,
            self.tables,
            owner,
            [(o.job.id, o.job.lease_token, o.result_json) for o in done],
            now,
        )
        if count == len(done):
            for o in done:
                applied[o.job.id, o.job.lease_token] = True
                ended.append((o.job.id, "done", o.job.parent_id))
            return edges
        # Some rows were fenced out, or (count == 0) this unit already committed once and
        # its COMMIT reply was lost: rows done under our own lease were recorded, and
        # propagated, by the earlier try.
        rows = {
            int(r.id): r
            for r in conn.execute(
                sa.select(j.c.id, j.c.state, j.c.lease_token, j.c.lease_owner).where(
                    self.dialect.ids_match(j.c.id, [o.job.id for o in done])
                )
            )
        }
        for o in done:
            r = rows.get(o.job.id)
            ok = (
                r is not None
                and r.state == "done"
                and r.lease_owner == owner
                and r.lease_token == o.job.lease_token
            )
            applied[o.job.id, o.job.lease_token] = ok
            if ok and count > 0:
                ended.append((o.job.id, "done", o.job.parent_id))
        return None

    def _finish_one(
        self,
        conn: Connection,
        owner: str,
        o: Outcome,
        applied: dict[tuple[int, int], bool],
        ended: list[tuple[int, str, int | None]],
    ) -> None:
        j = self.tables.jobs
        now = self.now()
        job = o.job
        fence = sa.and_(
            j.c.id == job.id,
            j.c.lease_token == job.lease_token,
            j.c.lease_owner == owner,
            j.c.state == "running",
        )
        final: str | None
        values: dict[str, Any]
        if o.kind == "retry":
            final = None
            values = {"state": "ready", "error": _truncate(o.error), "run_after": now + o.delay}
            # A cancel requested while the attempt ran wins over the retry.
            fence = sa.and_(fence, j.c.cancel_requested == sa.false())
        elif o.kind == "release":
            # Handed back by a worker that is shutting down: no attempt is charged.
            final = None
            values = {"state": "ready", "attempts": j.c.attempts - 1, "run_after": None}
            # A cancel requested while the attempt ran wins over the hand-back too.
            fence = sa.and_(fence, j.c.cancel_requested == sa.false())
        elif o.kind in ("fail", "cancel"):
            final = "failed" if o.kind == "fail" else "cancelled"
            values = {"state": final, "error": _truncate(o.error), "finished_at": now}
        else:
            raise ValueError(f"unknown outcome kind {o.kind!r}")
        values.update(lease_expires=None, deadline=None, updated_at=now)
        count = conn.execute(sa.update(j).where(fence).values(**values)).rowcount
        if count == 0 and o.kind in ("retry", "release"):
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
                    error=_truncate(o.error) if o.error else "cancelled",
                    finished_at=now,
                    lease_expires=None,
                    deadline=None,
                    updated_at=now,
                )
            ).rowcount
            if count:
                final = "cancelled"
        if count == 1:
            applied[job.id, job.lease_token] = True
            if final is not None:
                ended.append((job.id, final, job.parent_id))
            return
        # Fenced out, unless this very outcome was committed by an earlier try whose
        # COMMIT reply was lost.
        row = conn.execute(
            sa.select(
                j.c.state, j.c.lease_token, j.c.lease_owner, j.c.error, j.c.run_after
            ).where(j.c.id == job.id)
        ).first()
        expected = {
            "retry": ("ready", "cancelled"),
            "release": ("ready", "cancelled"),
            "fail": ("failed",),
            "cancel": ("cancelled",),
        }[o.kind]
        # A sweep of the expired lease also leaves this owner and token behind, with its
        # own error: only the values this outcome writes show it was committed.
        if row is None:
            ours = True
        elif o.kind == "release" and row.state == "ready":
            ours = row.run_after is None
        else:
            ours = row.error == (_truncate(o.error) if o.error else "cancelled")
        applied[job.id, job.lease_token] = bool(
            row is not None
            and row.lease_owner == owner
            and row.lease_token == job.lease_token
            and row.state in expected
            and ours
        )

    # -- reclaim ------------------------------------------------------------------------

    def reclaim_due(self) -> bool:
        """Whether any lease has expired or any attempt is past its deadline: one
        lock-free read of the in-flight range of the state index."""
        j = self.tables.jobs
        now = self.now()
        due = self.dialect.cached(
            ("reclaim_due", j.name),
            lambda: sa.select(j.c.id)
            .where(
                state_in(self.tables, *IN_FLIGHT_STATES),
                sa.or_(
                    j.c.lease_expires < now,
                    sa.and_(j.c.state == "running", j.c.deadline < now),
                ),
            )
            .limit(1),
        )
        return (
            self.read(lambda conn: self.dialect.execute(conn, due).first(), single=True)
            is not None
        )

    def reclaim(self, *, limit: int = 500) -> ReclaimResult:
        """Return expired leases to ready (or failed), and end attempts past their deadline.

        Each row is re-checked in its UPDATE (state, token and expiry), so a job that was
        finished or re-claimed after the SELECT is left alone.
        """
        # A plain read first: most ticks find nothing, and then take no write lock.
        if not self.reclaim_due():
            return ReclaimResult()
        result = self.write(lambda conn: self._reclaim(conn, limit), what="reclaim")
        # Logged once committed: a unit that is retried must not log twice.
        for r in result.jobs:
            log.warning(
                "job %d (%s) attempt %d reclaimed (%s): %s",
                r.id, r.type, r.attempt, r.reason.replace("_", " "), r.outcome,
                extra={**job_log_fields(r.id, r.type, r.attempt, r.group),
                       "event": "job_reclaimed", "reason": r.reason, "state": r.outcome},
            )
        return result

    def _reclaim(self, conn: Connection, limit: int) -> ReclaimResult:
        j = self.tables.jobs
        d = self.dialect
        now = self.now()
        expired = sa.or_(
            j.c.lease_expires < now, sa.and_(j.c.state == "running", j.c.deadline < now)
        )
        rows = conn.execute(
            d.lock_rows_skip_locked(
                sa.select(
                    j.c.id,
                    j.c.type,
                    j.c.group_key,
                    j.c.state,
                    j.c.attempts,
                    j.c.max_attempts,
                    j.c.lease_token,
                    j.c.parent_id,
                    j.c.lease_expires,
                    j.c.deadline,
                    j.c.retry_on_timeout,
                    j.c.cancel_requested,
                    j.c.timeout,
                    j.c.started_at,
                    now.label("now"),
                )
                .where(state_in(self.tables, *IN_FLIGHT_STATES), expired)
                .order_by(j.c.id)
                .limit(limit)
            )
        ).all()
        retried = failed = timed_out = cancelled = 0
        ended: list[tuple[int, str, int | None]] = []
        swept: list[ReclaimedJob] = []
        for r in rows:
            is_timeout = (
                r.state == "running" and r.deadline is not None and r.deadline < r.now
            )
            if is_timeout:
                timed_out += 1
                # A handler's timeout is not stored on the job; only the deadline is.
                seconds = r.timeout
                if seconds is None and r.started_at is not None:
                    seconds = round(r.deadline - r.started_at, 3)
                after = "" if seconds is None else f" after {seconds:g}s"
                why = f"timed out{after} (attempt {r.attempts})"
                retry = bool(r.retry_on_timeout) and r.attempts < r.max_attempts
            else:
                why = f"lease expired: worker lost during attempt {r.attempts}"
                retry = r.attempts < r.max_attempts
            values: dict[str, Any]
            if r.cancel_requested:
                final: str | None = "cancelled"
                values = {"state": final, "finished_at": now}
            elif retry:
                final = None
                values = {"state": "ready", "run_after": now + retry_delay(r.attempts)}
            else:
                final = "failed"
                values = {"state": final, "finished_at": now}
            values.update(error=why, lease_expires=None, deadline=None, updated_at=now)
            count = conn.execute(
                sa.update(j)
                .where(
                    j.c.id == r.id,
                    j.c.lease_token == r.lease_token,
                    state_in(self.tables, *IN_FLIGHT_STATES),
                    expired,
                )
                .values(**values)
            ).rowcount
            if count != 1:
                continue
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
                )
            )
        self._propagate(conn, ended)
        return ReclaimResult(
            retried=retried,
            failed=failed,
            timed_out=timed_out,
            cancelled=cancelled,
            jobs=tuple(swept),
        )

    # -- cancel -------------------------------------------------------------------------

    def cancel(self, job_id: int) -> bool:
        """Cancel a job; see ``Queue.cancel``."""
        return self.write(lambda conn: self._cancel(conn, job_id), what="cancel")

    def _cancel(self, conn: Connection, job_id: int) -> bool:
        j = self.tables.jobs
        d = self.dialect
        now = self.now()
        row = conn.execute(
            d.lock_rows(sa.select(j.c.state, j.c.parent_id).where(j.c.id == job_id))
        ).first()
        if row is None:
            raise JobNotFound(f"no job with id {job_id}")
        state = row.state
        if state in ("waiting", "ready"):
            conn.execute(
                sa.update(j)
                .where(j.c.id == job_id, j.c.state == state)
                .values(state="cancelled", error="cancelled", finished_at=now, updated_at=now)
            )
            self._propagate(conn, [(job_id, "cancelled", row.parent_id)])
            return True
        if state in IN_FLIGHT_STATES:
            conn.execute(
                sa.update(j).where(j.c.id == job_id).values(cancel_requested=True, updated_at=now)
            )
            return True
        if state == "active":
            children = conn.execute(
                sa.select(j.c.id).where(
                    j.c.parent_id == job_id, j.c.state.in_((*UNFINISHED_STATES, "active"))
                )
            ).scalars().all()
            for child in children:
                self._cancel(conn, int(child))
            still = conn.execute(sa.select(j.c.state).where(j.c.id == job_id)).scalar_one()
            if still == "active" and not children:
                conn.execute(
                    sa.update(j)
                    .where(j.c.id == job_id, j.c.state == "active")
                    .values(state="cancelled", error="cancelled", finished_at=now, updated_at=now)
                )
                self._propagate(conn, [(job_id, "cancelled", row.parent_id)])
            return True
        return False

    # -- reads --------------------------------------------------------------------------

    def get(self, job_id: int) -> JobInfo:
        j = self.tables.jobs

        def unit(conn: Connection) -> JobInfo:
            row = conn.execute(sa.select(j).where(j.c.id == job_id)).first()
            if row is None:
                raise JobNotFound(f"no job with id {job_id}")
            deps = conn.execute(
                sa.select(self.tables.deps.c.depends_on_id)
                .where(self.tables.deps.c.job_id == job_id)
                .order_by(self.tables.deps.c.depends_on_id)
            ).scalars()
            return info_from_row(row, tuple(int(x) for x in deps))

        return self.read(unit)

    def has_unfinished(self, types: Sequence[str] | None = None) -> bool:
        """True while any non-container job (of ``types``) is not terminal.

        One probe per index that holds unfinished jobs (ready, in flight, waiting), the
        states written into the SQL so that the partial indexes serve them: finished
        jobs are never read.
        """
        t = self.tables
        j = t.jobs

        def build() -> sa.Select[Any]:
            of_types = [] if types is None else [values_in(j.c.type, types)]
            if types is None:
                ready: sa.ColumnElement[bool] = sa.exists(
                    sa.select(j.c.id).where(state_in(t, JobState.READY.value))
                )
            else:
                ready = self.dialect.first_ready_type(t, types).is_not(None)
            return sa.select(
                sa.or_(
                    ready,
                    sa.exists(sa.select(j.c.id).where(state_in(t, *IN_FLIGHT_STATES), *of_types)),
                    sa.exists(sa.select(j.c.id).where(waiting_of_types(t, types))),
                )
            )

        # Asked at every tick of an idle worker: built once per set of types.
        stmt = self.dialect.cached(
            ("has_unfinished", j.name, None if types is None else tuple(types)), build
        )
        return self.read(lambda conn: bool(self.dialect.execute(conn, stmt).scalar()), single=True)

    def counts(self) -> dict[str, int]:
        """Number of jobs per state."""
        j = self.tables.jobs
        stmt = sa.select(j.c.state, sa.func.count()).group_by(j.c.state)
        return self.read(lambda conn: {r[0]: int(r[1]) for r in conn.execute(stmt)})

    def group_stats(self) -> dict[str, GroupStats]:
        """Per group: claimable jobs, the longest wait among them, and jobs in flight.

        Two grouped reads, one over the ready rows and one over the leased and running
        rows (bounded by the cap); finished jobs are never read.
        """
        j = self.tables.jobs

        def unit(conn: Connection) -> dict[str, GroupStats]:
            now = float(conn.execute(sa.select(self.now())).scalar_one())
            # As in ``readyq status``: a ready job became claimable when it last changed,
            # or when its run_after passed if that came later.
            since = sa.case(
                (j.c.run_after > j.c.updated_at, j.c.run_after), else_=j.c.updated_at
            )
            ready = conn.execute(
                sa.select(j.c.group_key, sa.func.count().label("n"),
                          sa.func.min(since).label("since"))
                .where(runnable(self.tables, sa.literal(now, sa.Double)))
                .group_by(j.c.group_key)
            ).all()
            flight = {
                r.group_key: int(r.n)
                for r in conn.execute(
                    sa.select(j.c.group_key, sa.func.count().label("n"))
                    .where(state_in(self.tables, *IN_FLIGHT_STATES))
                    .group_by(j.c.group_key)
                )
            }
            out = {
                r.group_key: GroupStats(
                    group=r.group_key,
                    ready=int(r.n),
                    in_flight=flight.get(r.group_key, 0),
                    oldest_ready_age=max(0.0, now - float(r.since)),
                )
                for r in ready
            }
            for key, n in flight.items():
                if key not in out:
                    out[key] = GroupStats(group=key, ready=0, in_flight=n, oldest_ready_age=None)
            return dict(sorted(out.items()))

        return self.read(unit)


def info_from_row(row: Any, depends_on: tuple[int, ...]) -> JobInfo:
    return JobInfo(
        id=int(row.id),
        type=row.type,
        state=JobState(row.state),
        args=decode(row.args),
        result=decode(row.result),
        error=row.error,
        attempts=int(row.attempts),
        max_attempts=int(row.max_attempts),
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
    )
