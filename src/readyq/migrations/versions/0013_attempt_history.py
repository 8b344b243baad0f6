"""The history of attempts, and who asked for a cancel.

Revision ID: readyq_0013
Revises: readyq_0012

* ``attempts``: one row per attempt that did not end its job done (retried, failed,
  cancelled, timed out, its lease expired, handed back), keyed by the job and the
  attempt's lease token, with its worker, start, end, outcome and error. A job that
  succeeds at once writes nothing here; its row holds the attempt that ended it done.
  Deleted with its job (ON DELETE CASCADE), so ``prune`` takes it along.
* ``jobs.cancelled_by``: "api", "cli" or "dashboard" for a job an operator cancelled.

The new column is nullable with no default: adding it rewrites no row on PostgreSQL,
MariaDB (instant ADD COLUMN) or SQLite.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from readyq.migrations import current_prefix

revision = "readyq_0013"
down_revision = "readyq_0012"
branch_labels = None
depends_on = None

# As written by this revision, whatever later versions of schema.py say.
ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
WORKER_ID = sa.String(120)


def _named_primary_keys() -> bool:
    return op.get_context().dialect.name not in ("mysql", "mariadb")


def upgrade() -> None:
    p = current_prefix()
    op.add_column(f"{p}jobs", sa.Column("cancelled_by", sa.String(16), nullable=True))
    named = _named_primary_keys()
    op.create_table(
        f"{p}attempts",
        sa.Column("job_id", ID, nullable=False, autoincrement=False),
        sa.Column("lease_token", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("worker", WORKER_ID, nullable=True),
        sa.Column("started_at", sa.Double, nullable=True),
        sa.Column("ended_at", sa.Double, nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint(
            "job_id", "lease_token", name=f"{p}attempts_pk" if named else None
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], [f"{p}jobs.id"], name=f"{p}attempts_job_id_fk", ondelete="CASCADE"
        ),
    )


def downgrade() -> None:
    p = current_prefix()
    op.drop_table(f"{p}attempts")
    op.drop_column(f"{p}jobs", "cancelled_by")
