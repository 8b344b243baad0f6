"""Named resources: what each job takes of them, their capacities, reservations.

Revision ID: readyq_0009
Revises: readyq_0008

* ``jobs.uses``: the job's costs in named resources as canonical JSON (``{"gpu": 2}``),
  NULL for a job that takes what its handler declares (written when it is claimed).
* ``resources``: each resource's capacity as the latest claim saw it, for ``status``
  and the dashboard. The claim never trusts it: each worker evaluates its capacity.
* ``reservations``: the jobs whose units are held for them because they were next in
  fair-share order and did not fit.

The new column is nullable with no default: adding it rewrites no row on PostgreSQL,
MariaDB (instant ADD COLUMN) or SQLite.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from readyq.migrations import current_prefix

revision = "readyq_0009"
down_revision = "readyq_0008"
branch_labels = None
depends_on = None

# As written by this revision, whatever later versions of schema.py say.
USES = (
    sa.String(1000)
    .with_variant(mysql.VARCHAR(1000, charset="utf8mb4", collation="utf8mb4_bin"),
                  "mysql", "mariadb")
    .with_variant(sa.Text(), "sqlite")
)
KEY = sa.String(200).with_variant(
    mysql.VARCHAR(200, charset="utf8mb4", collation="utf8mb4_bin"), "mysql", "mariadb"
)
ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _named_primary_keys() -> bool:
    return op.get_context().dialect.name not in ("mysql", "mariadb")


def upgrade() -> None:
    p = current_prefix()
    op.add_column(f"{p}jobs", sa.Column("uses", USES, nullable=True))
    named = _named_primary_keys()
    op.create_table(
        f"{p}resources",
        sa.Column("name", KEY, nullable=False),
        sa.Column("capacity", sa.Integer, nullable=False),
        sa.Column("seen_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("name", name=f"{p}resources_pk" if named else None),
    )
    op.create_table(
        f"{p}reservations",
        sa.Column("job_id", ID, nullable=False, autoincrement=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("uses", USES, nullable=True),
        sa.PrimaryKeyConstraint("job_id", name=f"{p}reservations_pk" if named else None),
    )


def downgrade() -> None:
    p = current_prefix()
    op.drop_table(f"{p}reservations")
    op.drop_table(f"{p}resources")
    op.drop_column(f"{p}jobs", "uses")
