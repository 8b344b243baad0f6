"""PostgreSQL (12+): one claim statement, a CTE locked with FOR UPDATE SKIP LOCKED.

Deviations and limits:

* The claim is ``WITH c AS MATERIALIZED (SELECT ... LIMIT n FOR UPDATE SKIP LOCKED)
  UPDATE ... FROM c RETURNING ...``. An ``UPDATE ... WHERE id IN (SELECT ... LIMIT n FOR
  UPDATE SKIP LOCKED)`` may be planned as a join and lock or update more than ``n`` rows
  (PostgreSQL bug #15715); a materialized CTE is evaluated once.
* Transactions run at READ COMMITTED, so every statement sees rows committed before it.
* The clock is ``clock_timestamp()``: wall time on the server, not the start of the
  transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, ClassVar, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.dialects.postgresql.base import PGDialect
from sqlalchemy.engine import Connection

from readyq.dialects.base import (
    Dialect,
    ReadyNotifier,
)
from readyq.dialects.postgresql_listener import PgListener, channel_for, conninfo_for
from readyq.dialects.records import (
    Capabilities,
    ClaimReceipt,
    ClaimRequest,
    MarkedDone,
    Progress,
    dependents_from,
)
from readyq.errors import ConfigurationError, UnsupportedDatabase
from readyq.model import ClaimedJob
from readyq.schema import (
    BULK_COLUMNS,
    BULK_CONSTANTS,
    GATE_ID,
    INSERT_COLUMNS,
    ROW_KEYS,
    Tables,
    TableTraits,
)
from readyq.sql.claims import (
    GROUP,
    LIMIT,
    claim_columns,
    claim_head,
    claimed_rows,
    lease_values,
)
from readyq.sql.jobs import release_dependents
from readyq.sql.leases import (
    done_values,
)
from readyq.sql.ready import (
    first_ready_type,
    merged_types,
    ready_group_keys,
    ready_group_walk,
    run_after_passed,
    runnable_head,
)
from readyq.sql.resource_state import (
    state_row,
)

# Quotes a table's name in the SQL written out as text (as copy_jobs does with the
# connection's own preparer).
_PREPARER = cast(Any, PGDialect)().identifier_preparer


def array_member(column: sa.ColumnElement[str], values: Sequence[str]) -> sa.ColumnElement[bool]:
    """``column = ANY(ARRAY[:v1, :v2 ...])``, one bound parameter per value.

    Unlike ``IN`` of one value, which PostgreSQL turns into an equality, the planner
    treats the array as no constant: the column is not dropped from a sort order, and a
    generic plan does not take any row of a scan for the answer to a ``min()``."""
    return column == sa.any_(
        postgresql.array([sa.bindparam(None, value, type_=column.type) for value in values])
    )



# libpq's connection parameters for a network that may fail (see engine_options).
LIBPQ_NETWORK = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 20_000,
}

class _Notifier:
    """``pg_notify`` on a prefix's channel (see :mod:`readyq.dialects.postgresql_listener`)."""

    def __init__(self, prefix: str) -> None:
        channel = channel_for(prefix)
        # text(): the channel's name ends with a hash of the schema, evaluated by the
        # server, so that queues of one prefix in two schemas do not wake each other.
        self._stmt = sa.text(
            "SELECT pg_notify(:channel || '_' || left(md5(current_schema()), 8), '')"
        ).bindparams(channel=channel)
        self.column: sa.ColumnElement[Any] = sa.func.pg_notify(
            sa.func.concat(
                sa.literal(channel, sa.Text), "_",
                sa.func.left(sa.func.md5(sa.func.current_schema()), 8),
            ),
            "",
        ).label("notified")

    def send(self, conn: Connection) -> None:
        conn.execute(self._stmt)


def _locked_head(
    t: Tables,
    now: sa.ColumnElement[float],
    group: str | sa.ColumnElement[str],
    types: Sequence[str] | None,
    limit: sa.ColumnElement[int],
) -> sa.Select[Any]:
    """The ids of a group's first ``limit`` runnable jobs, locked (``FOR UPDATE SKIP
    LOCKED``). For a worker of a few types each type's read locks its own rows, as
    ``FOR UPDATE`` cannot apply to a union: up to ``limit`` per type are locked and
    ``limit`` of them merged. The others stay locked until the claim commits, while
    every other claim waits for the gate row; a cancel or an admin write waits that
    long for them."""
    j = t.jobs
    if merged_types(types) is not None:
        return claim_head(
            t, now, group, types, limit, j.c.id,
            part=lambda stmt, type_: stmt.with_for_update(skip_locked=True),
        )
    return claim_head(t, now, group, types, limit, j.c.id).with_for_update(skip_locked=True)


class PostgresDialect(Dialect):
    name: ClassVar[str] = "postgresql"
    capabilities: ClassVar[Capabilities] = Capabilities(
        skip_locked=True, returning=True, partial_index=True, listen_notify=True,
        row_locks=True, cheap_autocommit=True,
    )
    table_traits: ClassVar[TableTraits] = TableTraits(type_test=array_member)
    driver_hint: ClassVar[str] = (
        "use postgresql+psycopg://... (async: postgresql+asyncpg:// or "
        "postgresql+psycopg://) and pip install 'readyq[postgresql]'"
    )
    # serialization_failure, deadlock_detected, lock_not_available, admin/crash shutdown,
    # cannot_connect_now (server starting up).
    retryable_codes: ClassVar[frozenset[object]] = frozenset(
        {"40001", "40P01", "55P03", "57P01", "57P02", "57P03"}
    )
    missing_table_codes: ClassVar[frozenset[object]] = frozenset({"42P01"})
    # syntax_error, undefined_column, undefined_function, undefined_object,
    # undefined_table, datatype_mismatch.
    permanent_codes: ClassVar[frozenset[object]] = frozenset(
        {"42601", "42703", "42883", "42704", "42P01", "42804"}
    )

    # NOT NULL and CHECK violations: a value a constraint refuses.
    refusal_codes: ClassVar[frozenset[object]] = frozenset({"23502", "23514"})

    def is_refusal(self, exc: BaseException) -> bool:
        """SQLSTATE class 22, data exception: a value the server cannot take (text with
        NUL or in a bad encoding, a number out of range, a string too long); and the
        constraints that refuse a value."""
        code = self.error_code(exc)
        return (isinstance(code, str) and code.startswith("22")) or super().is_refusal(exc)

    @classmethod
    def engine_options(cls, driver: str = "") -> dict[str, Any]:
        """READ COMMITTED; with libpq (psycopg), connections that notice a dead network:
        a connect timeout, TCP keepalives while idle or waiting for a reply, and
        ``tcp_user_timeout`` for data the server never acknowledges. A cut network then
        fails a statement within about 20 s instead of the kernel's 15 minutes, and the
        connection is replaced. Neither cuts a long statement short: the server's
        kernel answers keepalives while it works."""
        options: dict[str, Any] = {"isolation_level": "READ COMMITTED"}
        if driver in ("psycopg", "psycopg2", ""):
            options["connect_args"] = dict(LIBPQ_NETWORK)
        return options

    @classmethod
    def session_statements(
        cls, sa_dialect: Any, idle_seconds: float | None, lock_seconds: float | None = None
    ) -> list[str]:
        """``idle_in_transaction_session_timeout``: the server ends a session idle inside
        a transaction for longer, rolling it back and releasing its locks.
        ``lock_timeout``: a statement waits for a lock that long at most, then fails
        with 55P03, which the store retries. Both in milliseconds, INTEGER settings: a
        longer timeout is the longest they hold, not an error at every connection."""
        statements = []
        if idle_seconds:
            ms = min(max(1, round(idle_seconds * 1000)), 2**31 - 1)
            statements.append(f"SET idle_in_transaction_session_timeout = {ms}")
        if lock_seconds:
            ms = min(max(1, round(lock_seconds * 1000)), 2**31 - 1)
            statements.append(f"SET lock_timeout = {ms}")
        return statements

    def check_server(self) -> None:
        if self.server_version and self.server_version < (12,):
            raise UnsupportedDatabase(
                "readyq needs PostgreSQL 12 or newer (materialized CTEs), found "
                + ".".join(map(str, self.server_version))
            )

    def match_ids(
        self, column: sa.ColumnElement[Any], ids: Sequence[int]
    ) -> sa.ColumnElement[bool]:
        """``column = ANY(:ids)``: one array parameter, so the SQL text does not change with
        the number of ids and the driver can prepare it once."""
        return column == sa.any_(sa.bindparam(None, list(ids), type_=ARRAY(sa.BigInteger)))

    def ids_in(self, column: sa.ColumnElement[Any], name: str) -> sa.ColumnElement[bool]:
        """``column = ANY(:name)``, the list bound as one array."""
        return column == sa.any_(sa.bindparam(name, type_=ARRAY(sa.BigInteger)))

    def ready_ids(self, t: Tables, name: str) -> sa.ColumnElement[bool]:
        """``id = ANY((SELECT :name)) AND state IS NOT DISTINCT FROM 'ready'``.

        The array as an InitPlan is looked up by the primary key whatever its length;
        and ``IS NOT DISTINCT FROM`` (the same test, as state is never NULL) is only
        checked on the rows the ids find. Written as ``state = 'ready'``, it let the
        planner take a ready index, whose estimate is low until the table is first
        analyzed, and test every ready row against the ids."""
        ids = sa.select(sa.bindparam(name, type_=ARRAY(sa.BigInteger))).scalar_subquery()
        return sa.and_(
            t.jobs.c.id == sa.any_(sa.cast(ids, ARRAY(sa.BigInteger))),
            t.jobs.c.state.is_not_distinct_from("ready"),
        )

    def pairs_match(
        self,
        id_column: sa.ColumnElement[Any],
        token_column: sa.ColumnElement[Any],
        pairs: Sequence[tuple[int, int]],
    ) -> sa.ColumnElement[bool]:
        """``(id, token) IN (SELECT * FROM unnest(:ids, :tokens))``, with two array
        parameters whatever the number of pairs."""
        fence = (
            sa.func.unnest(
                sa.bindparam(None, [p[0] for p in pairs], type_=ARRAY(sa.BigInteger)),
                sa.bindparam(None, [p[1] for p in pairs], type_=ARRAY(sa.BigInteger)),
            )
            .table_valued("id", "token")
            .render_derived(name="fence")
        )
        return sa.tuple_(id_column, token_column).in_(sa.select(fence.c.id, fence.c.token))

    def insert_job_rows(
        self,
        conn: Connection,
        t: Tables,
        rows: list[tuple[Any, ...]],
        now: sa.ColumnElement[float],
        notifier: ReadyNotifier | None = None,
    ) -> list[int]:
        """Take the ids from the table's sequence (with the server's clock), then load
        every row at once: with ``COPY`` on psycopg's synchronous driver, else with one
        ``INSERT ... SELECT FROM jsonb_array_elements(:rows)``. COPY loads 20,000 rows
        in about half the time of the INSERT, which parses the JSON and extracts every
        field on the server."""
        j = t.jobs
        # asyncpg: SQLAlchemy's multi-row VALUES numbers the clock's parameters once for
        # all rows ("the server expects 81 arguments, 72 were passed"): the JSON load.
        if len(rows) == 1 or (len(rows) < 50 and conn.dialect.driver != "asyncpg"):
            return super().insert_job_rows(conn, t, rows, now, notifier)
        if notifier is not None:
            notifier.send(conn)
        # The ids as one comma-separated text: one row to fetch instead of one per id.
        seq = sa.func.pg_get_serial_sequence(j.name, "id")
        taken = sa.select(sa.func.nextval(seq).label("v")).select_from(
            sa.func.generate_series(1, len(rows))
        ).subquery()
        clock, text = conn.execute(
            sa.select(now, sa.func.string_agg(sa.cast(taken.c.v, sa.Text), ","))
        ).one()
        ids = sorted(int(x) for x in text.split(","))  # ascending, in batch order
        if conn.dialect.driver == "psycopg" and not conn.dialect.is_async:
            copy_jobs(conn, j, ids, rows, float(clock))
        else:
            self._insert_json(conn, t, ids, rows, now)
        return ids

    @staticmethod
    def _insert_json(
        conn: Connection,
        t: Tables,
        ids: list[int],
        rows: list[tuple[Any, ...]],
        now: sa.ColumnElement[float],
    ) -> None:
        """One ``INSERT ... SELECT FROM jsonb_array_elements(:rows)``: one parameter
        whatever the number of rows, where a multi-row VALUES list would bind (and make
        the driver parse) one parameter per column and row. As ``jsonb`` the text is
        parsed once, where each ``->>`` on ``json`` would parse the row again."""
        j = t.jobs
        types: dict[str, Any] = {
            "id": sa.BigInteger,
            "type": sa.Text,
            "args": sa.Text,
            "state": sa.Text,
            "error": sa.Text,
            "is_container": sa.Boolean,
            "parent_id": sa.BigInteger,
            "group_key": sa.Text,
            "weight": sa.Integer,
            "priority": sa.Integer,
            "max_attempts": sa.Integer,
            "timeout": sa.Double,
            "pending_deps": sa.Integer,
            "open_children": sa.Integer,
            "unique_key": sa.Text,
            "uses": sa.Text,
            "batch_key": sa.Text,
            "spawned_by": sa.BigInteger,
            "run_after_at": sa.Double,
            "run_after_delay": sa.Double,
            "finished_offset": sa.Double,
        }
        names = ("id", *ROW_KEYS)
        payload = json.dumps(
            [[i, *r] for i, r in zip(ids, rows, strict=True)], separators=(",", ":")
        )
        each = (
            sa.func.jsonb_array_elements(
                sa.cast(sa.bindparam("rows", payload, type_=sa.Text), JSONB)
            )
            .table_valued("value")
            .render_derived(name="each")
        )
        src = sa.select(
            *(
                sa.cast(each.c.value.op("->>")(k), types[n]).label(n)
                for k, n in enumerate(names)
            )
        ).subquery("src")
        select = sa.select(
            *(src.c[n] for n in ("id", *BULK_COLUMNS)),
            *(sa.literal(v) for v in BULK_CONSTANTS.values()),
            sa.func.coalesce(src.c.run_after_at, now + src.c.run_after_delay),
            now,
            now,
            now + src.c.finished_offset,
        )
        conn.execute(sa.insert(j).from_select(list(INSERT_COLUMNS), select))

    def done_update(
        self,
        t: Tables,
        owner: str,
        rows: Sequence[tuple[int, int, str | None]],
        now: sa.ColumnElement[float],
    ) -> tuple[sa.Update, dict[str, Any]]:
        """``UPDATE ... FROM json_to_recordset(:rows)``: the batch travels as one JSON
        text, so the SQL never changes with its size and the server plans it once. (As
        arrays, the driver would quote and escape every result on its own.)

        The rows are parsed once, in a materialized CTE, and the jobs are found by
        ``id = ANY(<the CTE's ids>)``, an array the planner sees as a primary-key
        lookup. The state test is written ``(state = 'running') IS TRUE``, which no
        index can serve, so that it stays a filter on those rows. Otherwise the planner
        may read the in-flight index for ``state = 'running'``: that index keeps an
        entry for every job that ran since the table's last vacuum (a bitmap scan never
        marks them dead), and with the JSON joined directly it also parsed the batch
        again for each entry. The finish's cost then grew with the jobs run, not with
        the batch."""

        def build() -> sa.Update:
            j = t.jobs
            fn = (
                sa.func.json_to_recordset(
                    sa.cast(sa.bindparam("d_rows", type_=sa.Text), sa.JSON)
                )
                .table_valued(
                    sa.column("i", sa.BigInteger),
                    sa.column("t", sa.BigInteger),
                    sa.column("r", sa.Text),
                )
                .render_derived(name="rows", with_types=True)
            )
            src = (
                sa.select(fn.c.i, fn.c.t, fn.c.r).cte("done").prefix_with("MATERIALIZED")
            )
            ids = sa.select(sa.func.array_agg(src.c.i)).scalar_subquery()
            return (
                sa.update(j)
                .where(
                    j.c.id == sa.any_(sa.cast(ids, ARRAY(sa.BigInteger))),
                    j.c.id == src.c.i,
                    j.c.lease_token == src.c.t,
                    j.c.lease_owner == sa.bindparam("d_owner", type_=sa.String),
                    (j.c.state == "running").is_(sa.true()),
                )
                .values(done_values(now, src.c.r))
            )

        params = {
            "d_rows": json.dumps([{"i": i, "t": token, "r": result} for i, token, result in rows]),
            "d_owner": owner,
        }
        return self.cached(("done", t.jobs.name), build), params

    def mark_done(
        self,
        conn: Connection,
        t: Tables,
        owner: str,
        rows: Sequence[tuple[int, int, str | None]],
        now: sa.ColumnElement[float],
    ) -> MarkedDone:
        """The done UPDATE in a CTE, joined to the dependency edges of the rows it marked
        and to those dependents' rows (whether each is a container): the dependents come
        back with it, in one round trip."""
        update, params = self.done_update(t, owner, rows, now)

        def build() -> sa.Select[Any]:
            d = t.deps
            dependent = t.jobs.alias("dependent")
            marked = update.returning(t.jobs.c.id).cte("marked")
            return sa.select(marked.c.id, d.c.job_id, dependent.c.is_container).select_from(
                marked.outerjoin(d, d.c.depends_on_id == marked.c.id).outerjoin(
                    dependent, dependent.c.id == d.c.job_id
                )
            )

        stmt = self.cached(("mark_done", t.jobs.name), build)
        found = conn.execute(stmt, params).all()
        ids = {r[0] for r in found}
        if len(ids) != len(rows):
            return MarkedDone(len(ids), None)
        return MarkedDone(len(ids), dependents_from((r[1], r[2]) for r in found))

    def insert_edges(self, conn: Connection, t: Tables, edges: list[dict[str, int]]) -> None:
        """One ``INSERT ... SELECT FROM unnest(:job_ids, :depends_on_ids)``, the arrays
        sent as comma-separated text and split by the server (the driver would quote
        every element)."""
        if len(edges) < 50:
            super().insert_edges(conn, t, edges)
            return

        def ids(key: str) -> sa.ColumnElement[Any]:
            text = ",".join(str(int(e[key])) for e in edges)
            return sa.cast(
                sa.func.string_to_array(sa.bindparam(None, text, type_=sa.Text), ","),
                ARRAY(sa.BigInteger),
            )

        src = (
            sa.func.unnest(ids("job_id"), ids("depends_on_id"))
            .table_valued("job_id", "depends_on_id")
            .render_derived(name="src")
        )
        conn.execute(
            sa.insert(t.deps).from_select(
                ["job_id", "depends_on_id"], sa.select(src.c.job_id, src.c.depends_on_id)
            )
        )

    def now(self) -> sa.ColumnElement[float]:
        # date_part() returns double precision; EXTRACT returns numeric (PostgreSQL 14+),
        # whose cast to double goes through text: about 0.2 µs against 0.06 µs per
        # evaluation, and a claim evaluates the clock several times per row.
        return sa.func.date_part(
            sa.literal_column("'epoch'"), sa.func.clock_timestamp(), type_=sa.Double
        )

    def first_ready_type(
        self, t: Tables, types: Sequence[str], *conds: sa.ColumnElement[bool]
    ) -> sa.ScalarSelect[Any]:
        """The type tested as ``= ANY(ARRAY[...])`` (:func:`array_member`): with ``IN`` of
        one value, an equality, a generic plan may answer ``min(type)`` with any row of a
        scan it expects to match at once."""
        return first_ready_type(t, types, *conds, member=array_member)

    def pin_index_order(self, conn: Connection) -> None:
        """``enable_sort`` and ``jit`` off for the rest of the transaction.

        The planner's estimate of a group's ready range may come from statistics older
        than the backlog; believing the range holds a row or two, it may read all of it
        and sort, at every claim. With sorts priced out, the ordered index scan that
        stops at the rows asked for is always the cheapest plan. JIT goes off too: the
        sort of a worker of several types (``merged_head``) would otherwise carry the
        priced-out cost past JIT's threshold. (Measured: docs/dialects.md.) One
        statement, as the async driver prepares each statement and a prepared statement
        holds one command; ``set_config(..., true)`` is ``SET LOCAL``.
        """
        conn.exec_driver_sql(
            "SELECT set_config('enable_sort', 'off', true), set_config('jit', 'off', true)"
        )

    def claim_statement(
        self, t: Tables, req: ClaimRequest, now: sa.ColumnElement[float]
    ) -> sa.Update:
        """``WITH claimable AS MATERIALIZED (... FOR UPDATE SKIP LOCKED) UPDATE ... RETURNING``.

        Built once per shape (job types, start policies); group, limit, owner and lease
        length are bound (``req.params()``)."""

        def build() -> sa.Update:
            j = t.jobs
            chosen = (
                _locked_head(t, now, GROUP, req.types, LIMIT)
                .cte("claimable")
                .prefix_with("MATERIALIZED")
            )
            return (
                sa.update(j)
                .where(j.c.id == chosen.c.id)
                .values(**lease_values(t, req, now))
                .returning(*claim_columns(t))
            )

        return self.cached(("claim", t.jobs.name, req.shape()), build)

    def claim_jobs(
        self,
        conn: Connection,
        t: Tables,
        requests: Sequence[ClaimRequest],
        now: sa.ColumnElement[float],
    ) -> list[ClaimedJob]:
        """One group: :meth:`claim_statement`. Several: every group's claim in one
        statement, ``unnest(:groups, :limits)`` driving a LATERAL ``... LIMIT n FOR UPDATE
        SKIP LOCKED`` per group inside the materialized CTE, then one UPDATE ...
        RETURNING that leases them all."""
        if len(requests) == 1:
            req = requests[0]
            stmt = self.claim_statement(t, req, now)
            return claimed_rows(conn.execute(stmt, req.params()))
        result = self._claim_groups_result(conn, t, requests, now, None)
        return claimed_rows(result)

    # -- one statement per step of a claim ----------------------------------------------

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
        """One statement: a recursive skip scan walks the ready index from group to
        group, and a LATERAL subquery counts each group's runnable head up to the cap.
        (With the history, the portable statements.)"""
        if with_history:
            return super().runnable_counts(
                conn, t, now, types, cap, with_history=with_history, costed=costed, groups=groups
            )

        def build() -> sa.Select[Any]:
            cap_param = sa.bindparam("cap", type_=sa.Integer)
            walk: sa.CTE | sa.Subquery
            known: sa.ColumnElement[bool]
            if merged_types(types) is None:
                walk = ready_group_walk(t, types)
                known = walk.c.k.is_not(None)
            else:  # the groups of each type's walk, once each
                walk = ready_group_keys(t, types).subquery("ready_groups")
                known = sa.true()
            head = (
                runnable_head(t, now, walk.c.k, types, cap_param, costed)
                .correlate(walk)
                .subquery("head")
            )
            counts = (
                sa.select(sa.func.count().label("n"), sa.func.max(head.c.weight).label("w"))
                .select_from(head)
                .lateral("counts")
            )
            return (
                sa.select(walk.c.k, counts.c.n, counts.c.w)
                .select_from(walk.join(counts, sa.true()))
                .where(known, counts.c.n > 0)
            )

        key = ("ready_counts", t.jobs.name, None if types is None else tuple(types), costed)
        counts = {
            r[0]: (int(r[1]), int(r[2]))
            for r in conn.execute(self.cached(key, build), {"cap": cap}).all()
        }
        return counts, {}

    # Every group in one read: the groups and their limits are bound as two arrays.
    groups_per_state_read: ClassVar[int] = 1 << 30

    def state_groups_shape(self, n: int) -> int:
        """1 for any number of groups: they travel as two arrays (:meth:`state_groups`)."""
        return min(n, 1)

    def state_groups(
        self,
        t: Tables,
        now: sa.ColumnElement[float],
        types: Sequence[str] | None,
        n: int,
    ) -> list[sa.Select[Any]]:
        """The history of the groups of ``:s_groups`` and the first ``:s_limits`` jobs of
        each, as a LATERAL read per row of ``unnest(:s_groups, :s_limits)``: one plan
        for any number of groups, which costs less to plan than a read per group."""
        if not n:
            return []
        j, g = t.jobs, t.groups
        keys = sa.bindparam("s_groups", type_=ARRAY(sa.String))
        picks = (
            sa.func.unnest(keys, sa.bindparam("s_limits", type_=ARRAY(sa.Integer)))
            .table_valued("g", "n")
            .render_derived(name="picks")
        )
        head = (
            claim_head(
                t, now, picks.c.g, types, picks.c.n,
                j.c.id, j.c.group_key, j.c.type, j.c.uses, j.c.weight, j.c.priority,
                costed=True,
            )
            .correlate(picks)
            .lateral("rq_head")
        )
        return [
            sa.select(*state_row(t, 2, group_key=g.c.group_key, n=g.c.served_seq,
                                 vf=g.c.vfinish))
            .where(g.c.group_key == sa.any_(keys)),
            sa.select(*state_row(
                t, 3, group_key=head.c.group_key, uses=head.c.uses, w=head.c.weight,
                job_id=head.c.id, type=head.c.type, priority=head.c.priority,
            )).select_from(picks.join(head, sa.true())),
        ]

    def state_groups_params(self, heads: Mapping[str, int]) -> dict[str, Any]:
        """The groups and their limits as the two arrays ``s_groups`` and ``s_limits``."""
        return {"s_groups": list(heads), "s_limits": list(heads.values())}

    def claim_jobs_recording(
        self,
        conn: Connection,
        t: Tables,
        requests: Sequence[ClaimRequest],
        now: sa.ColumnElement[float],
        progress: Progress,
    ) -> ClaimReceipt:
        """The claim of :meth:`claim_jobs` with the upsert of the groups' progress and
        the gate's update as two more CTEs. The claimed rows stay in the driver's result
        until read."""
        result = self._claim_groups_result(conn, t, requests, now, progress)
        return ClaimReceipt(
            result.rowcount, lambda: claimed_rows(result)
        )

    def claim_ids_recording(
        self,
        conn: Connection,
        t: Tables,
        req: ClaimRequest,
        ids: Sequence[int],
        now: sa.ColumnElement[float],
        progress: Progress,
    ) -> ClaimReceipt:
        """The UPDATE of :meth:`claim_ids` with the upsert of the groups' progress and
        the gate's update as two more CTEs."""
        j = t.jobs

        def build() -> sa.Update:
            upsert, gate = self._progress_ctes(t)
            return (
                sa.update(j)
                .where(
                    self.ready_ids(t, "rq_ids"), run_after_passed(t, now),
                )
                .values(**lease_values(t, req, now))
                .returning(*claim_columns(t))
                .add_cte(upsert)
                .add_cte(gate)
            )

        params = {**req.params(), "rq_ids": list(ids), **self._progress_params(progress)}
        stmt = self.cached(("claim_ids_recording", j.name, req.shape()), build)
        result = conn.execute(stmt, params)
        return ClaimReceipt(
            result.rowcount, lambda: claimed_rows(result)
        )

    def _claim_groups_result(
        self,
        conn: Connection,
        t: Tables,
        requests: Sequence[ClaimRequest],
        now: sa.ColumnElement[float],
        progress: Progress | None,
    ) -> sa.CursorResult[Any]:
        first = requests[0]

        def build() -> sa.Update:
            j = t.jobs
            picks = (
                sa.func.unnest(
                    sa.bindparam("c_groups", type_=ARRAY(sa.String)),
                    sa.bindparam("c_limits", type_=ARRAY(sa.Integer)),
                )
                .table_valued("g", "n")
                .render_derived(name="picks")
            )
            head = (
                _locked_head(t, now, picks.c.g, first.types, picks.c.n)
                .correlate(picks)
                .lateral("head")
            )
            chosen = (
                sa.select(head.c.id)
                .select_from(picks.join(head, sa.true()))
                .cte("claimable")
                .prefix_with("MATERIALIZED")
            )
            # ``id = ANY((SELECT array_agg(id) ...))``: the planner cannot guess how many
            # rows the LATERAL limits let through and may join by a scan of the whole
            # table; an array computed first is looked up by primary key.
            ids = sa.select(sa.func.array_agg(chosen.c.id)).scalar_subquery()
            stmt = (
                sa.update(j)
                .where(j.c.id == sa.any_(sa.cast(ids, ARRAY(sa.BigInteger))))
                .values(**lease_values(t, first, now))
                .returning(*claim_columns(t))
            )
            if progress is not None:
                upsert, gate = self._progress_ctes(t)
                stmt = stmt.add_cte(upsert).add_cte(gate)
            return stmt

        params = first.params()
        params["c_groups"] = [r.group for r in requests]
        params["c_limits"] = [r.limit for r in requests]
        if progress is not None:
            params.update(self._progress_params(progress))
        key = ("claim_groups", t.jobs.name, first.shape(), progress is not None)
        return conn.execute(self.cached(key, build), params)

    @staticmethod
    def _progress_ctes(t: Tables) -> tuple[sa.CTE, sa.CTE]:
        """The upsert of the groups' progress from arrays, and the gate's update."""
        # Written out as text: SQLAlchemy 2.0's PostgreSQL ``insert()`` has no cache key,
        # so a claim statement holding it as a construct was compiled again at every
        # claim (2.1 caches it). A text with typed parameters is cached on both.
        upsert = (
            sa.text(
                f"INSERT INTO {_PREPARER.format_table(t.groups)} (group_key, vfinish, served_seq)"
                " SELECT k, v, s FROM unnest(:p_keys, :p_vfinish, :p_seq) AS progress(k, v, s)"
                " ON CONFLICT (group_key) DO UPDATE"
                " SET vfinish = excluded.vfinish, served_seq = excluded.served_seq"
            )
            .bindparams(
                sa.bindparam("p_keys", type_=ARRAY(sa.String)),
                sa.bindparam("p_vfinish", type_=ARRAY(sa.Double)),
                sa.bindparam("p_seq", type_=ARRAY(sa.BigInteger)),
            )
            .columns()
            .cte("groups_progress")
        )
        gate = (
            sa.update(t.gate)
            .where(t.gate.c.id == GATE_ID)
            .values(
                vclock=sa.bindparam("vclock", type_=sa.Double),
                seq=sa.bindparam("seq", type_=sa.BigInteger),
            )
            .returning(t.gate.c.id)
            .cte("gate_progress")
        )
        return upsert, gate

    @staticmethod
    def _progress_params(progress: Progress) -> dict[str, Any]:
        return {
            "p_keys": [r[0] for r in progress.rows],
            "p_vfinish": [r[1] for r in progress.rows],
            "p_seq": [r[2] for r in progress.rows],
            "vclock": progress.vclock,
            "seq": progress.seq,
        }

    def record_progress(self, conn: Connection, t: Tables, progress: Progress) -> None:
        """One statement: an upsert of the groups' progress from arrays, in a CTE of the
        gate's UPDATE."""

        def build() -> sa.Update:
            upsert, _ = self._progress_ctes(t)
            return (
                sa.update(t.gate)
                .add_cte(upsert)
                .where(t.gate.c.id == GATE_ID)
                .values(
                    vclock=sa.bindparam("vclock", type_=sa.Double),
                    seq=sa.bindparam("seq", type_=sa.BigInteger),
                )
            )

        conn.execute(
            self.cached(("record_progress", t.groups.name), build),
            self._progress_params(progress),
        )

    # -- wake-ups -----------------------------------------------------------------------

    def release_dependents(
        self,
        conn: Connection,
        t: Tables,
        by_count: Mapping[int, Sequence[int]],
        now: sa.ColumnElement[float],
        notifier: ReadyNotifier | None,
    ) -> None:
        """With a notifier, the NOTIFY rides on the release itself: the release as a
        data-modifying CTE, and the notifier's ``pg_notify`` evaluated once if one of
        the rows it updated is ready now."""
        if notifier is None or not by_count:
            super().release_dependents(conn, t, by_count, now, notifier)
            return

        def build() -> sa.Select[Any]:
            released = (
                release_dependents(t, now, partial(self.ids_in, name="r_ids"))
                .returning(t.jobs.c.state)
                .cte("released")
            )
            return (
                sa.select(notifier.column)
                .select_from(released)
                .where(released.c.state == "ready")
                .limit(1)
            )

        release = self.cached(("release_notify", t.jobs.name), build)
        for n, ids in sorted(by_count.items()):
            conn.execute(release, {"r_ids": sorted(ids), "r_n": n})

    def ready_notifier(self, prefix: str) -> ReadyNotifier:
        """``pg_notify`` on the prefix's channel, delivered at commit, dropped on
        rollback; the payload is empty (no job data travels this way)."""
        return _Notifier(prefix)

    def listen_channel(self, conn: Connection, prefix: str) -> str:
        """The channel's full name as ``conn`` sees it: its ``search_path`` may come from
        connect arguments that the listener's own connection does not share."""
        return str(
            conn.execute(
                sa.text("SELECT :base || '_' || left(md5(current_schema()), 8)"),
                {"base": channel_for(prefix)},
            ).scalar_one()
        )

    def start_listener(
        self, url: sa.URL, channel: str, on_wake: Callable[[], None]
    ) -> PgListener:
        """LISTEN from a psycopg connection of its own, in a daemon thread."""
        try:
            import psycopg  # noqa: F401
        except ImportError:
            raise ConfigurationError(
                "LISTEN needs the psycopg driver, which is not installed"
            ) from None
        return PgListener(conninfo_for(url), channel, on_wake).start()


# COPY's text format: a backslash starts an escape, tab and newline end a field and a row.
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
_NULL = "\\N"


def _copy_text(value: str | None) -> str:
    if value is None:
        return _NULL
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        return value.translate(_COPY_ESCAPES)
    return value


def _copy_number(value: float | None) -> str:
    return _NULL if value is None else repr(value)


def copy_jobs(
    conn: Connection, table: sa.Table, ids: list[int], rows: list[tuple[Any, ...]], clock: float
) -> None:
    """Load new job rows with ``COPY ... FROM STDIN`` on the connection's psycopg driver,
    in the transaction under way. ``clock`` is the server's time, read with the ids: the
    times are computed here exactly as the INSERT would compute them on the server.

    Driver errors are wrapped as SQLAlchemy wraps those of any statement, so that
    callers (a unique key's conflict, the retry of a lost connection) see no
    difference; a connection lost on the way is invalidated."""
    # The f-string below spells out schema.ROW_KEYS (read) and INSERT_COLUMNS (written);
    # a unit test checks that they still say so.
    constants = "\t".join(
        "t" if v is True else "f" if v is False else str(v) for v in BULK_CONSTANTS.values()
    )
    now = repr(clock)
    text = _copy_text
    lines = []
    for i, r in zip(ids, rows, strict=True):
        (type_, args, state, error, is_container, parent_id, group, weight, priority,
         max_attempts, timeout, pending, open_children, unique_key, uses, batch_key,
         spawned_by, at, delay, finished_offset) = r
        run_after = at if at is not None else None if delay is None else clock + delay
        lines.append(
            f"{i}\t{text(type_)}\t{text(args)}\t{state}\t{text(error)}\t"
            f"{'t' if is_container else 'f'}\t{_NULL if parent_id is None else parent_id}\t"
            f"{text(group)}\t{weight}\t{priority}\t{max_attempts}\t{_copy_number(timeout)}\t"
            f"{pending}\t{open_children}\t{text(unique_key)}\t{text(uses)}\t"
            f"{text(batch_key)}\t{_NULL if spawned_by is None else spawned_by}\t"
            f"{constants}\t"
            f"{_copy_number(run_after)}\t{now}\t{now}\t"
            f"{_NULL if finished_offset is None else repr(clock + finished_offset)}\n"
        )
    name = conn.dialect.identifier_preparer.format_table(table)
    sql = f"COPY {name} ({', '.join(INSERT_COLUMNS)}) FROM STDIN"
    raw = conn.connection.driver_connection
    assert raw is not None
    try:
        with raw.cursor() as cursor, cursor.copy(sql) as copy:
            copy.write("".join(lines))
    except Exception as exc:
        import psycopg

        if not isinstance(exc, psycopg.Error):
            raise
        # Marked as SQLAlchemy marks a lost connection, which is what the store retries
        # on: psycopg 3.2 reports a connection lost mid-COPY without a SQLSTATE.
        lost = conn.dialect.is_disconnect(cast(Any, exc), conn.connection.dbapi_connection, None)
        if lost:
            conn.invalidate(exc)
        raise sa.exc.DBAPIError.instance(
            sql, None, exc, psycopg.Error, connection_invalidated=lost, dialect=conn.dialect
        ) from exc
