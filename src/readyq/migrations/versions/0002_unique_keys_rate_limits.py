"""Unique jobs and rate limits.

Revision ID: readyq_0002
Revises: readyq_0001

* ``jobs.unique_key`` and a unique index over the keys of jobs that have not ended:
  partial on PostgreSQL and SQLite; on MySQL and MariaDB, which have no partial indexes,
  on the stored generated column ``live_unique_key`` (the key while the job has not
  ended, NULL afterwards).
* ``rate_limits`` (one row per limit) and ``rate_slots`` (the latest starts of each).

Every step is an ADD COLUMN, CREATE INDEX or CREATE TABLE, which SQLite runs in place:
the jobs table is not rebuilt, so no batch mode is needed and its rows (and the foreign
keys pointing at them) are left alone. On MySQL and MariaDB, adding the stored column
rewrites the jobs table once.

The column types and SQL text are frozen copies of ``readyq.schema`` at this revision.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from readyq.migrations import current_prefix

revision = "readyq_0002"
down_revision = "readyq_0001"
branch_labels = None
depends_on = None

Key = sa.String(200).with_variant(
    mysql.VARCHAR(200, charset="utf8mb4", collation="utf8mb4_bin"), "mysql", "mariadb"
)
Instant: sa.Double[float] = sa.Double()
NOT_ENDED = "state NOT IN ('done', 'failed', 'cancelled', 'upstream_failed')"
LIVE_KEY_WHERE = f"unique_key IS NOT NULL AND {NOT_ENDED}"
LIVE_KEY_EXPRESSION = f"CASE WHEN {NOT_ENDED} THEN unique_key END"


def _is_mysql() -> bool:
    return op.get_context().dialect.name in ("mysql", "mariadb")


def _pk(name: str) -> str | None:
    # MySQL and MariaDB name every primary key PRIMARY and warn about any other name.
    return None if _is_mysql() else name


def upgrade() -> None:
    p = current_prefix()
    jobs, limits, slots = f"{p}jobs", f"{p}rate_limits", f"{p}rate_slots"
    live_index = f"{p}jobs_live_unique_key_uq"

    op.add_column(jobs, sa.Column("unique_key", Key, nullable=True))
    if _is_mysql():
        op.add_column(
            jobs,
            sa.Column(
                "live_unique_key", Key, sa.Computed(LIVE_KEY_EXPRESSION, persisted=True)
            ),
        )
        op.create_index(live_index, jobs, ["live_unique_key"], unique=True)
    else:
        op.create_index(
            live_index,
            jobs,
            ["unique_key"],
            unique=True,
            postgresql_where=sa.text(LIVE_KEY_WHERE),
            sqlite_where=sa.text(LIVE_KEY_WHERE),
        )

    op.create_table(
        limits,
        sa.Column("name", Key, nullable=False),
        sa.Column("capacity", sa.Integer, nullable=False),
        sa.Column("period", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("name", name=_pk(f"{limits}_pk")),
    )
    op.create_table(
        slots,
        sa.Column("name", Key, nullable=False),
        sa.Column("slot", sa.Integer, nullable=False, autoincrement=False),
        sa.Column("started_at", Instant, nullable=False),
        sa.PrimaryKeyConstraint("name", "slot", name=_pk(f"{slots}_pk")),
    )
    op.create_index(f"{slots}_name_started_at_ix", slots, ["name", "started_at"])


def downgrade() -> None:
    p = current_prefix()
    jobs = f"{p}jobs"
    op.drop_table(f"{p}rate_slots")
    op.drop_table(f"{p}rate_limits")
    op.drop_index(f"{p}jobs_live_unique_key_uq", table_name=jobs)
    if _is_mysql():
        op.drop_column(jobs, "live_unique_key")
    op.drop_column(jobs, "unique_key")
