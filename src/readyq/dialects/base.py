"""The dialect seam: only what truly differs between databases.

Portable SQL lives in :mod:`readyq.sql` and :mod:`readyq.store`. A dialect says how a
write transaction begins, how rows are locked, what time it is on the server, how one
group's runnable jobs are claimed, and which errors are worth a retry.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from readyq.model import IN_FLIGHT_STATES, ClaimedJob
from readyq.schema import GATE_ID, Tables
from readyq.sql.ready import (
    Part,
    as_is,
    by_type_key,
    claim_order,
    first_ready_type,
    in_flight_by_group,
    merged_head,
    merged_types,
    ready_group_keys,
    runnable,
    values_in,
)

S = TypeVar("S")


@dataclass(frozen=True)
class Capabilities:
    """What a database can do, for callers that must not test dialect names."""

    skip_locked: bool
    returning: bool
    partial_index: bool
    listen_notify: bool
    row_locks: bool


@dataclass(frozen=True)
class ClaimRequest:
    """One group's share of a claim transaction."""

    owner: str
    group: str
    limit: int
    ttl: float
    types: Sequence[str] | None
    # job type -> (timeout seconds or None, retry_on_timeout): start the jobs as they are
    # claimed (running, with a deadline) instead of leaving them leased.
    start: Mapping[str, tuple[float | None, bool]] | None = None

    def shape(self) -> tuple[Any, ...]:
        """What the claim statement's text depends on (the rest is bound at execution)."""
        return (
            None if self.types is None else tuple(self.types),
            None if self.start is None else tuple(sorted(self.start.items())),
        )

    def params(self) -> dict[str, Any]:
        """The values bound into a claim statement built by :func:`lease_values` and
        :func:`readyq.sql.ready.runnable` with ``group=GROUP``."""
        return {"rq_owner": self.owner, "rq_group": self.group, "rq_limit": self.limit,
                "rq_ttl": self.ttl}


# Bound parameters of a claim statement; ClaimRequest.params() gives their values.
OWNER = sa.bindparam("rq_owner", type_=sa.String)
GROUP = sa.bindparam("rq_group", type_=sa.String)
LIMIT = sa.bindparam("rq_limit", type_=sa.Integer)
TTL = sa.bindparam("rq_ttl", type_=sa.Double)
# Statements whose list of group keys is bound one parameter per key are built once per
# length of the list, up to this many keys (a few statements, not one per group count).
PER_GROUP_PARAMS = 16


class Dialect(ABC):
    """Shared behaviour; each database overrides what its facts force."""

    name: ClassVar[str] = "base"
    capabilities: ClassVar[Capabilities]
    # SQLSTATEs / error codes that mean "roll back and try the whole unit again".
    retryable_codes: ClassVar[frozenset[object]] = frozenset()
    missing_table_codes: ClassVar[frozenset[object]] = frozenset()
    # Error codes that say a statement cannot run on this database as it is (an unknown
    # column or function, a syntax error): see ``is_permanent``.
    permanent_codes: ClassVar[frozenset[object]] = frozenset()

    def __init__(self, server_version: tuple[int, ...] = ()) -> None:
        self.server_version = server_version
        self._statements: dict[Any, Any] = {}

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
        """Run one of the loop's statements: ``conn.execute``, unless the dialect has a
        cheaper way with the same effect (see ``SQLiteDialect.execute``). The result
        offers ``all``, ``first``, ``scalar``, ``scalars``, iteration and ``rowcount``."""
        return conn.execute(stmt) if params is None else conn.execute(stmt, params)

    # -- engine -------------------------------------------------------------------------

    @classmethod
    def engine_options(cls) -> dict[str, Any]:
        """Keyword arguments for ``create_engine`` when readyq builds the engine."""
        # No pre-ping: it costs a round trip per transaction. A dead connection is
        # detected when used; the store invalidates the pool and retries the unit.
        return {}

    def prepare_engine(self, engine: Engine, *, owned: bool) -> Engine:
        """Adapt an engine; ``owned`` is False for an engine the user passed in.

        Returns the engine readyq should use.
        """
        return engine

    def check_server(self) -> None:  # noqa: B027 - most servers need no check
        """Raise UnsupportedDatabase if the server cannot run readyq safely."""

    # -- transactions and locks ---------------------------------------------------------

    def begin_write(self, conn: Connection) -> None:  # noqa: B027 - autobegin suffices
        """Start a write transaction on ``conn`` (SQLAlchemy autobegins by default)."""

    # Whether a read of one statement may run in autocommit (``Store.read``). Only where
    # switching costs no round trip: psycopg sets autocommit on the client side, PyMySQL
    # sends a SET for it, and SQLite's reads are in-process anyway.
    autocommit_reads: ClassVar[bool] = False

    def pin_index_order(self, conn: Connection) -> None:  # noqa: B027 - most need nothing
        """Keep the rest of ``conn``'s transaction reading the ready index in its order.

        The claim, the runnable counts and the runnable probe take the first rows of an
        index range in index order and stop. A planner that believes the range is
        nearly empty may instead collect the whole range and sort it, so that every
        claim reads the whole backlog: see :meth:`PostgresDialect.pin_index_order`.
        """

    def types_in(
        self, column: sa.ColumnElement[str], types: Sequence[str]
    ) -> sa.ColumnElement[bool]:
        """``column IN (...)`` for a probe of the ready jobs by type
        (:meth:`first_ready_type`)."""
        return values_in(column, types)

    def first_ready_type(
        self, t: Tables, types: Sequence[str], *conds: sa.ColumnElement[bool]
    ) -> sa.ScalarSelect[Any]:
        """One of ``types`` that has a ready job meeting ``conds``, or NULL: one probe of
        the index of ready jobs by type (:func:`readyq.sql.ready.first_ready_type`)."""
        return first_ready_type(t, types, *conds, member=self.types_in)

    def by_type(
        self, stmt: sa.Select[Any], t: Tables, types: Sequence[str] | None
    ) -> sa.Select[Any]:
        """``stmt``, a read of ready jobs of ``types``, held to the index of ready jobs by
        type where the database needs telling (MySQL's ``FORCE INDEX``, for a worker of
        one type or of a few)."""
        return stmt

    def lock_rows(self, stmt: sa.Select[Any]) -> sa.Select[Any]:
        """Exclusive row locks held to commit (no-op where the database has none)."""
        return stmt.with_for_update()

    def lock_rows_skip_locked(self, stmt: sa.Select[Any]) -> sa.Select[Any]:
        """Exclusive row locks, skipping rows another transaction holds."""
        return stmt.with_for_update(skip_locked=True)

    def insert_jobs(
        self,
        conn: Connection,
        t: Tables,
        rows: list[tuple[Any, ...]],
        now: sa.ColumnElement[float],
    ) -> list[int] | None:
        """Insert new job rows (values in the order of ``schema.ROW_KEYS``) in a way of
        this database's own, returning their ids in order; None means: use the portable
        multi-row insert."""
        return None

    def insert_edges(self, conn: Connection, t: Tables, edges: list[dict[str, int]]) -> None:
        """Insert dependency edges (``job_id``, ``depends_on_id``)."""
        conn.execute(sa.insert(t.deps), edges)

    def ready_groups(
        self, conn: Connection, t: Tables, types: Sequence[str] | None = None
    ) -> list[str]:
        """The distinct groups that have ready rows (of the one type of ``types``, for a
        worker of one type), by a skip scan of a ready index.

        A recursive query steps from one group to the next, each step one index probe,
        so the cost follows the number of groups rather than the number of ready jobs.
        """
        stmt = self.cached(
            ("ready_groups", t.jobs.name, by_type_key(types)),
            lambda: ready_group_keys(t, types),
        )
        return list(self.execute(conn, stmt).scalars())

    @abstractmethod
    def done_update(
        self,
        t: Tables,
        owner: str,
        rows: Sequence[tuple[int, int, str | None]],
        now: sa.ColumnElement[float],
    ) -> tuple[sa.Update, dict[str, Any]]:
        """Mark (id, token, result) rows done in one UPDATE, each fenced by its own lease
        (and ``state = 'running'``), setting :func:`done_values`.

        Returns the statement and its parameters: a statement whose text does not depend
        on the batch (the batch travels as one parameter), built once.
        """

    def mark_done(
        self,
        conn: Connection,
        t: Tables,
        owner: str,
        rows: Sequence[tuple[int, int, str | None]],
        now: sa.ColumnElement[float],
    ) -> tuple[int, Counter[int] | None]:
        """Run :meth:`done_update`; return the rows marked and, where the database can
        read them in the same statement, the batch's dependents (id -> edges from the
        batch), else None."""
        stmt, params = self.done_update(t, owner, rows, now)
        return self.execute(conn, stmt, params).rowcount, None

    # -- lists of ids -------------------------------------------------------------------

    def ids_match(
        self, column: sa.ColumnElement[Any], ids: Sequence[int]
    ) -> sa.ColumnElement[bool]:
        """``column IN (ids)``."""
        return column.in_(list(ids))

    def ids_in(self, column: sa.ColumnElement[Any], name: str) -> sa.ColumnElement[bool]:
        """``column IN (:name)`` for a statement built once: the list is bound at
        execution (``{name: ids}``)."""
        return column.in_(sa.bindparam(name, expanding=True))

    def pairs_match(
        self,
        id_column: sa.ColumnElement[Any],
        token_column: sa.ColumnElement[Any],
        pairs: Sequence[tuple[int, int]],
    ) -> sa.ColumnElement[bool]:
        """``(id, token) IN (pairs)``: each row fenced by its own lease token."""
        return sa.tuple_(id_column, token_column).in_(list(pairs))

    # -- time ---------------------------------------------------------------------------

    @abstractmethod
    def now(self) -> sa.ColumnElement[float]:
        """The database server's clock, in seconds since the Unix epoch."""

    # -- claim --------------------------------------------------------------------------

    @abstractmethod
    def claim(
        self, conn: Connection, t: Tables, req: ClaimRequest, now: sa.ColumnElement[float]
    ) -> list[ClaimedJob]:
        """Lease up to ``req.limit`` runnable jobs of one group inside the open transaction."""

    def claim_groups(
        self,
        conn: Connection,
        t: Tables,
        requests: Sequence[ClaimRequest],
        now: sa.ColumnElement[float],
    ) -> list[ClaimedJob]:
        """Claim for several groups in the open transaction (one claim per group here)."""
        claimed: list[ClaimedJob] = []
        for req in requests:
            claimed.extend(self.claim(conn, t, req, now))
        return claimed

    def claim_groups_recording(
        self,
        conn: Connection,
        t: Tables,
        requests: Sequence[ClaimRequest],
        now: sa.ColumnElement[float],
        progress: tuple[Sequence[tuple[str, float, int]], float, int],
    ) -> tuple[int, Callable[[], list[ClaimedJob]]] | None:
        """Claim as :meth:`claim_groups` and, in the same statement, store ``progress``
        (rows, vclock, seq, as :meth:`record_progress` takes them): the fair-share
        progress the plan expects if every planned job is claimed. None when the
        database cannot: the caller then records the progress itself.

        Returns the number of jobs claimed and a function that reads them: the rows
        need not be read before the commit that releases the gate row."""
        return None

    def ready_counts(
        self,
        conn: Connection,
        t: Tables,
        now: sa.ColumnElement[float],
        types: Sequence[str] | None,
        cap: int,
    ) -> dict[str, tuple[int, int]] | None:
        """Runnable (count up to ``cap``, largest weight) per group, read in one statement
        before the gate row is locked, where the database allows it. These counts only
        shape the plan (a claim skips rows taken since); the cap is decided from the
        in-flight counts, read after the lock (:meth:`flight_and_history`).

        None means: read everything after the lock with the portable statements.
        """
        return None

    def in_flight_counts(self, t: Tables) -> sa.Select[Any]:
        """(group_key, n, w) of the jobs in flight: a range of the in-flight index,
        bounded by the cap."""
        return in_flight_by_group(t, *IN_FLIGHT_STATES)

    def flight_and_history(
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
            counted = self.in_flight_counts(t).subquery("in_flight")
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
        stmt = self.cached(("flight_and_history", t.jobs.name, n), build)
        params: dict[str, Any] = (
            {"keys": list(groups)} if n is None else {f"k{i}": k for i, k in enumerate(groups)}
        )
        for r in self.execute(conn, stmt, params).all():
            if r[0]:
                history[r[1]] = (float(r[4]), int(r[5]))
            else:
                flight[r[1]] = (int(r[2]), int(r[3]))
        return flight, history

    def record_progress(
        self,
        conn: Connection,
        t: Tables,
        rows: Sequence[tuple[str, float, int]],
        known: set[str],
        vclock: float,
        seq: int,
    ) -> None:
        """Store the fair-share progress of a claim: (group, vfinish, served_seq) per
        group served (``known`` groups have a row already) and the gate's clock."""
        g = t.groups
        updates = [{"key": k, "vfinish": v, "served_seq": s} for k, v, s in rows if k in known]
        inserts = [
            {"group_key": k, "vfinish": v, "served_seq": s} for k, v, s in rows if k not in known
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
            self.cached(
                ("gate_progress", t.gate.name),
                lambda: sa.update(t.gate)
                .where(t.gate.c.id == GATE_ID)
                .values(vclock=sa.bindparam("vclock"), seq=sa.bindparam("seq")),
            ),
            {"vclock": vclock, "seq": seq},
        )

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


def driver_error(exc: BaseException) -> BaseException | None:
    """The driver's exception behind ``exc``: the one SQLAlchemy wrapped, or ``exc``
    itself when it reached readyq unwrapped (see :mod:`readyq.transient`)."""
    if isinstance(exc, sa.exc.DBAPIError):
        return exc.orig
    if isinstance(exc, sa.exc.SQLAlchemyError):
        return None
    return exc


def done_values(now: sa.ColumnElement[float], result: Any) -> dict[str, Any]:
    """The SET clause that ends an attempt done, with its result."""
    return {
        "state": "done",
        "result": result,
        "error": None,
        "finished_at": now,
        "lease_expires": None,
        "deadline": None,
        "updated_at": now,
    }


def claimed_from_row(row: Any, *, before_update: bool = False) -> ClaimedJob:
    """Build a ClaimedJob from a row of the claim's columns (``claim_columns``).

    ``before_update`` says the row was read before the claim's UPDATE (MySQL), so the
    attempt and the fencing token are one more than read.
    """
    if not before_update:
        return ClaimedJob._make(row)
    id_, type_, args, attempts, max_attempts, token, group, parent, timeout = row
    return ClaimedJob(
        id_, type_, args, int(attempts) + 1, max_attempts, int(token) + 1, group, parent,
        timeout,
    )


def claim_head(
    t: Tables,
    now: sa.ColumnElement[float],
    group: str | sa.ColumnElement[str],
    types: Sequence[str] | None,
    limit: sa.ColumnElement[int],
    *columns: sa.ColumnElement[Any],
    part: Part = as_is,
) -> sa.Select[Any]:
    """``columns`` of a group's first ``limit`` runnable jobs of ``types``, in claim
    order. For a worker of a few types, the merge of one read per type
    (:func:`readyq.sql.ready.merged_head`), ``part`` applied to each read; otherwise one
    read, which the caller completes (a row lock, an index hint)."""
    many = merged_types(types)
    if many is not None:
        return merged_head(t, now, group, many, limit, *columns, part=part)
    return (
        sa.select(*columns)
        .where(runnable(t, now, group=group, types=types))
        .order_by(*claim_order(t, types))
        .limit(limit)
    )


def group_heads(
    t: Tables,
    now: sa.ColumnElement[float],
    types: Sequence[str] | None,
    n: int,
    *columns: sa.ColumnElement[Any],
) -> list[sa.Select[Any]]:
    """One select per group of a multi-group claim, in claim order and limited: group
    ``i`` and its limit are bound as ``c_g{i}`` and ``c_n{i}`` (see
    :func:`group_head_params`)."""
    return [
        claim_head(
            t,
            now,
            sa.bindparam(f"c_g{i}", type_=t.jobs.c.group_key.type),
            types,
            sa.bindparam(f"c_n{i}", type_=sa.Integer),
            *columns,
        )
        for i in range(n)
    ]


def group_head_params(requests: Sequence[ClaimRequest]) -> dict[str, Any]:
    """The parameters of :func:`group_heads` for ``requests``, with the first request's
    own (owner, lease length, ...)."""
    params = requests[0].params()
    for i, req in enumerate(requests):
        params[f"c_g{i}"] = req.group
        params[f"c_n{i}"] = req.limit
    return params


def claim_columns(t: Tables) -> list[sa.Column[Any]]:
    j = t.jobs
    return [
        j.c.id,
        j.c.type,
        j.c.args,
        j.c.attempts,
        j.c.max_attempts,
        j.c.lease_token,
        j.c.group_key,
        j.c.parent_id,
        j.c.timeout,
    ]


def lease_values(t: Tables, req: ClaimRequest, now: sa.ColumnElement[float]) -> dict[str, Any]:
    """The SET clause of a claim: a new lease, a new fencing token, one more attempt.

    The owner and the lease length are bound parameters (``req.params()``); only the
    start policies shape the SQL."""
    j = t.jobs
    values: dict[str, Any] = {
        "state": "leased",
        "lease_owner": OWNER,
        "lease_token": j.c.lease_token + 1,
        "attempts": j.c.attempts + 1,
        "lease_expires": now + TTL,
        "heartbeat_at": now,
        "updated_at": now,
        "cancel_requested": False,
    }
    if req.start is not None:
        timeouts = {k: v[0] for k, v in req.start.items() if v[0] is not None}
        retries = {k: v[1] for k, v in req.start.items()}
        by_type: Any = sa.case(timeouts, value=j.c.type, else_=sa.null()) if timeouts else sa.null()
        values.update(
            state="running",
            started_at=now,
            deadline=now + sa.func.coalesce(j.c.timeout, by_type),
            retry_on_timeout=sa.case(retries, value=j.c.type, else_=sa.true())
            if retries
            else sa.true(),
        )
    return values
