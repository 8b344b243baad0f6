"""Periodic schedules: each schedule's progress, and the occurrences it fired.

Revision ID: readyq_0017
Revises: readyq_0016

* ``schedules``: one row per schedule name: the definition that stands (a fingerprint
  and the same in words), the last and next fire times (whole epoch seconds), whether it
  is paused, and a different definition seen last (a conflict), with when.
* ``schedule_fires``: one row per occurrence fired, keyed by (name, fire time), written
  in the transaction that enqueued the occurrence's jobs, with the first job's id.

Two new tables and nothing else: self-contained, so it can be renumbered on its own.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from readyq.migrations import current_prefix

revision = "readyq_0017"
down_revision = "readyq_0016"
branch_labels = None
depends_on = None

# As written by this revision, whatever later versions of schema.py say.
ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
KEY = sa.String(200).with_variant(
    mysql.VARCHAR(200, charset="utf8mb4", collation="utf8mb4_bin"), "mysql", "mariadb"
)


def _named_primary_keys() -> bool:
    return op.get_context().dialect.name not in ("mysql", "mariadb")


def upgrade() -> None:
    p = current_prefix()
    named = _named_primary_keys()
    op.create_table(
        f"{p}schedules",
        sa.Column("name", KEY, nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("definition", sa.Text, nullable=False),
        sa.Column("last_fire_at", sa.BigInteger, nullable=True),
        sa.Column("next_fire_at", sa.BigInteger, nullable=False),
        sa.Column("paused", sa.Boolean, nullable=False),
        sa.Column("conflict", sa.Text, nullable=True),
        sa.Column("conflict_at", sa.Double, nullable=True),
        sa.Column("updated_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("name", name=f"{p}schedules_pk" if named else None),
    )
    op.create_table(
        f"{p}schedule_fires",
        sa.Column("name", KEY, nullable=False),
        sa.Column("fire_at", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("job_id", ID, nullable=True),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint(
            "name", "fire_at", name=f"{p}schedule_fires_pk" if named else None
        ),
    )


def downgrade() -> None:
    p = current_prefix()
    op.drop_table(f"{p}schedule_fires")
    op.drop_table(f"{p}schedules")
