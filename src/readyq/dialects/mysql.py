"""MySQL 8.0.1+ and MariaDB 10.6+ (InnoDB): lock with SELECT, then update by key.

Deviations and limits:

* Every readyq transaction runs at READ COMMITTED. Under the default REPEATABLE READ,
  locking reads take gap locks on every index record they scan and plain reads see a
  snapshot older than rows committed meanwhile.
* The lock is always the exclusive ``FOR UPDATE SKIP LOCKED``. SQLAlchemy's
  ``with_for_update(read=True, skip_locked=True)`` renders ``LOCK IN SHARE MODE SKIP
  LOCKED``, which MySQL rejects (SQLAlchemy issue #10134), and a shared lock would not
  make a claim exclusive anyway.
* There is no ``UPDATE ... RETURNING`` and ``LIMIT`` is refused inside ``IN (subquery)``,
  so the claim is two statements in one transaction: select and lock the rows, then
  update them by primary key (they stay locked, so nothing can change them in between).
* ``SKIP LOCKED`` arrived in MySQL 8.0.1 and MariaDB 10.6; older servers are refused.
  SQLAlchemy names a MariaDB server reached through ``mysql+pymysql://`` "mysql", so the
  flavour is read from the server version after connecting, never from the URL.
* Error 1213 (deadlock) rolls back the whole transaction, 1205 (lock wait timeout) only
  the statement; readyq rolls back and retries the whole unit for both.
"""

from __future__ import annotations

import json
import math
import socket
from collections.abc import Sequence
from functools import partial
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.engine import Connection
from sqlalchemy.sql.compiler import SQLCompiler

from readyq.dialects.base import (
    PER_GROUP_PARAMS,
    Dialect,
    driver_error,
)
from readyq.dialects.records import (
    Capabilities,
    ClaimRequest,
    Progress,
)
from readyq.errors import UnsupportedDatabase
from readyq.model import ClaimedJob
from readyq.schema import (
    Tables,
    TableTraits,
    costed_index_name,
    in_flight_index_name,
    ready_type_index_name,
)
from readyq.sql.claims import (
    GROUP,
    LIMIT,
    claim_columns,
    claimed_from_row,
    gate_clock_update,
    group_head_params,
    group_heads,
    lease_values,
)
from readyq.sql.leases import (
    done_values,
)
from readyq.sql.ready import (
    by_type_key,
    claim_sort_keys,
    merged_types,
    ready_of_type,
    runnable,
    runnable_head,
    single_type,
    type_head,
    values_in,
)

# TCP settings of readyq's own PyMySQL connections, as libpq's for PostgreSQL: keepalive
# probes after 10 s of silence, every 5 s, 3 unanswered ones end the connection; data
# unacknowledged for 20 s ends it too. Without them a connection whose server went away
# while a packet was lost (the server's reset dropped by a cut network) waits for its
# reply for ever, the kernel's keepalive starting after two hours.
TCP_KEEPALIVE = {"TCP_KEEPIDLE": 10, "TCP_KEEPINTVL": 5, "TCP_KEEPCNT": 3}
TCP_USER_TIMEOUT_MS = 20_000


def network_socket(host: str, port: int, timeout: float | None) -> socket.socket:
    """A TCP connection to ``host:port`` with the settings above (those the platform
    has)."""
    sock = socket.create_connection((host, port), timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in TCP_KEEPALIVE.items():
        if hasattr(socket, name):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
    if hasattr(socket, "TCP_USER_TIMEOUT"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, TCP_USER_TIMEOUT_MS)
    return sock


def _connect_pymysql(dialect: Any, record: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
    """SQLAlchemy's ``do_connect`` for PyMySQL over TCP: the driver's own connection,
    opened on a socket made by :func:`network_socket` (``Connection.connect(sock)``)."""
    if cparams.get("unix_socket") or cparams.get("defer_connect"):
        return None  # the driver connects as usual
    conn = dialect.loaded_dbapi.connect(*cargs, **cparams, defer_connect=True)
    timeout = cparams.get("connect_timeout", 10)
    conn.connect(network_socket(cparams.get("host") or "localhost",
                                int(cparams.get("port") or 3306), timeout))
    return conn


MYSQL_MIN = (8, 0, 1)
# Up to this many groups, a claim reads the groups and their counts in one statement
# (MySQLDialect._known_group_counts); beyond, step by step.
KNOWN_GROUPS_MAX = 32
MARIADB_MIN = (10, 6)


def check_version(is_mariadb: bool, version: tuple[int, ...]) -> None:
    """Refuse servers without ``SKIP LOCKED`` with a message that names the version."""
    found = ".".join(map(str, version)) or "unknown"
    if is_mariadb and tuple(version[:2]) < MARIADB_MIN:
        raise UnsupportedDatabase(
            f"readyq needs MariaDB 10.6 or newer (FOR UPDATE SKIP LOCKED); this server is "
            f"MariaDB {found}"
        )
    if not is_mariadb and tuple(version[:3]) < MYSQL_MIN:
        raise UnsupportedDatabase(
            f"readyq needs MySQL 8.0.1 or newer (FOR UPDATE SKIP LOCKED); this server is "
            f"MySQL {found}"
        )


def _group_probe(
    t: Tables, after: sa.ColumnElement[str] | None, types: Sequence[str] | None = None
) -> sa.Select[Any]:
    """The first group with ready rows (after ``after``): one probe of the ready index,
    the index of ready jobs by type for a worker of one type."""
    j = t.jobs
    many = merged_types(types)
    if many is not None:
        # The least of each type's first group (after ``after``).
        firsts = [
            sa.select(head.c.group_key)
            for head in (
                _group_probe(t, after, [type_]).subquery(f"rq_type{i}")
                for i, type_ in enumerate(many)
            )
        ]
        merged = sa.union_all(*firsts).subquery("rq_merged")
        return sa.select(sa.func.min(merged.c.group_key))
    only = single_type(types)
    if only is None:
        stmt = sa.select(j.c.group_key).where(j.c.state == "ready")
        order: tuple[sa.ColumnElement[Any], ...] = (j.c.state, j.c.group_key)
    else:
        stmt = _by_type(sa.select(j.c.group_key).where(ready_of_type(t, only)), t, types)
        # Not ``ready_type`` in the order (a constant here): MariaDB sorts when the
        # ORDER BY names the virtual column, though the index is in that order.
        order = (j.c.group_key,)
    if after is not None:
        stmt = stmt.where(j.c.group_key > after)
    return stmt.order_by(*order).limit(1)


def _by_type(
    stmt: sa.Select[Any], t: Tables, types: Sequence[str] | None
) -> sa.Select[Any]:
    """``FORCE INDEX`` of ready jobs by type on a read of the ready jobs of one type, or
    of a few (:func:`readyq.sql.ready.merged_types`).

    The optimizer's statistics of the ``ready_type`` index may date from a time when the
    column was NULL on every row: it then takes a type's ready jobs for most of the
    table and reads the table whole and sorts it, where the index holds each group's
    jobs of the type in claim order."""
    if by_type_key(types) is None:
        return stmt
    return stmt.with_hint(t.jobs, f"FORCE INDEX ({ready_type_index_name(t.jobs.name)})")


def _counts_and_successors(
    t: Tables, now: sa.ColumnElement[float], types: Sequence[str] | None, n: int,
    costed: bool = False,
) -> sa.CompoundSelect[Any] | sa.Select[Any]:
    """Rows (kind, i, group, n, w): kind 0 is a probe (the first group for i = -1, the
    group after group i otherwise), kind 1 group i's runnable count up to ``:cap`` and
    its largest weight (with ``costed``, jobs that take resources counted too). Groups
    are bound as ``:g0`` .. ``:g{n-1}``."""
    cap = sa.bindparam("cap", type_=sa.Integer)
    none = sa.null()
    # Scalar subqueries: a probe that finds nothing still yields its row, with NULL.
    parts: list[Any] = [
        sa.select(sa.literal(0), sa.literal(-1), _group_probe(t, None, types).scalar_subquery(),
                  none, none)
    ]
    for i in range(n):
        key = sa.bindparam(f"g{i}", type_=t.jobs.c.group_key.type)
        parts.append(sa.select(sa.literal(0), sa.literal(i),
                               _group_probe(t, key, types).scalar_subquery(), none, none))
        head = _by_type(runnable_head(t, now, key, types, cap, costed), t, types).subquery()
        parts.append(
            sa.select(sa.literal(1), sa.literal(i), none, sa.func.count(),
                      sa.func.max(head.c.weight)).select_from(head)
        )
    return sa.union_all(*parts) if n else parts[0]


def _type_heads(
    t: Tables,
    now: sa.ColumnElement[float],
    group: sa.ColumnElement[str],
    types: Sequence[str] | None,
    limit: sa.ColumnElement[int],
) -> list[sa.Select[Any]]:
    """A group's first ``limit`` runnable jobs of each of a few types, one locking read
    per type through the index of ready jobs by type, each row with its priority: the
    claim's columns, then ``rq_priority``. :func:`_merge` keeps ``limit`` of them in
    claim order; the others stay locked until the claim commits (every other claim
    waits for the gate row meanwhile)."""
    priority = t.jobs.c.priority.label("rq_priority")
    return [
        _by_type(
            type_head(t, now, group, type_, limit, *claim_columns(t), priority), t, [type_]
        ).with_for_update(skip_locked=True)
        for type_ in types or ()
    ]


def _merge(rows: Sequence[Any], limits: dict[str, int]) -> list[tuple[Any, ...]]:
    """The rows of :func:`_type_heads` that a claim takes: per group, its limit of them
    in claim order (higher priority first, then by id), without the priority."""
    taken: dict[str, int] = {}
    out: list[tuple[Any, ...]] = []
    for row in sorted(rows, key=lambda r: (-r.rq_priority, r.id)):
        if taken.get(row.group_key, 0) < limits[row.group_key]:
            taken[row.group_key] = taken.get(row.group_key, 0) + 1
            out.append(tuple(row)[:-1])
    return out


class MySQLDialect(Dialect):
    name: ClassVar[str] = "mysql"
    capabilities: ClassVar[Capabilities] = Capabilities(
        skip_locked=True, returning=False, partial_index=False, listen_notify=False, row_locks=True
    )
    table_traits: ClassVar[TableTraits] = TableTraits(
        partial_indexes=False, named_primary_keys=False
    )
    driver_hint: ClassVar[str] = (
        "use mysql+pymysql://... (async: mysql+asyncmy://) and pip install 'readyq[mysql]'"
    )
    # 1213 deadlock, 1205 lock wait timeout, 1020 record changed (MariaDB 11.6+ snapshot
    # isolation), 2006/2013 server gone / lost connection, 1927 connection killed,
    # 1053 server shutdown.
    retryable_codes: ClassVar[frozenset[object]] = frozenset(
        {1213, 1205, 1020, 2006, 2013, 1927, 1053}
    )
    missing_table_codes: ClassVar[frozenset[object]] = frozenset({1146})
    # 1054 unknown column, 1064 syntax error, 1146 no such table, 1305 no such function.
    permanent_codes: ClassVar[frozenset[object]] = frozenset({1054, 1064, 1146, 1305})
    # 1048 NULL in a NOT NULL column, 1264 out of range, 1292 truncated wrong value,
    # 1300 invalid character string, 1366 incorrect string value (for the column's
    # character set), 1367 illegal value, 1406 data too long, 3140 invalid JSON,
    # 3819 (MySQL) and 4025 (MariaDB) a CHECK constraint failed.
    refusal_codes: ClassVar[frozenset[object]] = frozenset(
        {1048, 1264, 1292, 1300, 1366, 1367, 1406, 3140, 3819, 4025}
    )

    def __init__(self, server_version: tuple[int, ...] = (), *, is_mariadb: bool = False):
        super().__init__(server_version)
        self.is_mariadb = is_mariadb
        # jobs table -> the groups with ready rows that the last skip scan found.
        self._known_groups: dict[tuple[str, tuple[str, ...] | None], tuple[str, ...]] = {}

    @property
    def database(self) -> str:
        return "mariadb" if self.is_mariadb else "mysql"

    @classmethod
    def engine_options(cls, driver: str = "") -> dict[str, Any]:
        return {"isolation_level": "READ COMMITTED"}

    @classmethod
    def session_statements(
        cls, sa_dialect: Any, idle_seconds: float | None, lock_seconds: float | None = None
    ) -> list[str]:
        """``innodb_lock_wait_timeout`` lowered to ``lock_seconds`` (never above the
        server's; whole seconds), so that a lock wait fails with 1205 and is retried
        rather than hanging; on MariaDB (10.3+) also ``idle_transaction_timeout``, which
        ends a session idle inside a transaction. MySQL 8 has no such timeout: a frozen
        claim holds the gate until its process resumes or its connection dies."""
        statements = []
        wait = lock_seconds or idle_seconds
        if wait:
            statements.append(
                "SET SESSION innodb_lock_wait_timeout = "
                f"LEAST(@@GLOBAL.innodb_lock_wait_timeout, {max(1, math.ceil(wait))})"
            )
        if idle_seconds and getattr(sa_dialect, "is_mariadb", False):
            whole = max(1, math.ceil(idle_seconds))
            statements.append(f"SET SESSION idle_transaction_timeout = {whole}")
        return statements

    def prepare_engine(self, engine: sa.Engine, *, owned: bool) -> sa.Engine:
        # readyq's own engine is created at READ COMMITTED. A user's engine keeps its
        # default for the user; readyq's connections switch on checkout (SQLAlchemy
        # restores the level on check-in).
        if owned:
            if engine.dialect.driver == "pymysql" and not event.contains(
                engine, "do_connect", _connect_pymysql
            ):
                event.listen(engine, "do_connect", _connect_pymysql)
                # The connections made before (the one that found the dialect, back
                # in the pool) had none of this: closed, and a new pool.
                engine.dispose()
            return engine
        return engine.execution_options(isolation_level="READ COMMITTED")

    def check_server(self) -> None:
        check_version(self.is_mariadb, self.server_version)

    def error_code(self, exc: BaseException) -> object:
        args = getattr(driver_error(exc), "args", ())
        return args[0] if args and isinstance(args[0], int) else None

    def ready_groups(
        self, conn: Connection, t: Tables, types: Sequence[str] | None = None
    ) -> list[str]:
        """The skip scan as a loop of ``ORDER BY group_key LIMIT 1`` probes.

        Inside a recursive CTE MariaDB probes the index by ``state`` alone and filters
        ``group_key > k`` row by row; a plain query uses the (state, group_key) range
        (or, for a worker of one type, the (ready_type, group_key) range). The groups
        found are remembered for :meth:`_known_group_counts`.
        """
        j = t.jobs
        only = by_type_key(types)
        first = self.cached(
            ("ready_group_first", j.name, only), lambda: _group_probe(t, None, types)
        )
        step = self.cached(
            ("ready_group_next", j.name, only),
            lambda: _group_probe(t, sa.bindparam("after", type_=sa.String), types),
        )
        keys: list[str] = []
        while True:
            if keys:
                key = conn.execute(step, {"after": keys[-1]}).scalar()
            else:
                key = conn.execute(first).scalar()
            if key is None:
                self._known_groups[(j.name, only)] = tuple(keys)
                return keys
            keys.append(key)

    def ready_by_type_read(
        self, stmt: sa.Select[Any], t: Tables, types: Sequence[str] | None
    ) -> sa.Select[Any]:
        """Held to the index of ready jobs by type (:func:`_by_type` says why)."""
        return _by_type(stmt, t, types)

    def in_flight_read(self, stmt: sa.Select[Any], t: Tables) -> sa.Select[Any]:
        """A read of the jobs in flight, held to the (state, lease_expires) index.

        Left to itself, the optimizer estimates the ``state IN ('leased', 'running')``
        range from an index that churns with every claim and finish, and on a table of
        20,000 rows it was seen to scan the whole table, or to read 3,200 entries of
        another index, for the hundred-odd jobs in flight.
        """
        index = in_flight_index_name(t.jobs.name)
        return stmt.with_hint(t.jobs, f"FORCE INDEX ({index})")

    def costed_probe(
        self, t: Tables, types: Sequence[str] | None
    ) -> sa.Select[Any] | sa.TextualSelect:
        """Held to the index of ``costed_type``, which holds a few rows or none: statistics
        taken while it held many must not turn the probe into a scan."""
        probe = super().costed_probe(t, types)
        assert isinstance(probe, sa.Select)
        return probe.with_hint(t.jobs, f"FORCE INDEX ({costed_index_name(t.jobs.name)})")

    def first_ready_type(
        self, t: Tables, types: Sequence[str], *conds: sa.ColumnElement[bool]
    ) -> sa.ScalarSelect[Any]:
        """``SELECT ready_type ... FORCE INDEX (<ready by type>) ... LIMIT 1``.

        ``min()`` is not MySQL's shortcut here once another condition (``run_after``)
        joins the type: with every ready job of one type, MariaDB read the whole table
        to find the least. Bound to the index by type, the first entry of the types'
        range that meets the conditions answers, and a type with nothing ready reads
        nothing."""
        j = t.jobs
        index = ready_type_index_name(j.name)
        return (
            sa.select(j.c.ready_type)
            .where(values_in(j.c.ready_type, types), *conds)
            .with_hint(j, f"FORCE INDEX ({index})")
            .limit(1)
            .scalar_subquery()
        )

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
        """Without the history, :meth:`_known_group_counts` when it can answer; else the
        portable statements (whose skip scan, :meth:`ready_groups`, learns the groups)."""
        if not with_history:
            counts = self._known_group_counts(conn, t, now, types, cap, costed)
            if counts is not None:
                return counts, {}
        return super().runnable_counts(
            conn, t, now, types, cap, with_history=with_history, costed=costed, groups=groups
        )

    def _known_group_counts(
        self,
        conn: Connection,
        t: Tables,
        now: sa.ColumnElement[float],
        types: Sequence[str] | None,
        cap: int,
        costed: bool = False,
    ) -> dict[str, tuple[int, int]] | None:
        """The groups and their runnable counts in one statement, from the groups the
        last skip scan found (the same groups whether or not ``costed``).

        The statement asks, for each of those groups, for its runnable count (up to the
        cap) and for the next group after it in the ready index, plus the first group.
        Following the successors from the first group walks every group that has ready
        rows; if the walk stays within the known groups, it is the skip scan's answer
        and the counts are right. A group it does not know (or no scan yet, or too many
        groups) returns None: the caller then takes the loop of probes, which learns the
        new set.
        """
        only = by_type_key(types)
        known = self._known_groups.get((t.jobs.name, only))
        if known is None or len(known) > KNOWN_GROUPS_MAX:
            return None
        n = len(known)
        shape = None if types is None else tuple(types)
        stmt = self.cached(
            ("ready_counts", t.jobs.name, shape, n, costed),
            lambda: _counts_and_successors(t, now, types, n, costed),
        )
        params: dict[str, Any] = {f"g{i}": key for i, key in enumerate(known)}
        params["cap"] = cap
        first: str | None = None
        after: dict[str, str | None] = {}
        counts: dict[str, tuple[int, int]] = {}
        for kind, i, key, count, weight in conn.execute(stmt, params):
            if kind == 0:
                if i < 0:
                    first = key
                else:
                    after[known[i]] = key
            elif count:
                counts[known[i]] = (int(count), int(weight))
        walked: list[str] = []
        key = first
        while key is not None:
            if key not in after:
                return None  # a group the statement did not ask about
            walked.append(key)
            key = after[key]
        if len(walked) != n:
            self._known_groups[(t.jobs.name, only)] = tuple(walked)
        return {k: counts[k] for k in walked if k in counts}

    def now(self) -> sa.ColumnElement[float]:
        # UNIX_TIMESTAMP() without an argument does not depend on the session time zone;
        # NOW(6) adds the microseconds of the same statement-start instant.
        return sa.func.unix_timestamp() + sa.func.microsecond(sa.func.now(6)) / 1000000.0

    def claim_select(
        self, t: Tables, req: ClaimRequest, now: sa.ColumnElement[float]
    ) -> sa.Select[Any] | sa.CompoundSelect[Any]:
        """``SELECT ... LIMIT n FOR UPDATE SKIP LOCKED``: exclusive, never a shared lock.

        For a worker of a few types, one such read per type (:func:`_type_heads`), to be
        merged by :meth:`_merge`. Built once per shape; group and limit are bound
        (``req.params()``)."""

        def build() -> sa.Select[Any] | sa.CompoundSelect[Any]:
            if merged_types(req.types) is not None:
                return sa.union_all(*_type_heads(t, now, GROUP, req.types, LIMIT))
            return _by_type(
                sa.select(*claim_columns(t))
                .where(runnable(t, now, group=GROUP, types=req.types))
                .order_by(*claim_sort_keys(t, req.types))
                .limit(LIMIT)
                .with_for_update(skip_locked=True),
                t,
                req.types,
            )

        return self.cached(("claim_select", t.jobs.name, req.shape()), build)

    def claim_jobs(
        self,
        conn: Connection,
        t: Tables,
        requests: Sequence[ClaimRequest],
        now: sa.ColumnElement[float],
    ) -> list[ClaimedJob]:
        """No ``UPDATE ... RETURNING``: the rows are selected and locked, then leased by
        primary key in a second statement (:meth:`_claim_one`, :meth:`_claim_union`)."""
        if len(requests) == 1:
            return self._claim_one(conn, t, requests[0], now)
        return self._claim_union(conn, t, requests, now)

    def _claim_one(
        self, conn: Connection, t: Tables, req: ClaimRequest, now: sa.ColumnElement[float]
    ) -> list[ClaimedJob]:
        rows: Sequence[Any] = conn.execute(self.claim_select(t, req, now), req.params()).all()
        if merged_types(req.types) is not None:
            rows = _merge(rows, {req.group: req.limit})
        if not rows:
            return []
        return self._lease(conn, t, req, now, rows)

    def _claim_union(
        self,
        conn: Connection,
        t: Tables,
        requests: Sequence[ClaimRequest],
        now: sa.ColumnElement[float],
    ) -> list[ClaimedJob]:
        """Every group's locking SELECT in one ``UNION ALL`` of parenthesized
        ``(SELECT ... LIMIT n FOR UPDATE SKIP LOCKED)``, then one UPDATE by primary key
        for all of them: two round trips whatever the number of groups."""
        first = requests[0]
        n = len(requests)
        merged = merged_types(first.types) is not None

        def build() -> sa.CompoundSelect[Any]:
            if merged:
                return sa.union_all(
                    *(
                        head
                        for i in range(n)
                        for head in _type_heads(
                            t, now,
                            sa.bindparam(f"c_g{i}", type_=t.jobs.c.group_key.type),
                            first.types,
                            sa.bindparam(f"c_n{i}", type_=sa.Integer),
                        )
                    )
                )
            heads = group_heads(t, now, first.types, n, *claim_columns(t))
            return sa.union_all(
                *(_by_type(h, t, first.types).with_for_update(skip_locked=True) for h in heads)
            )

        select = self.cached(("claim_union", t.jobs.name, first.shape(), n), build)
        rows: Sequence[Any] = conn.execute(select, group_head_params(requests)).all()
        if merged:
            rows = _merge(rows, {r.group: r.limit for r in requests})
        if not rows:
            return []
        return self._lease(conn, t, first, now, rows)

    def _lease(
        self, conn: Connection, t: Tables, req: ClaimRequest, now: sa.ColumnElement[float],
        rows: Sequence[Any],
    ) -> list[ClaimedJob]:
        """Lease the rows a locking SELECT returned, by primary key."""
        j = t.jobs
        ids = [row[0] for row in rows]
        update = self.cached(
            ("claim_update", j.name, req.shape()),
            lambda: sa.update(j)
            .where(j.c.id.in_(sa.bindparam("ids", expanding=True)), j.c.state == "ready")
            .values(**lease_values(t, req, now)),
        )
        result = conn.execute(update, {**req.params(), "ids": ids})
        if result.rowcount != len(ids):
            raise RuntimeError(  # the rows are locked by this transaction: cannot happen
                f"claim updated {result.rowcount} of {len(ids)} locked rows"
            )
        return [claimed_from_row(row, before_update=True, req=req) for row in rows]

    def record_progress(self, conn: Connection, t: Tables, progress: Progress) -> None:
        """A multi-row ``INSERT ... ON DUPLICATE KEY UPDATE`` per ``PER_GROUP_PARAMS``
        groups (one for a plan of that many groups or fewer), then the gate's UPDATE."""
        g = t.groups
        rows = progress.rows
        for start in range(0, len(rows), PER_GROUP_PARAMS):
            chunk = rows[start : start + PER_GROUP_PARAMS]
            n = len(chunk)

            def build(n: int = n) -> SQLCompiler:
                # SQLAlchemy cannot cache a statement with ON DUPLICATE KEY UPDATE: built
                # as a construct it is compiled again at every claim (about 1 ms on
                # MariaDB). Compiled here once per number of groups, for this server
                # (VALUES() or the row alias of MySQL 8.0.20+) and this driver's
                # parameter style, and run as driver SQL, which keeps the engine's
                # events and error handling.
                ins = mysql_insert(g).values(
                    [
                        {
                            "group_key": sa.bindparam(f"k{i}", type_=g.c.group_key.type),
                            "vfinish": sa.bindparam(f"v{i}", type_=g.c.vfinish.type),
                            "served_seq": sa.bindparam(f"s{i}", type_=g.c.served_seq.type),
                        }
                        for i in range(n)
                    ]
                )
                upsert = ins.on_duplicate_key_update(
                    vfinish=ins.inserted.vfinish, served_seq=ins.inserted.served_seq
                )
                compiled = upsert.compile(dialect=conn.dialect)
                assert isinstance(compiled, SQLCompiler)
                return compiled

            compiled = self.cached(("progress_upsert", g.name, n), build)
            params: dict[str, Any] = {}
            for i, (k, v, q) in enumerate(chunk):
                params[f"k{i}"], params[f"v{i}"], params[f"s{i}"] = k, float(v), int(q)
            if compiled.positiontup is not None:
                conn.exec_driver_sql(
                    compiled.string, tuple(params[name] for name in compiled.positiontup)
                )
            else:
                conn.exec_driver_sql(compiled.string, params)
        self.execute(
            conn,
            self.cached(("gate_progress", t.gate.name), partial(gate_clock_update, t)),
            {"vclock": progress.vclock, "seq": progress.seq},
        )

    def done_update(
        self,
        t: Tables,
        owner: str,
        rows: Sequence[tuple[int, int, str | None]],
        now: sa.ColumnElement[float],
    ) -> tuple[sa.Update, dict[str, Any]]:
        """A multi-table ``UPDATE jobs, JSON_TABLE(:batch ...) AS batch``: the batch
        travels as one JSON array of [id, token, result] (JSON_TABLE: MySQL 8.0.4+,
        MariaDB 10.6+, both within readyq's version floor), each row joined by primary
        key and fenced by its token. The table function is joined directly: wrapped in a
        derived table, the same update takes about 15% longer on MariaDB."""

        def build() -> sa.Update:
            j = t.jobs
            # literal_column(): SQLAlchemy has no construct for JSON_TABLE's COLUMNS
            # clause; it is written as the function's second argument.
            batch = (
                sa.func.json_table(
                    sa.bindparam("d_batch", type_=sa.Text),
                    sa.literal_column(
                        "'$[*]' COLUMNS (id BIGINT PATH '$[0]', token BIGINT PATH '$[1]', "
                        "result LONGTEXT CHARACTER SET utf8mb4 PATH '$[2]')"
                    ),
                )
                .table_valued(
                    sa.column("id", sa.BigInteger),
                    sa.column("token", sa.BigInteger),
                    sa.column("result", sa.Text),
                    name="batch",
                )
            )
            return (
                sa.update(j)
                .where(
                    j.c.id == batch.c.id,
                    j.c.lease_token == batch.c.token,
                    j.c.lease_owner == sa.bindparam("d_owner", type_=sa.String),
                    j.c.state == "running",
                )
                .values(done_values(now, batch.c.result))
            )

        params = {"d_batch": json.dumps([list(r) for r in rows]), "d_owner": owner}
        return self.cached(("done", t.jobs.name), build), params
