"""The run_after index holds delayed jobs only.

Revision ID: readyq_0018
Revises: readyq_0017

``jobs_state_run_after_ix`` held every ready job, although only a delayed one (a
``run_after`` that is set) is ever looked up in it: every enqueue wrote an entry for a
job that runs at once, and on SQLite every claim removed it again. The index is built
again with ``run_after IS NOT NULL`` added to its predicate, on the databases that have
partial indexes (PostgreSQL and SQLite). MySQL and MariaDB are left as they are.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from readyq.migrations import current_prefix

revision = "readyq_0018"
down_revision = "readyq_0017"
branch_labels = None
depends_on = None

# As written by this revision, whatever later versions of schema.py say.
READY = "state = 'ready'"
DELAYED = "state = 'ready' AND run_after IS NOT NULL"


def _rebuild(where: str) -> None:
    if op.get_context().dialect.name not in ("postgresql", "sqlite"):
        return
    jobs = f"{current_prefix()}jobs"
    op.drop_index(f"{jobs}_state_run_after_ix", table_name=jobs)
    op.create_index(
        f"{jobs}_state_run_after_ix",
        jobs,
        ["run_after"],
        postgresql_where=sa.text(where),
        sqlite_where=sa.text(where),
    )


def upgrade() -> None:
    _rebuild(DELAYED)


def downgrade() -> None:
    _rebuild(READY)
