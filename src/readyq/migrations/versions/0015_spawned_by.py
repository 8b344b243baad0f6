"""Who spawned a job.

Revision ID: readyq_0015
Revises: readyq_0014

* ``jobs.spawned_by``: the id of the job whose handler spawned this one with
  ``Job.spawn`` (NULL for a job enqueued any other way). No foreign key: a spawning job
  may be pruned before the jobs it spawned.

The new column is nullable with no default: adding it rewrites no row on PostgreSQL,
MariaDB (instant ADD COLUMN) or SQLite.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from readyq.migrations import current_prefix

revision = "readyq_0015"
down_revision = "readyq_0014"
branch_labels = None
depends_on = None

# As written by this revision, whatever later versions of schema.py say.
ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.add_column(f"{current_prefix()}jobs", sa.Column("spawned_by", ID, nullable=True))


def downgrade() -> None:
    op.drop_column(f"{current_prefix()}jobs", "spawned_by")
