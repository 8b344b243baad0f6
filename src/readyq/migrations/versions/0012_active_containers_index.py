"""Containers that have not ended, indexed by type.

Revision ID: readyq_0012
Revises: readyq_0011

The report of what is stuck (``Queue.stuck()``, ``readyq status``, the dashboard) reads
every container that has not ended, to find those that wait for children nobody adds or
whose dependencies ended badly without them. Nothing indexed them, so that read would
scan the whole table on every status.

* PostgreSQL and SQLite: ``jobs_active_type_ix`` is (type) WHERE state = 'active'.
* MySQL and MariaDB: the virtual generated column ``active_type`` holds the type of such
  a container and NULL otherwise, and ``jobs_active_type_ix`` indexes it.

Rows enter the index only when a container is enqueued and leave it when it ends: no
claim or finish of a job writes to it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from readyq.migrations import current_prefix

revision = "readyq_0012"
down_revision = "readyq_0011"
branch_labels = None
depends_on = None

# As written by this revision, whatever later versions of schema.py say.
ACTIVE = "state = 'active'"
ACTIVE_TYPE_EXPRESSION = f"CASE WHEN {ACTIVE} THEN type END"
KEY = sa.String(200).with_variant(
    mysql.VARCHAR(200, charset="utf8mb4", collation="utf8mb4_bin"), "mysql", "mariadb"
)


def _is_mysql() -> bool:
    return op.get_context().dialect.name in ("mysql", "mariadb")


def upgrade() -> None:
    jobs = f"{current_prefix()}jobs"
    index = f"{jobs}_active_type_ix"
    if _is_mysql():
        op.add_column(
            jobs,
            sa.Column("active_type", KEY, sa.Computed(ACTIVE_TYPE_EXPRESSION, persisted=False)),
        )
        op.create_index(index, jobs, ["active_type"])
        return
    where = sa.text(ACTIVE)
    op.create_index(index, jobs, ["type"], postgresql_where=where, sqlite_where=where)


def downgrade() -> None:
    jobs = f"{current_prefix()}jobs"
    op.drop_index(f"{jobs}_active_type_ix", table_name=jobs)
    if _is_mysql():
        op.drop_column(jobs, "active_type")
