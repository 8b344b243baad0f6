"""What a job's attempts keep: durable steps, saved state, progress, batch keys.

Revision ID: readyq_0016
Revises: readyq_0015

* ``steps``: the result of each ``Job.step`` that returned, by job and step name, with
  the attempt that stored it and when.
* ``checkpoints``: per job, the state ``Job.save_state`` saved last (and the attempt
  that saved it) and the progress ``Job.progress`` reported last.
* ``jobs.batch_key``: the ``key`` a job was given in its ``enqueue_many`` batch.

Both tables are deleted with their job (ON DELETE CASCADE), so ``prune`` takes them
along. The new column is nullable with no default: adding it rewrites no row on
PostgreSQL, MariaDB (instant ADD COLUMN) or SQLite.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from readyq.migrations import current_prefix

revision = "readyq_0016"
down_revision = "readyq_0015"
branch_labels = None
depends_on = None

# As written by this revision, whatever later versions of schema.py say.
ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
KEY = sa.String(200).with_variant(
    mysql.VARCHAR(200, charset="utf8mb4", collation="utf8mb4_bin"), "mysql", "mariadb"
)
PAYLOAD = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")


def _named_primary_keys() -> bool:
    return op.get_context().dialect.name not in ("mysql", "mariadb")


def upgrade() -> None:
    p = current_prefix()
    named = _named_primary_keys()
    op.add_column(f"{p}jobs", sa.Column("batch_key", KEY, nullable=True))
    op.create_table(
        f"{p}steps",
        sa.Column("job_id", ID, nullable=False, autoincrement=False),
        sa.Column("name", KEY, nullable=False),
        sa.Column("result", PAYLOAD, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("stored_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("job_id", "name", name=f"{p}steps_pk" if named else None),
        sa.ForeignKeyConstraint(
            ["job_id"], [f"{p}jobs.id"], name=f"{p}steps_job_id_fk", ondelete="CASCADE"
        ),
    )
    op.create_table(
        f"{p}checkpoints",
        sa.Column("job_id", ID, nullable=False, autoincrement=False),
        sa.Column("state", PAYLOAD, nullable=True),
        sa.Column("state_attempt", sa.Integer, nullable=True),
        sa.Column("saved_at", sa.Double, nullable=True),
        sa.Column("progress_current", sa.Double, nullable=True),
        sa.Column("progress_total", sa.Double, nullable=True),
        sa.Column("progress_message", sa.Text, nullable=True),
        sa.Column("progress_at", sa.Double, nullable=True),
        sa.PrimaryKeyConstraint("job_id", name=f"{p}checkpoints_pk" if named else None),
        sa.ForeignKeyConstraint(
            ["job_id"], [f"{p}jobs.id"], name=f"{p}checkpoints_job_id_fk", ondelete="CASCADE"
        ),
    )


def downgrade() -> None:
    p = current_prefix()
    op.drop_table(f"{p}checkpoints")
    op.drop_table(f"{p}steps")
    op.drop_column(f"{p}jobs", "batch_key")
