"""The dialect seam: the operations whose SQL differs between databases.

Each public method of :class:`Dialect` is a whole operation on readyq's tables (claim
these jobs, mark this batch done, extend these leases) or a fact about the database
(its clock, how a write transaction begins, which errors are worth a retry). The
portable implementation of each operation is here; a database's module overrides what
its facts force, and each override's docstring names the fact.

Three kinds of members, told apart in the code:

* required: ``@abstractmethod`` (the clock, the claim, the statement that marks a batch
  done), which every database writes its own way;
* portable operations with a default here, which a database may override with a faster
  form (PostgreSQL loads many rows with ``COPY``, reads the runnable counts in one
  statement, ...);
* the forms of a few statements the portable operations share (how a list of ids is
  bound, how a read reaches an index, the read of the groups of a resource claim),
  each with a portable default and a docstring saying what an override must return;
* optional abilities that only some databases have, each a :class:`typing.Protocol`
  (:class:`RecordsProgressInClaim`, :class:`Notifies`), checked with ``isinstance``.

The records that cross the seam (:class:`~readyq.dialects.records.ClaimRequest`,
:class:`~readyq.dialects.records.Progress`, ...) are in :mod:`readyq.dialects.records`.
Statements that never differ (cancel's updates, the container roll-up) are not part of
the seam: the store builds them itself, from :mod:`readyq.sql`; so are the portable
parts the dialects complete (:mod:`readyq.sql.claims`, :mod:`readyq.sql.resource_state`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from readyq.dialects.records import (
    Capabilities,
    ClaimReceipt,
    ClaimRequest,
    Dependents,
    MarkedDone,
    Progress,
    ResourceFlight,
    ResourceState,
    dependents_from,
)
from readyq.model import IN_FLIGHT_STATES, ClaimedJob
from readyq.schema import ROW_KEYS, SPARSE_COLUMNS, Tables, TableTraits
from readyq.sql import claims as claim_sql
from readyq.sql import jobs as job_sql
from readyq.sql import leases as lease_sql
from readyq.sql.claims import (
    claim_columns,
    claim_head,
    claimed_from_row,
    claimed_rows,
    lease_values,
)
from readyq.sql.ready import (
    by_type_key,
    costed_of_types,
    first_ready_type,
    in_flight_by_group,
    merged_types,
    no_costs,
    ready_group_keys,
    run_after_passed,
    runnable,
    runnable_head,
    state_in,
    values_in,
    waiting_of_types,
)
from readyq.sql.resource_state import state_row

S = TypeVar("S")


class ReadyNotifier(Protocol):
    """Wakes listening workers when the transaction that made jobs ready commits."""

    column: sa.ColumnElement[Any]
    """The wake-up as a column an INSERT can return, so that it costs no round trip."""

    def send(self, conn: Connection) -> None:
        """Send the wake-up from ``conn``'s transaction."""


class Listener(Protocol):
    """A connection that listens for wake-ups and calls back on each."""

    def stop(self, timeout: float = 2.0) -> None:
        """Stop listening and close the connection."""


@runtime_checkable
class Notifies(Protocol):
    """Optional: the database delivers notifications at commit (PostgreSQL's
    LISTEN/NOTIFY). ``capabilities.listen_notify`` is True exactly for dialects that
    implement this."""

    def ready_notifier(self, prefix: str) -> ReadyNotifier:
        """The notifier for the tables of ``prefix``."""

    def listen_channel(self, conn: Connection, prefix: str) -> str:
        """The name of ``prefix``'s channel, as the store's connection ``conn`` sees it."""

    def start_listener(
        self, url: sa.URL, channel: str, on_wake: Callable[[], None]
    ) -> Listener:
        """Listen on ``channel`` from a connection of its own to ``url``, calling
        ``on_wake`` for each batch of notifications and after each reconnection."""


@runtime_checkable
class RecordsProgressInClaim(Protocol):
    """Optional: the claim statement also stores the fair-share progress that its plan
    expects, one round trip fewer while the gate row is held (PostgreSQL)."""

    def claim_jobs_recording(
        self,
        conn: Connection,
        t: Tables,
        requests: Sequence[ClaimRequest],
        now: sa.ColumnElement[float],
        progress: Progress,
    ) -> ClaimReceipt:
        """Claim as :meth:`Dialect.claim_jobs` and store ``progress`` in the same
        statement; the rows may be read after the commit."""

    def claim_ids_recording(
        self,
        conn: Connection,
        t: Tables,
        req: ClaimRequest,
        ids: Sequence[int],
        now: sa.ColumnElement[float],
        progress: Progress,
    ) -> ClaimReceipt:
        """Claim as :meth:`Dialect.claim_ids` and store ``progress`` in the same
        statement; the rows may be read after the commit."""


# Statements whose list of group keys is bound one parameter per key are built once per
# length of the list, up to this many keys (a few statements, not one per group count).
PER_GROUP_PARAMS = 16
# Groups whose runnable counts one portable statement reads.
COUNTS_PER_STATEMENT = 100


class Dialect(ABC):
    """Shared behaviour; each database overrides what its facts force."""

    name: ClassVar[str] = "base"
    capabilities: ClassVar[Capabilities]
    table_traits: ClassVar[TableTraits] = TableTraits()
    # SQLSTATEs / error codes that mean "roll back and try the whole unit again".
    retryable_codes: ClassVar[frozenset[object]] = frozenset()
    missing_table_codes: ClassVar[frozenset[object]] = frozenset()
    # Error codes that say a statement cannot run on this database as it is (an unknown
    # column or function, a syntax error): see ``is_permanent``.
    permanent_codes: ClassVar[frozenset[object]] = frozenset()
    # Error codes that say the database refused a value a statement carried (text it
    # cannot store, a number out of range): see ``is_refusal``.
    refusal_codes: ClassVar[frozenset[object]] = frozenset()

    def __init__(self, server_version: tuple[int, ...] = ()) -> None:
        self.server_version = server_version
        self._statements: dict[Any, Any] = {}

    @property
    def database(self) -> str:
        """The database this dialect talks to: ``sqlite``, ``postgresql``, ``mysql`` or
        ``mariadb``."""
        return self.name

    # -- engine -------------------------------------------------------------------------

    @classmethod
    def engine_options(cls, driver: str = "") -> dict[str, Any]:
        """Keyword arguments for ``create_engine`` when readyq builds the engine on a URL
        of ``driver`` (``psycopg``, ``pymysql`` ...)."""
        # No pre-ping: it costs a round trip per transaction. A dead connection is
        # detected when used; the store invalidates the pool and retries the unit.
        return {}

    @classmethod
    def session_statements(
        cls, sa_dialect: Any, idle_seconds: float | None, lock_seconds: float | None = None
    ) -> list[str]:
        """The statements that bound how long one new connection may sit idle inside a
        transaction, and wait for a lock, for engines readyq creates: see
        :mod:`readyq.engines`. None by default."""
        return []

    # The URL scheme and the extra that install readyq's usual driver for this database.
    driver_hint: ClassVar[str] = ""

    @classmethod
    def database_file(cls, url: sa.URL) -> str | None:
        """The file that holds the database at ``url``, for a database that lives in one
        file; None otherwise (a server, or a database in memory)."""
        return None

    def prepare_engine(self, engine: Engine, *, owned: bool) -> Engine:
        """Adapt an engine; ``owned`` is False for an engine the user passed in.

        Returns the engine readyq should use.
        """
        return engine

    def prepare_connection(self, dbapi_connection: Any) -> None:  # noqa: B027
        """Set up a driver connection opened before :meth:`prepare_engine` (the one the
        dialect was detected on) as the prepared engine sets up every new one; most
        databases need nothing."""

    def check_server(self) -> None:  # noqa: B027 - most servers need no check
        """Raise UnsupportedDatabase if the server cannot run readyq safely."""

    def server_text(self, conn: Connection) -> str:
        """The server's own description of itself (``SELECT version()``), read once when
        a store first connects: servers that only speak this database's protocol are
        told apart by it (:mod:`readyq.dialects.lookalikes`)."""
        return str(conn.execute(sa.select(sa.func.version())).scalar() or "")

    # -- statements ---------------------------------------------------------------------

    def cached(self, key: Any, build: Callable[[], S]) -> S:
        """The statement stored under ``key``, built by ``build`` the first time.

        The hot path (claim, finish, heartbeat) runs the same few statements thousands of
        times a second: built once with bound parameters, each is constructed, keyed and
        compiled by SQLAlchemy once instead of on every call.
        """
        stmt = self._statements.get(key)
        if stmt is None:
            stmt = self._statements[key] = build()
        return stmt

    def execute(
        self,
        conn: Connection,
        stmt: sa.Executable,
        params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    ) -> Any:
        """Run one of readyq's statements: ``conn.execute``, unless the dialect has a
        cheaper way with the same effect (see ``SQLiteDialect.execute``). The result
        offers ``all``, ``first``, ``scalar``, ``scalars``, iteration and ``rowcount``."""
        return conn.execute(stmt) if params is None else conn.execute(stmt, params)

    # -- transactions and time ----------------------------------------------------------

    def begin_write(self, conn: Connection) -> None:  # noqa: B027 - autobegin suffices
        """Start a write transaction on ``conn`` (SQLAlchemy autobegins by default)."""

    def pin_index_order(self, conn: Connection) -> None:  # noqa: B027 - most need nothing
        """Keep the rest of ``conn``'s transaction reading the ready index in its order.

        The claim, the runnable counts and the runnable probe take the first rows of an
        index range in index order and stop; a planner that misjudges the range's size
        might read it whole instead (see
        :meth:`readyq.dialects.postgresql.PostgresDialect.pin_index_order`).
        """

    def same_database(self, ours: sa.URL, theirs: sa.URL) -> bool:
        """Whether a connection made from ``theirs`` reaches the database ``ours`` names:
        the same backend, host, port and database (whatever the drivers)."""
        def where(url: sa.URL) -> tuple[object, ...]:
            return (url.get_backend_name(), (url.host or "localhost").lower(),
                    url.port, url.database)
        return where(ours) == where(theirs)

    @abstractmethod
    def now(self) -> sa.ColumnElement[float]:
        """The database server's clock, in seconds since the Unix epoch."""

    # -- enqueue ------------------------------------------------------------------------

    def insert_job_rows(
        self,
        conn: Connection,
        t: Tables,
        rows: list[tuple[Any, ...]],
        now: sa.ColumnElement[float],
        notifier: ReadyNotifier | None = None,
    ) -> list[int]:
        """Insert new job rows (values in the order of ``schema.ROW_KEYS``) and return
        their ids in order: one multi-row ``INSERT ... RETURNING`` where the driver
        returns ids in parameter order, else one INSERT per row. ``notifier`` (if any)
        is told too: its wake-up rides on the INSERT where it returns rows, which spares
        a single enqueue a round trip."""
        params = [dict(zip(ROW_KEYS, row, strict=True)) for row in rows]
        returning = conn.dialect.insert_executemany_returning_sort_by_parameter_order
        ride = notifier if returning else None
        unset = tuple(c for c in SPARSE_COLUMNS if all(p[c] is None for p in params))
        for c in unset:  # a parameter named as a column would put it back in the INSERT
            for p in params:
                del p[c]
        # Built once: constructing the INSERT cost a single enqueue more than running it.
        stmt = self.cached(
            ("insert_rows", t.jobs.name, returning, ride is not None, unset),
            lambda: job_sql.insert_rows(
                t, now, returning, None if ride is None else ride.column, unset
            ),
        )
        if returning:
            return [int(r[0]) for r in conn.execute(stmt, params)]
        ids = [inserted_id(conn.execute(stmt, row)) for row in params]
        if notifier is not None:
            notifier.send(conn)
        return ids

    def insert_edges(self, conn: Connection, t: Tables, edges: list[dict[str, int]]) -> None:
        """Insert dependency edges (``job_id``, ``depends_on_id``)."""
        conn.execute(sa.insert(t.deps), edges)

    # -- the dependency graph -----------------------------------------------------------

    def dependents_of(self, conn: Connection, t: Tables, ids: Sequence[int]) -> Dependents:
        """The dependents of ``ids``, each with its edges from ``ids`` and whether it is
        a container (read in the same statement, by primary key)."""
        d, j = t.deps, t.jobs
        stmt = self.cached(
            ("dependents", d.name),
            lambda: sa.select(d.c.job_id, j.c.is_container)
            .select_from(d.join(j, j.c.id == d.c.job_id))
            .where(self.ids_in(d.c.depends_on_id, "ids")),
        )
        return dependents_from(self.execute(conn, stmt, {"ids": list(ids)}))

    def release_dependents(
        self,
        conn: Connection,
        t: Tables,
        by_count: Mapping[int, Sequence[int]],
        now: sa.ColumnElement[float],
        notifier: ReadyNotifier | None,
    ) -> None:
        """Dependents listed under ``n`` count ``n`` fewer unfinished upstream jobs; a
        waiting one whose count reaches zero becomes ready. ``notifier`` (if any) is told
        first, as some may become ready."""
        if not by_count:
            return
        if notifier is not None:
            notifier.send(conn)
        release = self.cached(
            ("release", t.jobs.name),
            partial(job_sql.release_dependents, t, now, partial(self.ids_in, name="r_ids")),
        )
        for n, ids in sorted(by_count.items()):
            self.execute(conn, release, {"r_ids": sorted(ids), "r_n": n})

    # -- reads of the ready set ---------------------------------------------------------

    def any_runnable(
        self,
        conn: Connection,
        t: Tables,
        now: sa.ColumnElement[float],
        types: Sequence[str] | None,
        costed: bool = False,
    ) -> bool:
        """Whether any job of ``types`` is runnable now (with ``costed``, counting jobs
        that take resources). One statement when ``types`` is given; for every type,
        :meth:`pin_index_order` runs first."""
        j = t.jobs

        def build() -> sa.Select[Any]:
            if types is None:
                # In the ready index's order, so that no plan reads the table instead.
                return (
                    sa.select(j.c.id)
                    .where(runnable(t, now, types=None, costed=costed))
                    .order_by(j.c.group_key, j.c.priority.desc(), j.c.id)
                    .limit(1)
                )
            # Through the index that holds the ready jobs by type: a min(), which needs
            # no pinned order.
            first = self.first_ready_type(
                t, types, sa.or_(j.c.run_after.is_(None), j.c.run_after <= now),
                *(() if costed else (no_costs(t),)),
            )
            return sa.select(sa.literal(1)).where(first.is_not(None))

        stmt = self.cached(
            ("any_runnable", j.name, None if types is None else tuple(types), costed), build
        )
        if types is None:
            self.pin_index_order(conn)
        return self.execute(conn, stmt).first() is not None

    def any_unfinished(self, conn: Connection, t: Tables, types: Sequence[str] | None) -> bool:
        """Whether any job (of ``types``) that is not a container has not ended: one
        probe per index that holds unfinished jobs (ready, in flight, waiting), so that
        finished jobs are never read."""
        j = t.jobs

        def build() -> sa.Select[Any]:
            of_types = [] if types is None else [values_in(j.c.type, types)]
            if types is None:
                ready: sa.ColumnElement[bool] = sa.exists(
                    sa.select(j.c.id).where(state_in(t, "ready"))
                )
            else:
                ready = self.first_ready_type(t, types).is_not(None)
            return sa.select(
                sa.or_(
                    ready,
                    sa.exists(sa.select(j.c.id).where(state_in(t, *IN_FLIGHT_STATES), *of_types)),
                    sa.exists(sa.select(j.c.id).where(waiting_of_types(t, types))),
                )
            )

        stmt = self.cached(
            ("any_unfinished", j.name, None if types is None else tuple(types)), build
        )
        return bool(self.execute(conn, stmt).scalar())

    def ready_groups(
        self, conn: Connection, t: Tables, types: Sequence[str] | None = None
    ) -> list[str]:
        """The distinct groups that have ready rows (of ``types``), by a skip scan of a
        ready index: a recursive query steps from one group to the next, each step one
        index probe, so the cost follows the number of groups, not of ready jobs."""
        stmt = self.cached(
            ("ready_groups", t.jobs.name, by_type_key(types)),
            lambda: ready_group_keys(t, types),
        )
        return list(self.execute(conn, stmt).scalars())

    def runnable_counts(
        self,
        conn: Connection,
        t: Tables,
        now: sa.ColumnElement[float],
        types: Sequence[str] | None,
        cap: int,
        *,
        with_history: bool = False,
        costed: bool = False,
        groups: Sequence[str] | None = None,
    ) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[float, int]]]:
        """group -> (runnable jobs of ``types`` counted up to ``cap``, their largest
        weight), for the groups :meth:`ready_groups` finds (or ``groups``, what the
        caller read from it in this transaction); with ``with_history``, also the
        fair-share history (vfinish, served_seq) of those groups, read in the same
        statements; with ``costed``, jobs that take resources count too. Counting only up
        to the cap makes the cost follow the number of groups, not the backlog."""
        if groups is None:
            groups = self.ready_groups(conn, t, types)
        j, g = t.jobs, t.groups
        shape = None if types is None else tuple(types)

        def build(n: int) -> sa.Executable:
            parts = []
            for i in range(n):
                key = sa.bindparam(f"g{i}", type_=j.c.group_key.type)
                cap_param = sa.bindparam("cap", type_=sa.Integer)
                head = self.ready_by_type_read(
                    runnable_head(t, now, key, types, cap_param, costed), t, types
                )
                counted = head.subquery()
                columns: list[Any] = [
                    sa.literal(i).label("i"),
                    sa.func.count().label("n"),
                    sa.func.max(counted.c.weight).label("w"),
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
                parts.append(sa.select(*columns).select_from(counted))
            return parts[0] if n == 1 else sa.union_all(*parts)

        out: dict[str, tuple[int, int]] = {}
        history: dict[str, tuple[float, int]] = {}
        for start in range(0, len(groups), COUNTS_PER_STATEMENT):
            chunk = groups[start : start + COUNTS_PER_STATEMENT]
            n = len(chunk)
            stmt = self.cached(
                ("runnable_counts", j.name, shape, n, with_history, costed), partial(build, n)
            )
            params: dict[str, Any] = {f"g{i}": key for i, key in enumerate(chunk)}
            params["cap"] = cap
            for r in self.execute(conn, stmt, params):
                key = chunk[int(r.i)]
                if int(r.n):
                    out[key] = (int(r.n), int(r.w))
                if with_history and r.vfinish is not None:
                    history[key] = (float(r.vfinish), int(r.served_seq))
        return out, history

    def in_flight(self, conn: Connection, t: Tables) -> dict[str, tuple[int, int]]:
        """group -> (jobs in flight, their largest weight): a range of the in-flight
        index, bounded by the cap."""
        stmt = self.cached(
            ("in_flight", t.jobs.name),
            lambda: self.in_flight_read(in_flight_by_group(t, *IN_FLIGHT_STATES), t),
        )
        return {r.group_key: (int(r.n), int(r.w)) for r in self.execute(conn, stmt)}

    def in_flight_and_history(
        self, conn: Connection, t: Tables, groups: Sequence[str]
    ) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[float, int]]]:
        """In-flight (count, largest weight) per group and the fair-share history
        (vfinish, served_seq) of ``groups``, in one statement (``UNION ALL``), read after
        the gate row is locked."""

        # One parameter per group, the statement built once per number of groups (up to
        # PER_GROUP_PARAMS): an expanding parameter is rendered into the SQL text at
        # every execution. Beyond that, one expanding parameter.
        n = len(groups) if len(groups) <= PER_GROUP_PARAMS else None

        def build() -> sa.CompoundSelect[Any]:
            g = t.groups
            counted = self.in_flight_read(
                in_flight_by_group(t, *IN_FLIGHT_STATES), t
            ).subquery("in_flight")
            flight = sa.select(
                sa.literal(0).label("history"), counted.c.group_key,
                counted.c.n, counted.c.w,
                sa.null().label("vfinish"), sa.null().label("served_seq"),
            )
            keys: Any
            if n is None:
                keys = sa.bindparam("keys", expanding=True)
            else:
                keys = [sa.bindparam(f"k{i}", type_=g.c.group_key.type) for i in range(n)]
            history = sa.select(
                sa.literal(1), g.c.group_key, sa.null(), sa.null(), g.c.vfinish, g.c.served_seq
            ).where(g.c.group_key.in_(keys))
            return sa.union_all(flight, history)

        flight: dict[str, tuple[int, int]] = {}
        history: dict[str, tuple[float, int]] = {}
        stmt = self.cached(("in_flight_and_history", t.jobs.name, n), build)
        params: dict[str, Any] = (
            {"keys": list(groups)} if n is None else {f"k{i}": k for i, k in enumerate(groups)}
        )
        for r in self.execute(conn, stmt, params).all():
            if r[0]:
                history[r[1]] = (float(r[4]), int(r[5]))
            else:
                flight[r[1]] = (int(r[2]), int(r[3]))
        return flight, history

    # -- the claim ----------------------------------------------------------------------

    @abstractmethod
    def claim_jobs(
        self,
        conn: Connection,
        t: Tables,
        requests: Sequence[ClaimRequest],
        now: sa.ColumnElement[float],
    ) -> list[ClaimedJob]:
        """Lease up to each request's limit of its group's runnable jobs, inside the open
        transaction; the requests share their owner, lease length, types and start
        policies."""

    def record_progress(self, conn: Connection, t: Tables, progress: Progress) -> None:
        """Store the fair-share progress of a claim: (group, vfinish, served_seq) per
        group served (``progress.known`` groups have a row already) and the gate's
        clock."""
        g = t.groups
        updates = [
            {"key": k, "vfinish": v, "served_seq": s}
            for k, v, s in progress.rows
            if k in progress.known
        ]
        inserts = [
            {"group_key": k, "vfinish": v, "served_seq": s}
            for k, v, s in progress.rows
            if k not in progress.known
        ]
        if updates:
            self.execute(
                conn,
                self.cached(
                    ("progress", g.name),
                    lambda: sa.update(g)
                    .where(g.c.group_key == sa.bindparam("key", type_=g.c.group_key.type))
                    .values(
                        vfinish=sa.bindparam("vfinish"), served_seq=sa.bindparam("served_seq")
                    ),
                ),
                updates,
            )
        if inserts:
            conn.execute(sa.insert(g), inserts)
        self.execute(
            conn,
            self.cached(("gate_progress", t.gate.name), partial(claim_sql.gate_clock_update, t)),
            {"vclock": progress.vclock, "seq": progress.seq},
        )

    # -- claims that weigh resources ----------------------------------------------------

    def in_flight_uses(
        self, conn: Connection, t: Tables
    ) -> list[tuple[str, str | None, int, int]]:
        """(group, stored costs, jobs, their largest weight) of the jobs in flight, per
        group and costs: a range of the in-flight index, bounded by the cap."""

        def build() -> sa.Select[Any]:
            j = t.jobs
            return self.in_flight_read(
                sa.select(
                    j.c.group_key, j.c.uses, sa.func.count().label("n"),
                    sa.func.max(j.c.weight).label("w"),
                )
                .where(state_in(t, *IN_FLIGHT_STATES))
                .group_by(j.c.group_key, j.c.uses),
                t,
            )

        stmt = self.cached(("in_flight_uses", t.jobs.name), build)
        return [(r[0], r[1], int(r[2]), int(r[3])) for r in self.execute(conn, stmt)]

    def resource_flight(
        self,
        conn: Connection,
        t: Tables,
        groups: Sequence[str],
        types: Sequence[str] | None,
    ) -> ResourceFlight:
        """In one statement (``UNION ALL`` of rows tagged by kind): :meth:`in_flight_uses`,
        the fair-share history of ``groups``, whether any reservation is stored and
        whether any ready job of ``types`` has costs of its own (one seek of the index
        that holds only those, however many jobs are ready)."""
        j, r, g = t.jobs, t.reservations, t.groups
        # One parameter per group up to PER_GROUP_PARAMS, as in in_flight_and_history.
        n = len(groups) if len(groups) <= PER_GROUP_PARAMS else None

        def build() -> sa.CompoundSelect[Any]:
            flight = self.in_flight_read(
                sa.select(*state_row(t, 0, group_key=j.c.group_key, uses=j.c.uses,
                                     n=sa.func.count(), w=sa.func.max(j.c.weight)))
                .where(state_in(t, *IN_FLIGHT_STATES))
                .group_by(j.c.group_key, j.c.uses),
                t,
            )
            # Each probe as a derived table: SQLite takes no LIMIT on the members of a
            # compound select.
            one_reservation = sa.select(r.c.job_id).limit(1).subquery("rq_reserved")
            one_costed = self.costed_probe(t, types).subquery("rq_costed")
            parts: list[sa.Select[Any]] = [
                flight,
                sa.select(*state_row(t, 1, job_id=one_reservation.c.job_id)),
                sa.select(*state_row(t, 4, job_id=one_costed.c.id)),
            ]
            if n != 0:
                keys: Any
                if n is None:
                    keys = sa.bindparam("keys", expanding=True)
                else:
                    keys = [sa.bindparam(f"k{i}", type_=g.c.group_key.type) for i in range(n)]
                parts.append(
                    sa.select(*state_row(t, 2, group_key=g.c.group_key, n=g.c.served_seq,
                                         vf=g.c.vfinish))
                    .where(g.c.group_key.in_(keys))
                )
            return sa.union_all(*parts)

        stmt = self.cached(
            ("resource_flight", j.name, None if types is None else tuple(types), n), build
        )
        params: dict[str, Any] = (
            {"keys": list(groups)} if n is None else {f"k{i}": k for i, k in enumerate(groups)}
        )
        out = ResourceFlight([], {}, False, False)
        reserved = costed = False
        # Positional: the columns of ``state_row`` in order (kind, group_key, uses, n, w, ...).
        for row in self.execute(conn, stmt, params).all():
            kind = row[0]
            if kind == 0:
                out.flight.append((row[1], row[2], int(row[3]), int(row[4])))
            elif kind == 2:
                out.history[row[1]] = (float(row[11]), int(row[3]))
            elif kind == 1:
                reserved = True
            else:
                costed = True
        return out._replace(reserved=reserved, costed=costed)

    def costed_probe(
        self, t: Tables, types: Sequence[str] | None
    ) -> sa.Select[Any] | sa.TextualSelect:
        """A read of the ``id`` of one ready job of ``types`` that has costs of its own
        (:func:`readyq.sql.ready.costed_of_types`), no row when there is none;
        :meth:`resource_flight` takes it as a derived table.

        An override must return a select of that one column with the same rows, and may
        only change how the database reaches them (hold it to the index that holds only
        those jobs, which stays small while statistics may say otherwise)."""
        j = t.jobs
        return sa.select(j.c.id).where(costed_of_types(t, types)).limit(1)

    def resource_state(
        self,
        conn: Connection,
        t: Tables,
        now: sa.ColumnElement[float],
        heads: Mapping[str, int],
        types: Sequence[str] | None,
    ) -> ResourceState:
        """In one statement (``UNION ALL`` of rows tagged by kind): :meth:`in_flight_uses`,
        the reservations with what is true of their jobs now, the fair-share history of
        the groups of ``heads`` and their first jobs (:meth:`resource_heads`). For more
        groups than one statement holds, the heads of the rest are read on their own."""
        j, r = t.jobs, t.reservations
        first = dict(list(sorted(heads.items()))[: self.groups_per_state_read])
        shape = self.state_groups_shape(len(first))

        def build() -> sa.CompoundSelect[Any]:
            flight = self.in_flight_read(
                sa.select(*state_row(t, 0, group_key=j.c.group_key, uses=j.c.uses,
                                     n=sa.func.count(), w=sa.func.max(j.c.weight)))
                .where(state_in(t, *IN_FLIGHT_STATES))
                .group_by(j.c.group_key, j.c.uses),
                t,
            )
            due = sa.case((run_after_passed(t, now), 1), else_=0)
            reserved = sa.select(*state_row(
                t, 1, group_key=j.c.group_key, uses=r.c.uses, w=j.c.weight, job_id=r.c.job_id,
                seq=r.c.seq, state=j.c.state, type=j.c.type, due=due,
            )).select_from(r.outerjoin(j, j.c.id == r.c.job_id))
            return sa.union_all(flight, reserved, *self.state_groups(t, now, types, shape))

        stmt = self.cached(
            ("resource_state", j.name, None if types is None else tuple(types), shape), build
        )
        params = self.state_groups_params(first)
        state = ResourceState([], [], {}, [])
        heads_out, flight_out = state.heads, state.flight
        # Positional: the columns of ``state_row`` in order (kind, group_key, uses, n, w, job_id,
        # seq, state, type, priority, due, vf).
        for kind, group, uses, n_, w, job_id, seq, job_state, type_, priority, due, vf in (
            self.execute(conn, stmt, params).all()
        ):
            if kind == 3:
                heads_out.append((job_id, group, type_, uses, w, priority))
            elif kind == 0:
                flight_out.append((group, uses, int(n_), int(w)))
            elif kind == 1:
                state.reservations.append(
                    (int(job_id), int(seq), uses, job_state, type_, group, w, bool(due))
                )
            else:
                state.history[group] = (float(vf), int(n_))
        state.reservations.sort(key=lambda res: (res[1], res[0]))
        rest = {k: v for k, v in heads.items() if k not in first}
        if rest:
            state.heads.extend(
                (int(h.id), h.group_key, h.type, h.uses, int(h.weight), int(h.priority))
                for h in self.resource_heads(conn, t, now, rest, types)
            )
            g = t.groups
            names = sorted(rest)
            for start in range(0, len(names), COUNTS_PER_STATEMENT):
                chunk = names[start : start + COUNTS_PER_STATEMENT]
                rows = conn.execute(
                    sa.select(g.c.group_key, g.c.vfinish, g.c.served_seq)
                    .where(g.c.group_key.in_(chunk))
                )
                state.history.update({x[0]: (float(x[1]), int(x[2])) for x in rows})
        return state

    groups_per_state_read: ClassVar[int] = COUNTS_PER_STATEMENT
    """The most groups whose history and heads one :meth:`resource_state` reads; the
    heads of the others are read by :meth:`resource_heads`."""

    def state_groups_shape(self, n: int) -> int:
        """What of ``n`` groups (at most :attr:`groups_per_state_read`) shapes the text
        of :meth:`state_groups`'s parts, the key their statement is cached under.

        An override returns 0 for no group, and for more the number :meth:`state_groups`
        takes as its ``n``: here ``n`` itself (one read per group); a database that binds
        every group in one parameter returns 1."""
        return n

    def state_groups(
        self,
        t: Tables,
        now: sa.ColumnElement[float],
        types: Sequence[str] | None,
        n: int,
    ) -> list[sa.Select[Any]]:
        """The parts of :meth:`resource_state`'s ``UNION ALL`` that read the groups, ``n``
        as :meth:`state_groups_shape` gave it, the groups bound by
        :meth:`state_groups_params`.

        An override must return selects of :func:`readyq.sql.resource_state.state_row`
        rows: kind 2 (``group_key``, ``n`` the served_seq, ``vf`` the vfinish) for each
        bound group with a history, and kind 3 (``job_id``, ``group_key``, ``type``,
        ``uses``, ``w``, ``priority``) for each group's first runnable jobs, up to its
        bound limit, jobs that take resources included; no part for ``n == 0``. Here one
        read per group, bound as ``g{i}`` and ``n{i}``."""
        if not n:
            return []
        j, g = t.jobs, t.groups
        keys = [sa.bindparam(f"g{i}", type_=j.c.group_key.type) for i in range(n)]
        parts = [
            sa.select(*state_row(t, 2, group_key=g.c.group_key, n=g.c.served_seq,
                                 vf=g.c.vfinish))
            .where(g.c.group_key.in_(keys))
        ]
        columns = (j.c.id, j.c.group_key, j.c.type, j.c.uses, j.c.weight, j.c.priority)
        for i in range(n):
            head = claim_head(
                t, now, keys[i], types, sa.bindparam(f"n{i}", type_=sa.Integer), *columns,
                part=lambda stmt, type_: self.ready_by_type_read(stmt, t, [type_]), costed=True,
            )
            if merged_types(types) is None:
                head = self.ready_by_type_read(head, t, types)
            sub = head.subquery(f"rq_head{i}")
            parts.append(sa.select(*state_row(
                t, 3, group_key=sub.c.group_key, uses=sub.c.uses, w=sub.c.weight,
                job_id=sub.c.id, type=sub.c.type, priority=sub.c.priority,
            )))
        return parts

    def state_groups_params(self, heads: Mapping[str, int]) -> dict[str, Any]:
        """The parameters of :meth:`state_groups`'s parts for ``heads`` (group -> how
        many of its first jobs to read): an override binds them under the names its
        :meth:`state_groups` uses."""
        params: dict[str, Any] = {}
        for i, (key, limit) in enumerate(heads.items()):
            params[f"g{i}"] = key
            params[f"n{i}"] = limit
        return params

    def resource_heads(
        self,
        conn: Connection,
        t: Tables,
        now: sa.ColumnElement[float],
        heads: Mapping[str, int],
        types: Sequence[str] | None,
    ) -> list[Any]:
        """(id, group_key, type, uses, weight, priority) of the first ``heads[group]``
        runnable jobs of ``types`` of each group, jobs that take resources included: one
        ``UNION ALL`` of per-group reads for up to ``COUNTS_PER_STATEMENT`` groups (whose
        order the caller restores from the priority and id)."""
        j = t.jobs
        columns = (j.c.id, j.c.group_key, j.c.type, j.c.uses, j.c.weight, j.c.priority)

        def build(size: int) -> sa.Executable:
            parts = []
            for i in range(size):
                head = claim_head(
                    t, now, sa.bindparam(f"g{i}", type_=j.c.group_key.type), types,
                    sa.bindparam(f"n{i}", type_=sa.Integer), *columns,
                    part=lambda stmt, type_: self.ready_by_type_read(stmt, t, [type_]), costed=True,
                )
                if merged_types(types) is None:
                    head = self.ready_by_type_read(head, t, types)
                sub = head.subquery(f"rq_head{i}")
                parts.append(sa.select(*sub.c))
            return parts[0] if size == 1 else sa.union_all(*parts)

        rows: list[Any] = []
        shape = None if types is None else tuple(types)
        groups = sorted(heads)
        for start in range(0, len(groups), COUNTS_PER_STATEMENT):
            chunk = groups[start : start + COUNTS_PER_STATEMENT]
            stmt = self.cached(
                ("resource_heads", j.name, shape, len(chunk)), partial(build, len(chunk))
            )
            params: dict[str, Any] = {}
            for i, key in enumerate(chunk):
                params[f"g{i}"] = key
                params[f"n{i}"] = heads[key]
            rows.extend(self.execute(conn, stmt, params).all())
        return rows

    def claim_ids(
        self,
        conn: Connection,
        t: Tables,
        req: ClaimRequest,
        ids: Sequence[int],
        now: sa.ColumnElement[float],
    ) -> list[ClaimedJob]:
        """Lease the jobs ``ids`` that are still runnable, as :meth:`claim_jobs` leases
        a group's head (``req`` gives the owner, lease, types and start policies; its
        group and limit are not used). Called under the gate row's lock, which every
        claim takes, so no other claim holds these rows."""
        if not ids:
            return []
        j = t.jobs

        def still() -> sa.ColumnElement[bool]:
            return sa.and_(self.ready_ids(t, "rq_ids"), run_after_passed(t, now))

        # Built once per shape of the request, the ids bound at execution.
        params = {**req.params(), "rq_ids": list(ids)}
        if self.capabilities.returning:
            stmt = self.cached(
                ("claim_ids", j.name, req.shape()),
                lambda: sa.update(j)
                .where(still())
                .values(**lease_values(t, req, now))
                .returning(*claim_columns(t)),
            )
            return claimed_rows(self.execute(conn, stmt, params))
        select = self.cached(
            ("claim_ids_read", j.name),
            lambda: sa.select(*claim_columns(t))
            .where(still())
            .order_by(j.c.id)
            .with_for_update(),
        )
        rows = self.execute(conn, select, {"rq_ids": list(ids)}).all()
        if not rows:
            return []
        update = self.cached(
            ("claim_ids_write", j.name, req.shape()),
            lambda: sa.update(j)
            .where(self.ids_in(j.c.id, "rq_ids"))
            .values(**lease_values(t, req, now)),
        )
        self.execute(conn, update, {**params, "rq_ids": [r[0] for r in rows]})
        return [claimed_from_row(row, before_update=True, req=req) for row in rows]

    # -- leases -------------------------------------------------------------------------

    def start_leased(
        self,
        conn: Connection,
        t: Tables,
        owner: str,
        leases: Sequence[tuple[int, int]],
        now: sa.ColumnElement[float],
        *,
        timeout: float | None,
        retry_on_timeout: bool,
    ) -> int:
        """Move leased jobs (id, token) still held by ``owner`` to running, with a
        deadline ``timeout`` seconds on; return the rows moved."""
        held = self.pairs_match(t.jobs.c.id, t.jobs.c.lease_token, leases)
        stmt = lease_sql.fenced_start(
            t, now, lease_sql.held_by(t, owner, held), timeout=timeout,
            retry_on_timeout=retry_on_timeout,
        )
        return int(conn.execute(stmt).rowcount)

    def extend_leases(
        self,
        conn: Connection,
        t: Tables,
        owner: str,
        leases: Sequence[tuple[int, int]],
        lease_ttl: float,
        now: sa.ColumnElement[float],
    ) -> None:
        """Extend by ``lease_ttl`` the leases (id, token) ``owner`` still holds, in flight."""
        held = self.pairs_match(t.jobs.c.id, t.jobs.c.lease_token, leases)
        fence = lease_sql.held_by(t, owner, held)
        conn.execute(lease_sql.fenced_heartbeat(t, now, fence, lease_ttl))

    def hand_back(
        self,
        conn: Connection,
        t: Tables,
        owner: str,
        leases: Sequence[tuple[int, int]],
        now: sa.ColumnElement[float],
    ) -> int:
        """Put back, uncharged, jobs (id, token) leased by ``owner`` whose cancellation
        nobody asked for; return the rows put back."""
        held = self.pairs_match(t.jobs.c.id, t.jobs.c.lease_token, leases)
        stmt = lease_sql.fenced_hand_back(t, now, lease_sql.held_by(t, owner, held))
        return int(conn.execute(stmt).rowcount)

    def lease_rows(self, conn: Connection, t: Tables, ids: Sequence[int]) -> list[Any]:
        """(id, state, lease_token, lease_owner, cancel_requested) of the jobs ``ids``."""
        j = t.jobs
        return list(
            conn.execute(
                sa.select(
                    j.c.id, j.c.state, j.c.lease_token, j.c.lease_owner, j.c.cancel_requested
                ).where(self.match_ids(j.c.id, ids))
            ).all()
        )

    def mark_done(
        self,
        conn: Connection,
        t: Tables,
        owner: str,
        rows: Sequence[tuple[int, int, str | None]],
        now: sa.ColumnElement[float],
    ) -> MarkedDone:
        """Mark (id, token, result) rows done in one UPDATE, each fenced by its own lease
        (and ``state = 'running'``); when every row was marked, read the batch's
        dependents too."""
        stmt, params = self.done_update(t, owner, rows, now)
        count = int(self.execute(conn, stmt, params).rowcount)
        if count != len(rows):
            return MarkedDone(count, None)
        return MarkedDone(count, self.dependents_of(conn, t, [r[0] for r in rows]))

    @abstractmethod
    def done_update(
        self,
        t: Tables,
        owner: str,
        rows: Sequence[tuple[int, int, str | None]],
        now: sa.ColumnElement[float],
    ) -> tuple[sa.Update, dict[str, Any]]:
        """The UPDATE that marks (id, token, result) rows done, and its parameters, for
        :meth:`mark_done`.

        Every database writes its own: the statement must be built once (cached, the
        batch travelling as bound values whatever its length), set
        :func:`readyq.sql.leases.done_values` with each row's own result, and touch only
        the rows whose id, ``lease_token`` and ``lease_owner == owner`` match and whose
        state is ``running``, so that its row count is the number of rows marked."""

    # -- errors -------------------------------------------------------------------------

    def error_code(self, exc: BaseException) -> object:
        return getattr(driver_error(exc), "sqlstate", None)

    def is_retryable(self, exc: BaseException) -> bool:
        """True for errors after which the whole transaction may simply be run again."""
        if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
            return True
        return self.error_code(exc) in self.retryable_codes

    def is_disconnect(self, exc: BaseException) -> bool:
        return isinstance(exc, sa.exc.DBAPIError) and bool(exc.connection_invalidated)

    def is_missing_table(self, exc: BaseException) -> bool:
        return self.error_code(exc) in self.missing_table_codes

    def is_permanent(self, exc: BaseException) -> bool:
        """True for an error that no wait can cure: the database refused the statement
        itself (an unknown column or function, a syntax error), so its schema is not the
        one this readyq writes for. A worker stops on it instead of waiting it out."""
        return self.error_code(exc) in self.permanent_codes

    def is_refusal(self, exc: BaseException) -> bool:
        """True when the database or its driver refused a value the statement carried
        (text it cannot store or encode, a number out of range, a value too long).

        Running the statement again gets the same answer, so it is never waited out as
        an outage: the write that carried the value fails alone (see
        :mod:`readyq.worker`). A driver that cannot encode a string raises
        ``UnicodeError`` before anything reaches the server.
        """
        if isinstance(exc, (UnicodeError, sa.exc.DataError)):
            return True
        return self.error_code(exc) in self.refusal_codes

    # -- forms of the statements above, overridden where a database has better ones ----
    # Each is part of the contract: tests/dialects/test_conformance.py runs every
    # dialect's form on its database and checks the rows it selects.

    def octets(self, column: sa.ColumnElement[Any]) -> sa.ColumnElement[int]:
        """The size of a text column's value in bytes (UTF-8), not in characters: what a
        stored step weighs, read without reading the value."""
        return sa.func.octet_length(column, type_=sa.Integer)

    def match_ids(
        self, column: sa.ColumnElement[Any], ids: Sequence[int]
    ) -> sa.ColumnElement[bool]:
        """``column`` is one of ``ids``, for lists of any length: a job may depend on more
        jobs than a statement may carry parameters (65,535 for PostgreSQL's protocol), so
        a database with such a limit binds the list as one value. Here ``column IN
        (ids)``: MySQL's driver writes the values into the statement's text."""
        return column.in_(list(ids))

    def ids_in(self, column: sa.ColumnElement[Any], name: str) -> sa.ColumnElement[bool]:
        """``column`` is one of the ids bound at execution as ``{name: [ids]}``, for a
        statement built once (:meth:`cached`).

        An override must accept a list of any length under that one name and select the
        same rows; here an expanding ``IN``, whose text is rendered at each execution."""
        return column.in_(sa.bindparam(name, expanding=True))

    def ready_ids(self, t: Tables, name: str) -> sa.ColumnElement[bool]:
        """The jobs of the ids bound as ``name`` (as for :meth:`ids_in`) whose state is
        ``ready``. An override must select the same rows, and may only change how the
        database finds them (by the primary key, not the ready index)."""
        return sa.and_(self.ids_in(t.jobs.c.id, name), state_in(t, "ready"))

    def pairs_match(
        self,
        id_column: sa.ColumnElement[Any],
        token_column: sa.ColumnElement[Any],
        pairs: Sequence[tuple[int, int]],
    ) -> sa.ColumnElement[bool]:
        """The rows whose (``id_column``, ``token_column``) is one of ``pairs``, the test
        under every fenced write (:func:`readyq.sql.leases.held_by`): each row fenced by
        its own lease token, never the id alone. An override must select exactly those
        rows for any number of pairs; here ``(id, token) IN (pairs)``."""
        return sa.tuple_(id_column, token_column).in_(list(pairs))

    def first_ready_type(
        self, t: Tables, types: Sequence[str], *conds: sa.ColumnElement[bool]
    ) -> sa.ScalarSelect[Any]:
        """A scalar subquery: one of ``types`` that has a ready job meeting ``conds``, or
        NULL when none has (:func:`readyq.sql.ready.first_ready_type`).

        An override must give NULL exactly when no ready job of ``types`` meets
        ``conds``, reading the index of ready jobs by type rather than the table."""
        return first_ready_type(t, types, *conds)

    def ready_by_type_read(
        self, stmt: sa.Select[Any], t: Tables, types: Sequence[str] | None
    ) -> sa.Select[Any]:
        """``stmt``, a read of ready jobs of ``types``, as this database reads them
        through the index of ready jobs by type. An override must return a select of the
        same columns and rows (an index hint, say); here ``stmt`` itself."""
        return stmt

    def in_flight_read(self, stmt: sa.Select[Any], t: Tables) -> sa.Select[Any]:
        """``stmt``, a read of the jobs in flight, as this database reads them through
        the in-flight index. An override must return a select of the same columns and
        rows (an index hint, say); here ``stmt`` itself."""
        return stmt


def inserted_id(result: Any) -> int:
    """The id of the row an INSERT of one row made."""
    return int(result.inserted_primary_key[0])


def driver_error(exc: BaseException) -> BaseException | None:
    """The driver's exception behind ``exc``: the one SQLAlchemy wrapped, or ``exc``
    itself when it reached readyq unwrapped (see :mod:`readyq.transient`)."""
    if isinstance(exc, sa.exc.DBAPIError):
        return exc.orig
    if isinstance(exc, sa.exc.SQLAlchemyError):
        return None
    return exc
