"""SQLite: the index of jobs that ended badly tests their states as comparisons.

Revision ID: readyq_0010
Revises: readyq_0009

readyq_0008 gave ``jobs_bad_end_ix`` the predicate ``state IN ('failed', 'cancelled',
'upstream_failed')``. SQLite tests an IN list of three values or more through a
temporary B-tree that it builds and clears on every write of a row, for the row's old
state and its new one: every claim and every finish paid for it. The index is built
again with the same states as comparisons joined by OR, which SQLite tests in place.
PostgreSQL, MySQL and MariaDB are left as they are.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from readyq.migrations import current_prefix

revision = "readyq_0010"
down_revision = "readyq_0009"
branch_labels = None
depends_on = None

# As written by this revision, whatever later versions of schema.py say.
BAD_END_IN = "state IN ('failed', 'cancelled', 'upstream_failed')"
BAD_END_COMPARISONS = "state = 'failed' OR state = 'cancelled' OR state = 'upstream_failed'"


def _rebuild(where: str) -> None:
    if op.get_context().dialect.name != "sqlite":
        return
    jobs = f"{current_prefix()}jobs"
    op.drop_index(f"{jobs}_bad_end_ix", table_name=jobs)
    op.create_index(f"{jobs}_bad_end_ix", jobs, ["state", "id"], sqlite_where=sa.text(where))


def upgrade() -> None:
    _rebuild(BAD_END_COMPARISONS)


def downgrade() -> None:
    _rebuild(BAD_END_IN)
