"""An index of the jobs waiting for their dependencies, by type (PostgreSQL, SQLite).

Revision ID: readyq_0004
Revises: readyq_0003

A worker asked to stop once its job types have nothing left (``until_idle``) asks, when
a tick finds nothing to do, whether any job of its types is still unfinished. Ready and
in-flight jobs are found through the partial indexes, but nothing indexed the waiting
ones: on PostgreSQL, with 1,000,000 finished jobs and one waiting, the question took a
100 ms sequential scan, at every idle tick. ``jobs_waiting_type_ix`` is (type) WHERE
state = 'waiting'.

MySQL and MariaDB find waiting jobs through their indexes that begin with ``state``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from readyq.migrations import current_prefix

revision = "readyq_0004"
down_revision = "readyq_0003"
branch_labels = None
depends_on = None

WAITING = "state = 'waiting'"


def _is_mysql() -> bool:
    return op.get_context().dialect.name in ("mysql", "mariadb")


def upgrade() -> None:
    if _is_mysql():
        return
    jobs = f"{current_prefix()}jobs"
    where = sa.text(WAITING)
    op.create_index(f"{jobs}_waiting_type_ix", jobs, ["type"], postgresql_where=where,
                    sqlite_where=where)


def downgrade() -> None:
    if _is_mysql():
        return
    jobs = f"{current_prefix()}jobs"
    op.drop_index(f"{jobs}_waiting_type_ix", table_name=jobs)
