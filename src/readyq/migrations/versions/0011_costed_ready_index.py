"""Ready jobs with costs of their own, indexed by type.

Revision ID: readyq_0011
Revises: readyq_0010

A worker whose queue defines resources weighs every claim job by job, unless it knows
that no ready job of its types carries costs of its own: then each job costs what its
handler declares, and when those costs are the same for every type the claim can go
through the plain claim statement, which writes them into the rows it leases. This
index answers that question with one seek.

* PostgreSQL and SQLite: ``jobs_costed_ready_ix`` is (type) WHERE state = 'ready' AND
  uses IS NOT NULL.
* MySQL and MariaDB: the virtual generated column ``costed_type`` holds the type of such
  a job and NULL otherwise, and ``jobs_costed_ready_ix`` indexes it.

Rows enter the index only when enqueued with costs, or sent back to ready after a claim
wrote their handler's costs: a claim that leases a job without costs never writes to it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from readyq.migrations import current_prefix

revision = "readyq_0011"
down_revision = "readyq_0010"
branch_labels = None
depends_on = None

# As written by this revision, whatever later versions of schema.py say.
COSTED_READY = "state = 'ready' AND uses IS NOT NULL"
COSTED_TYPE_EXPRESSION = f"CASE WHEN {COSTED_READY} THEN type END"
KEY = sa.String(200).with_variant(
    mysql.VARCHAR(200, charset="utf8mb4", collation="utf8mb4_bin"), "mysql", "mariadb"
)


def _is_mysql() -> bool:
    return op.get_context().dialect.name in ("mysql", "mariadb")


def upgrade() -> None:
    jobs = f"{current_prefix()}jobs"
    index = f"{jobs}_costed_ready_ix"
    if _is_mysql():
        op.add_column(
            jobs,
            sa.Column("costed_type", KEY, sa.Computed(COSTED_TYPE_EXPRESSION, persisted=False)),
        )
        op.create_index(index, jobs, ["costed_type"])
        return
    where = sa.text(COSTED_READY)
    op.create_index(index, jobs, ["type"], postgresql_where=where, sqlite_where=where)


def downgrade() -> None:
    jobs = f"{current_prefix()}jobs"
    op.drop_index(f"{jobs}_costed_ready_ix", table_name=jobs)
    if _is_mysql():
        op.drop_column(jobs, "costed_type")
