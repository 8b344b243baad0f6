"""Jobs that ended badly, indexed for the listings.

Revision ID: readyq_0008
Revises: readyq_0007

A listing of failed jobs (``Queue.jobs(state="failed")``, ``readyq jobs --state failed``,
the dashboard's failed tab) reads newest first. No index held the jobs that ended badly,
so with 1,000,000 done jobs a page walked the primary key past every done job newer than
the failures.

* PostgreSQL and SQLite: ``jobs_bad_end_ix`` is (state, id) WHERE state IN ('failed',
  'cancelled', 'upstream_failed'): a page of one such state is one range of it.
* MySQL and MariaDB: the virtual generated column ``bad_end_state`` holds the state of a
  job that ended badly and NULL otherwise, and ``jobs_bad_end_ix`` indexes it with the
  id.

Rows enter the index only when a job fails, is cancelled or ends upstream_failed, and
leave it when it is retried or pruned: no claim and no successful finish writes to it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from readyq.migrations import current_prefix

revision = "readyq_0008"
down_revision = "readyq_0007"
branch_labels = None
depends_on = None

# As written by this revision, whatever later versions of schema.py say.
BAD_END = "state IN ('failed', 'cancelled', 'upstream_failed')"
BAD_END_STATE_EXPRESSION = f"CASE WHEN {BAD_END} THEN state END"


def _is_mysql() -> bool:
    return op.get_context().dialect.name in ("mysql", "mariadb")


def upgrade() -> None:
    jobs = f"{current_prefix()}jobs"
    if _is_mysql():
        op.add_column(
            jobs,
            sa.Column(
                "bad_end_state",
                sa.String(16),
                sa.Computed(BAD_END_STATE_EXPRESSION, persisted=False),
            ),
        )
        op.create_index(f"{jobs}_bad_end_ix", jobs, ["bad_end_state", "id"])
        return
    where = sa.text(BAD_END)
    op.create_index(
        f"{jobs}_bad_end_ix", jobs, ["state", "id"], postgresql_where=where, sqlite_where=where
    )


def downgrade() -> None:
    jobs = f"{current_prefix()}jobs"
    op.drop_index(f"{jobs}_bad_end_ix", table_name=jobs)
    if _is_mysql():
        op.drop_column(jobs, "bad_end_state")
