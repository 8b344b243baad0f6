"""readyq's initial schema: jobs, job_deps, groups and the one-row gate.

Revision ID: readyq_0001
Revises: (none; the root of the ``readyq`` branch)

The same tables, columns, types, indexes and constraint names as
``readyq.schema.build_tables(prefix)`` at this revision, written out here so that later
changes to ``schema.py`` never change what this revision did. Names follow the schema's
naming convention: ``<table>_pk``, ``<table>_<column>_fk``, ``<table>_<columns>_ix``.
MySQL and MariaDB name every primary key PRIMARY and warn about any other name, so
there the primary keys are given none.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from readyq.migrations import current_prefix

revision = "readyq_0001"
down_revision = None
branch_labels = ("readyq",)
depends_on = None

# Frozen copies of the column types in readyq.schema.
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Payload = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
Instant: sa.Double[float] = sa.Double()
Key = sa.String(200).with_variant(
    mysql.VARCHAR(200, charset="utf8mb4", collation="utf8mb4_bin"), "mysql", "mariadb"
)
READY = "state = 'ready'"


def _pk(name: str) -> str | None:
    return None if op.get_context().dialect.name in ("mysql", "mariadb") else name


def upgrade() -> None:
    p = current_prefix()
    jobs, deps, groups, gate = f"{p}jobs", f"{p}job_deps", f"{p}groups", f"{p}gate"

    gate_table = op.create_table(
        gate,
        sa.Column("id", sa.Integer, nullable=False, autoincrement=False),
        sa.Column("vclock", sa.Double, nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("id", name=_pk(f"{gate}_pk")),
    )
    op.create_table(
        groups,
        sa.Column("group_key", Key, nullable=False),
        sa.Column("vfinish", sa.Double, nullable=False),
        sa.Column("served_seq", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("group_key", name=_pk(f"{groups}_pk")),
    )
    op.create_table(
        jobs,
        sa.Column("id", Id, nullable=False, autoincrement=True),
        sa.Column("type", Key, nullable=False),
        sa.Column("args", Payload, nullable=False),
        sa.Column("result", Payload, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("is_container", sa.Boolean, nullable=False),
        sa.Column("parent_id", Id, nullable=True),
        sa.Column("group_key", Key, nullable=False),
        sa.Column("weight", sa.Integer, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        sa.Column("timeout", sa.Double, nullable=True),
        sa.Column("retry_on_timeout", sa.Boolean, nullable=False),
        sa.Column("pending_deps", sa.Integer, nullable=False),
        sa.Column("open_children", sa.Integer, nullable=False),
        sa.Column("failed_children", sa.Integer, nullable=False),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
        sa.Column("lease_owner", sa.String(120), nullable=True),
        sa.Column("lease_token", sa.BigInteger, nullable=False),
        sa.Column("lease_expires", Instant, nullable=True),
        sa.Column("heartbeat_at", Instant, nullable=True),
        sa.Column("deadline", Instant, nullable=True),
        sa.Column("run_after", Instant, nullable=True),
        sa.Column("created_at", Instant, nullable=False),
        sa.Column("updated_at", Instant, nullable=False),
        sa.Column("started_at", Instant, nullable=True),
        sa.Column("finished_at", Instant, nullable=True),
        sa.PrimaryKeyConstraint("id", name=_pk(f"{jobs}_pk")),
        sa.ForeignKeyConstraint(["parent_id"], [f"{jobs}.id"], name=f"{jobs}_parent_id_fk"),
    )
    # The two ready indexes are partial where the database has partial indexes
    # (PostgreSQL, SQLite) and plain composite indexes on MySQL/MariaDB.
    op.create_index(
        f"{jobs}_ready_group_ix",
        jobs,
        ["state", "group_key", sa.text("priority DESC"), "id"],
        postgresql_where=sa.text(READY),
        sqlite_where=sa.text(READY),
    )
    op.create_index(f"{jobs}_state_lease_expires_ix", jobs, ["state", "lease_expires"])
    op.create_index(
        f"{jobs}_state_run_after_ix",
        jobs,
        ["state", "run_after"],
        postgresql_where=sa.text(READY),
        sqlite_where=sa.text(READY),
    )
    op.create_index(f"{jobs}_parent_id_ix", jobs, ["parent_id"])

    op.create_table(
        deps,
        sa.Column("job_id", Id, nullable=False),
        sa.Column("depends_on_id", Id, nullable=False),
        sa.PrimaryKeyConstraint("job_id", "depends_on_id", name=_pk(f"{deps}_pk")),
        sa.ForeignKeyConstraint(
            ["job_id"], [f"{jobs}.id"], name=f"{deps}_job_id_fk", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["depends_on_id"], [f"{jobs}.id"], name=f"{deps}_depends_on_id_fk"),
    )
    op.create_index(f"{deps}_depends_on_id_ix", deps, ["depends_on_id"])

    op.bulk_insert(gate_table, [{"id": 1, "vclock": 0.0, "seq": 0}])


def downgrade() -> None:
    p = current_prefix()
    op.drop_table(f"{p}job_deps")
    op.drop_table(f"{p}jobs")
    op.drop_table(f"{p}groups")
    op.drop_table(f"{p}gate")
