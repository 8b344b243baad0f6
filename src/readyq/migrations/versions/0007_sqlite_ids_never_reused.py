"""Job ids never come back on SQLite.

Revision ID: readyq_0007
Revises: readyq_0006

Without AUTOINCREMENT, SQLite gives a new row the largest id in its table plus one: once
the newest jobs were pruned, the next job took the id of a pruned one, which users may
still hold in their own tables and logs. With AUTOINCREMENT, SQLite keeps the largest id
it ever gave in ``sqlite_sequence`` and never goes below it. PostgreSQL's and MySQL's
sequences never go back: there this revision does nothing.

SQLite cannot add AUTOINCREMENT to a table, so the jobs table is rebuilt in batch mode:
a new table with AUTOINCREMENT, every row copied with its id, the old table dropped and
the new one renamed into place (SQLite then writes its name quoted in its schema, as
``CREATE TABLE "readyq_jobs"``: the same table). ``sqlite_sequence`` then starts at the
largest id in the table. The ids of jobs pruned before this revision above the largest
id left are recorded nowhere: the next jobs may take them once more, as they would have
without it. The table's indexes are made again with the text they had (readyq_0002 to
readyq_0006). Its foreign keys, its own ``parent_id`` and the two of ``job_deps``, name
the table, and hold again once it is renamed. The downgrade rebuilds it the same way,
without AUTOINCREMENT.

Foreign key enforcement must be off for the rebuild: with it on, dropping the old table
would first delete its rows, and with them, by ON DELETE CASCADE, every dependency edge
(or fail, where a job has a parent). readyq's environment switches it off before any
revision writes (:func:`readyq.migrations.sqlite_foreign_keys_off`); where it is still on
(a transaction was already open), this revision refuses to run. The rebuild runs in one
transaction and checks the foreign keys of both tables before it ends; a failure leaves
the old table exactly as it was.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from readyq.migrations import current_prefix, sqlite_foreign_keys_off

revision = "readyq_0007"
down_revision = "readyq_0006"
branch_labels = None
depends_on = None

# The SQLite jobs table as readyq_0006 left it, frozen here whatever later versions of
# schema.py say (on SQLite, Id is INTEGER, as AUTOINCREMENT requires, and Key is VARCHAR).
Id = sa.Integer()
Key = sa.String(200)
Payload = sa.Text()
Instant: sa.Double[float] = sa.Double()
READY = "state = 'ready'"
NOT_ENDED = "state NOT IN ('done', 'failed', 'cancelled', 'upstream_failed')"
LIVE_KEY_WHERE = f"unique_key IS NOT NULL AND {NOT_ENDED}"


def _is_sqlite() -> bool:
    return op.get_context().dialect.name == "sqlite"


def _jobs(name: str, *, autoincrement: bool) -> sa.Table:
    return sa.Table(
        name,
        sa.MetaData(),
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
        sa.Column("unique_key", Key, nullable=True),
        # With AUTOINCREMENT, SQLite takes the key on the column and SQLAlchemy writes no
        # name for it; without, it is the named key of readyq_0001.
        sa.PrimaryKeyConstraint("id", name=f"{name}_pk"),
        sa.ForeignKeyConstraint(["parent_id"], [f"{name}.id"], name=f"{name}_parent_id_fk"),
        sqlite_autoincrement=autoincrement,
    )


def _indexes(jobs: str, prefix: str) -> None:
    """The jobs table's indexes, as readyq_0002 to readyq_0006 made them on SQLite."""

    def index(
        name: str, columns: list[str | sa.TextClause], where: str, unique: bool = False
    ) -> None:
        op.create_index(name, jobs, columns, unique=unique, sqlite_where=sa.text(where))

    desc = sa.text("priority DESC")
    index(f"{prefix}jobs_live_unique_key_uq", ["unique_key"], LIVE_KEY_WHERE, unique=True)
    index(f"{jobs}_ready_group_ix", ["group_key", desc, "id"], READY)
    index(f"{jobs}_state_run_after_ix", ["run_after"], READY)
    index(f"{jobs}_state_lease_expires_ix", ["state", "lease_expires"],
          "state IN ('leased', 'running')")
    index(f"{jobs}_parent_id_ix", ["parent_id"], "parent_id IS NOT NULL")
    index(f"{jobs}_waiting_type_ix", ["type"], "state = 'waiting'")
    index(f"{jobs}_ready_type_ix", ["type", "group_key", desc, "id"], READY)


def _rebuild(*, autoincrement: bool) -> None:
    from readyq.admin import AdminError

    prefix = current_prefix()
    jobs, deps = f"{prefix}jobs", f"{prefix}job_deps"
    if op.get_context().as_sql:
        # The script runs outside any transaction, where the pragma takes effect.
        op.execute(sa.text("PRAGMA foreign_keys = OFF"))
    elif not sqlite_foreign_keys_off(op.get_bind()):
        raise AdminError(
            f"revision {revision} rebuilds {jobs}, which needs SQLite's foreign key "
            "enforcement off, and PRAGMA foreign_keys cannot change inside the "
            "transaction already open on this connection: migrate on a connection that "
            "has written nothing yet (readyq migrate, admin.migrate), or switch foreign "
            "keys off before the migration's transaction begins"
        )
    else:
        # Python's sqlite3 begins a transaction at the first INSERT, UPDATE or DELETE, not
        # at CREATE TABLE: a write that changes nothing begins it here, so that the new
        # table is part of it and a failure leaves the old one exactly as it was.
        op.execute(sa.text(f"UPDATE {prefix}gate SET id = id WHERE 0 = 1"))
    with op.batch_alter_table(
        jobs, recreate="always", copy_from=_jobs(jobs, autoincrement=autoincrement)
    ):
        pass
    _indexes(jobs, prefix)
    if op.get_context().as_sql:
        return
    bind = op.get_bind()
    broken = [
        tuple(row)
        for table in (jobs, deps)
        for row in bind.exec_driver_sql(f"PRAGMA foreign_key_check({table})").all()
    ]
    if broken:
        raise AdminError(
            f"{len(broken)} rows of {jobs} or {deps} refer to jobs that do not exist "
            f"(table, rowid, referred table, key: {broken[0]}); revision {revision} "
            "changed nothing: delete or repair those rows and migrate again"
        )


def upgrade() -> None:
    if _is_sqlite():
        _rebuild(autoincrement=True)


def downgrade() -> None:
    if _is_sqlite():
        _rebuild(autoincrement=False)
