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

from collections.abc import Sequence
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import Connection

from readyq.dialects.base import (
    Capabilities,
    ClaimRequest,
    Dialect,
    claim_columns,
    claimed_from_row,
    done_values,
    lease_values,
)
from readyq.errors import UnsupportedDatabase
from readyq.model import ClaimedJob
from readyq.schema import Tables
from readyq.sql.ready import claim_order, runnable


class PostgresDialect(Dialect):
    name: ClassVar[str] = "postgresql"
    capabilities: ClassVar[Capabilities] = Capabilities(
        skip_locked=True, returning=True, partial_index=True, listen_notify=True, row_locks=True
    )
    # serialization_failure, deadlock_detected, lock_not_available, admin/crash shutdown,
    # cannot_connect_now (server starting up).
    retryable_codes: ClassVar[frozenset[object]] = frozenset(
        {"40001", "40P01", "55P03", "57P01", "57P02", "57P03"}
    )
    missing_table_codes: ClassVar[frozenset[object]] = frozenset({"42P01"})

    @classmethod
    def engine_options(cls) -> dict[str, Any]:
        return {"isolation_level": "READ COMMITTED"}

    def check_server(self) -> None:
        if self.server_version and self.server_version < (12,):
            raise UnsupportedDatabase(
                "readyq needs PostgreSQL 12 or newer (materialized CTEs), found "
                + ".".join(map(str, self.server_version))
            )

    def ids_match(
        self, column: sa.ColumnElement[Any], ids: Sequence[int]
    ) -> sa.ColumnElement[bool]:
        """``column = ANY(:ids)``: one array parameter, so the SQL text does not change with
        the number of ids and the driver can prepare it once."""
        return column == sa.any_(sa.bindparam(None, list(ids), type_=ARRAY(sa.BigInteger)))

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

    def insert_jobs(
        self,
        conn: Connection,
        t: Tables,
        rows: list[dict[str, Any]],
        now: sa.ColumnElement[float],
    ) -> list[int] | None:
        """Take the ids from the table's sequence, then insert every row with one
        ``INSERT ... SELECT FROM unnest(arrays)``: a statement with one parameter per
        column whatever the number of rows, where a multi-row VALUES list would bind
        (and make the driver parse) one parameter per column and row."""
        from readyq.store import BULK_COLUMNS, BULK_CONSTANTS

        j = t.jobs
        if len(rows) < 50:
            return None
        seq = sa.func.pg_get_serial_sequence(j.name, "id")
        ids = [
            int(x)
            for x in conn.execute(
                sa.select(sa.func.nextval(seq)).select_from(sa.func.generate_series(1, len(rows)))
            ).scalars()
        ]
        names = ("id", *BULK_COLUMNS, "run_after_at", "run_after_delay", "finished_offset")
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
            "run_after_at": sa.Double,
            "run_after_delay": sa.Double,
            "finished_offset": sa.Double,
        }
        columns = {
            name: [i for i in ids] if name == "id" else [r[name] for r in rows] for name in names
        }
        src = (
            sa.func.unnest(*(sa.bindparam(None, columns[n], type_=ARRAY(types[n])) for n in names))
            .table_valued(*names)
            .render_derived(name="src")
        )
        select = sa.select(
            *(src.c[n] for n in ("id", *BULK_COLUMNS)),
            *(sa.literal(v) for v in BULK_CONSTANTS.values()),
            sa.func.coalesce(src.c.run_after_at, now + src.c.run_after_delay),
            now,
            now,
            now + src.c.finished_offset,
        )
        target = [
            "id",
            *BULK_COLUMNS,
            *BULK_CONSTANTS,
            "run_after",
            "created_at",
            "updated_at",
            "finished_at",
        ]
        conn.execute(sa.insert(j).from_select(target, select))
        return ids

    def done_statement(
        self,
        t: Tables,
        owner: str,
        rows: Sequence[tuple[int, int, str | None]],
        now: sa.ColumnElement[float],
    ) -> sa.Update:
        """``UPDATE ... FROM unnest(:ids, :tokens, :results)``: three array parameters
        whatever the batch size, where a CASE would bind two per row."""
        j = t.jobs
        src = (
            sa.func.unnest(
                sa.bindparam(None, [r[0] for r in rows], type_=ARRAY(sa.BigInteger)),
                sa.bindparam(None, [r[1] for r in rows], type_=ARRAY(sa.BigInteger)),
                sa.bindparam(None, [r[2] for r in rows], type_=ARRAY(sa.Text)),
            )
            .table_valued("id", "token", "result")
            .render_derived(name="done")
        )
        return (
            sa.update(j)
            .where(
                j.c.id == src.c.id,
                j.c.lease_token == src.c.token,
                j.c.lease_owner == owner,
                j.c.state == "running",
            )
            .values(done_values(now, src.c.result))
        )

    def insert_edges(self, conn: Connection, t: Tables, edges: list[dict[str, int]]) -> None:
        """One ``INSERT ... SELECT FROM unnest(:job_ids, :depends_on_ids)``."""
        if len(edges) < 50:
            super().insert_edges(conn, t, edges)
            return
        src = (
            sa.func.unnest(
                sa.bindparam(None, [e["job_id"] for e in edges], type_=ARRAY(sa.BigInteger)),
                sa.bindparam(None, [e["depends_on_id"] for e in edges], type_=ARRAY(sa.BigInteger)),
            )
            .table_valued("job_id", "depends_on_id")
            .render_derived(name="src")
        )
        conn.execute(
            sa.insert(t.deps).from_select(
                ["job_id", "depends_on_id"], sa.select(src.c.job_id, src.c.depends_on_id)
            )
        )

    def now(self) -> sa.ColumnElement[float]:
        return sa.cast(sa.extract("epoch", sa.func.clock_timestamp()), sa.Double)

    def claim_statement(
        self, t: Tables, req: ClaimRequest, now: sa.ColumnElement[float]
    ) -> sa.Update:
        """``WITH claimable AS MATERIALIZED (... FOR UPDATE SKIP LOCKED) UPDATE ... RETURNING``."""
        j = t.jobs
        chosen = (
            sa.select(j.c.id)
            .where(runnable(t, now, group=req.group, types=req.types))
            .order_by(*claim_order(t))
            .limit(req.limit)
            .with_for_update(skip_locked=True)
            .cte("claimable")
            .prefix_with("MATERIALIZED")
        )
        stmt = (
            sa.update(j)
            .where(j.c.id == chosen.c.id)
            .values(**lease_values(t, req, now))
            .returning(*claim_columns(t))
        )
        return stmt

    def claim(
        self, conn: Connection, t: Tables, req: ClaimRequest, now: sa.ColumnElement[float]
    ) -> list[ClaimedJob]:
        stmt = self.claim_statement(t, req, now)
        return [claimed_from_row(row) for row in conn.execute(stmt)]
