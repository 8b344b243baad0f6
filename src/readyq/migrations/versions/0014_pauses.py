"""Pauses: groups and job types that no claim takes jobs of, for a while or until resumed.

Revision ID: readyq_0014
Revises: readyq_0013

* ``pauses``: one row per paused group, type, or type within a group (the other column
  is the empty string), with the database instant that ends it (NULL: until a resume).
* ``gate.pauses``: how many pause rows stand. The claim already reads the gate row under
  its lock; it reads the pauses only when this count is not 0.

The new gate column has a server default of 0: the one gate row needs no rewrite.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from readyq.migrations import current_prefix

revision = "readyq_0014"
down_revision = "readyq_0013"
branch_labels = None
depends_on = None

# As written by this revision, whatever later versions of schema.py say.
KEY = sa.String(200).with_variant(
    mysql.VARCHAR(200, charset="utf8mb4", collation="utf8mb4_bin"), "mysql", "mariadb"
)


def _named_primary_keys() -> bool:
    return op.get_context().dialect.name not in ("mysql", "mariadb")


def upgrade() -> None:
    p = current_prefix()
    op.add_column(
        f"{p}gate", sa.Column("pauses", sa.Integer, nullable=False, server_default="0")
    )
    op.create_table(
        f"{p}pauses",
        sa.Column("group_key", KEY, nullable=False),
        sa.Column("type", KEY, nullable=False),
        sa.Column("until", sa.Double, nullable=True),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint(
            "group_key", "type", name=f"{p}pauses_pk" if _named_primary_keys() else None
        ),
    )


def downgrade() -> None:
    p = current_prefix()
    op.drop_table(f"{p}pauses")
    op.drop_column(f"{p}gate", "pauses")
