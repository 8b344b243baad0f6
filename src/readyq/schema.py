"""The one schema definition: tables built from a validated table prefix.

Every instant that readyq compares (leases, deadlines, run_after) is stored as seconds
since the Unix epoch in a double-precision column and compared with the database's own
clock (see :meth:`readyq.dialects.base.Dialect.now`). One numeric type behaves the same
on all three databases, where SQLite would otherwise compare datetimes as text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeGuard

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from readyq.errors import InvalidTablePrefix

# Lower case only: see validate_prefix.
PREFIX_PATTERN = re.compile(r"^[a-z_][a-z0-9_]{0,30}$")
DEFAULT_PREFIX = "readyq_"

# Constraint and index names are part of the contract: error translation and the
# migrations refer to them.
NAMING_CONVENTION = {
    "ix": "%(table_name)s_%(column_0_N_name)s_ix",
    "uq": "%(table_name)s_%(column_0_N_name)s_uq",
    "fk": "%(table_name)s_%(column_0_name)s_fk",
    "pk": "%(table_name)s_pk",
    "ck": "%(table_name)s_%(constraint_name)s_ck",
}
# For databases whose primary keys cannot be named (TableTraits.named_primary_keys).
UNNAMED_PRIMARY_KEYS = {k: v for k, v in NAMING_CONVENTION.items() if k != "pk"}

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
# MySQL's TEXT stops at 64 KiB; LONGTEXT holds any payload under our own size limit.
Payload = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
Instant: sa.Double[float] = sa.Double()
# Job types and group keys are compared exactly, as in Python: MySQL's and MariaDB's
# default collations would make "Tenant" equal "tenant" (and "café" equal "cafe").
Key = sa.String(200).with_variant(
    mysql.VARCHAR(200, charset="utf8mb4", collation="utf8mb4_bin"), "mysql", "mariadb"
)


# A job holds its unique key while it has not ended. The predicate is SQL text so that
# create_schema() and the migrations write the very same text (SQLite keeps it verbatim).
NOT_ENDED = "state NOT IN ('done', 'failed', 'cancelled', 'upstream_failed')"
# PostgreSQL and SQLite: a partial unique index over the keys of jobs that have not ended.
LIVE_KEY_WHERE = f"unique_key IS NOT NULL AND {NOT_ENDED}"
# MySQL and MariaDB have no partial indexes: a stored generated column equals the key
# while the job has not ended and is NULL afterwards, and a unique index on it (which
# admits any number of NULLs) does the same job.
LIVE_KEY_EXPRESSION = f"CASE WHEN {NOT_ENDED} THEN unique_key END"
# MySQL and MariaDB: the type of a job waiting for its dependencies, else NULL (a
# virtual generated column, indexed in place of a partial index).
WAITING_TYPE_EXPRESSION = "CASE WHEN state = 'waiting' THEN type END"
# MySQL and MariaDB: the type of a ready job, else NULL (indexed the same way).
READY_TYPE_EXPRESSION = "CASE WHEN state = 'ready' THEN type END"
# Jobs that ended badly: the listings of failed, cancelled and upstream_failed jobs read
# them through an index that holds only them (migration readyq_0008).
BAD_END = "state IN ('failed', 'cancelled', 'upstream_failed')"
# SQLite's predicate of that index, as comparisons: SQLite tests an IN list of three
# values or more through a temporary B-tree, on every write of a row (migration
# readyq_0010). Listings write it as is: SQLite takes a partial index only for a query
# whose terms contain its predicate.
BAD_END_COMPARISONS = "state = 'failed' OR state = 'cancelled' OR state = 'upstream_failed'"
# MySQL and MariaDB: the state of a job that ended badly, else NULL (a virtual column,
# indexed in place of the partial index).
BAD_END_STATE_EXPRESSION = f"CASE WHEN {BAD_END} THEN state END"
# Ready jobs that carry costs of their own (migration readyq_0011): a claim that weighs
# resources asks whether any of its types has one, and when none has, claims through the
# plain claim statement. The predicate of a partial index on PostgreSQL and SQLite; on
# MySQL and MariaDB, the type of such a job, else NULL, in an indexed virtual column.
COSTED_READY = "state = 'ready' AND uses IS NOT NULL"
COSTED_TYPE_EXPRESSION = f"CASE WHEN {COSTED_READY} THEN type END"
# Containers that have not ended (migration readyq_0012): the report of what is stuck
# reads them, and no claim or finish of a job writes to their index. On MySQL and
# MariaDB, the type of such a container, else NULL, in an indexed virtual column.
ACTIVE = "state = 'active'"
ACTIVE_TYPE_EXPRESSION = f"CASE WHEN {ACTIVE} THEN type END"


MAX_KEY_CHARS = 200
# The longest worker id: a lease's owner.
MAX_WORKER_ID_CHARS = 120
# A job's resource costs as canonical JSON (readyq.resources bounds its length). SQLite
# enforces no length, and its planner sizes rows by the declared ones: a wide VARCHAR
# there tips its choice of index for the listings, so it is plain TEXT.
MAX_USES_CHARS = 1000
Uses = (
    sa.String(MAX_USES_CHARS)
    .with_variant(
        mysql.VARCHAR(MAX_USES_CHARS, charset="utf8mb4", collation="utf8mb4_bin"),
        "mysql", "mariadb",
    )
    .with_variant(sa.Text(), "sqlite")
)


def key_problem(value: object, *, remember: bool = False) -> str | None:
    """Why ``value`` cannot be a key (job type, group, unique key, rate limit name), or
    None if it can. With ``remember``, a good key is remembered (a few thousand at most)
    and not checked again: job types and groups repeat across a batch."""
    if type(value) is str and value in _good_keys:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_KEY_CHARS:
        return f"must be a non-empty string of at most {MAX_KEY_CHARS} characters"
    problem = _str_key_problem(value)
    if remember and problem is None and type(value) is str and len(_good_keys) < 4096:
        _good_keys.add(value)
    return problem


_good_keys: set[str] = set()


def _str_key_problem(value: str) -> str | None:
    if "\x00" in value:  # PostgreSQL text cannot hold NUL; refuse it on every database
        return "must not contain NUL characters"
    # MySQL/MariaDB collations are PAD SPACE ('a' = 'a '): a key with edge whitespace
    # would match another key there and not elsewhere, so it is refused everywhere.
    if value != value.strip():
        return "must not start or end with whitespace"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: no database can store them
        return "is not valid Unicode"
    return None


def in_flight_index_name(jobs_table: str) -> str:
    """The (state, lease_expires) index of the jobs in flight; MySQL's in-flight count
    names it in an index hint."""
    return f"{jobs_table}_state_lease_expires_ix"


def ready_type_index_name(jobs_table: str) -> str:
    """The index of ready jobs by type; MySQL's probe of it names it (``FORCE INDEX``)."""
    return f"{jobs_table}_ready_type_ix"


def bad_end_index_name(jobs_table: str) -> str:
    """The index of jobs that ended badly, by state then id (the listings' order)."""
    return f"{jobs_table}_bad_end_ix"


def costed_index_name(jobs_table: str) -> str:
    """The index of ready jobs with costs of their own, by type (migration readyq_0011)."""
    return f"{jobs_table}_costed_ready_ix"


def active_index_name(jobs_table: str) -> str:
    """The index of containers that have not ended, by type (migration readyq_0012)."""
    return f"{jobs_table}_active_type_ix"


def live_key_index_name(prefix: str) -> str:
    """The unique index over live keys; error translation matches on this name."""
    return f"{prefix}jobs_live_unique_key_uq"


def validate_prefix(prefix: str) -> str:
    """Return ``prefix`` if it is a safe identifier prefix, else raise InvalidTablePrefix.

    A prefix is lower-case letters, digits and underscores. Upper-case letters are
    refused rather than folded to lower case, because the databases disagree on what a
    name's case means. MariaDB and MySQL compare constraint names without case (and
    SQLite table names too), so ``NewComer_`` would collide with the tables of
    ``newcomer_`` (MariaDB: errno 121 "Duplicate key on write or update") or silently
    share them (SQLite), while PostgreSQL quotes a mixed-case name and keeps it apart
    from the lower-case one. Folding would thus quietly point a mixed-case PostgreSQL
    schema at other, empty tables; a refusal that names the lower-case prefix cannot.
    """
    if isinstance(prefix, str) and prefix != prefix.lower() and PREFIX_PATTERN.fullmatch(
        prefix.lower()
    ):
        raise InvalidTablePrefix(
            f"table prefix {prefix!r} has upper-case letters: use {prefix.lower()!r}. "
            "Prefixes are lower case, because MariaDB, MySQL and SQLite compare table "
            "and constraint names without case"
        )
    # fullmatch: with match(), "$" also accepts a trailing newline ("jobs\n").
    if not isinstance(prefix, str) or not PREFIX_PATTERN.fullmatch(prefix):
        raise InvalidTablePrefix(
            f"table prefix {prefix!r} must match {PREFIX_PATTERN.pattern} "
            "(lower-case letters, digits and underscores, at most 31 characters)"
        )
    return prefix


# The ranges input is checked against before anything is written, the same on every
# database (each would otherwise refuse some values, or store them as it pleases).
# Job ids: signed 64-bit (BIGINT; SQLite's INTEGER).
MAX_ID = 2**63 - 1
# Attempts (INTEGER columns): max_attempts, and the attempts a retry adds.
MAX_ATTEMPTS = 1_000_000
# Instants are epoch seconds, shown as datetimes (years 1 to 9999). A duration (a
# timeout, a delay, a backoff, a lease, how long ago a listing looks) is at most a
# century of 365.25 days, so that the clock plus or minus it is always such a year.
MAX_SECONDS = 3_155_760_000.0


def is_job_id(value: object) -> TypeGuard[int]:
    """Whether ``value`` can be a job id: an int (not a bool) from 1 to MAX_ID."""
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_ID


# The id of the gate table's single row.
GATE_ID = 1

# A pause's group or type when it names only the other (keys are never empty).
ANY = ""

# ``max_attempts`` of a job enqueued without one: the handler's registration decides,
# in the claim that first runs the job (``readyq.sql.claims.lease_values``).
MAX_ATTEMPTS_FROM_HANDLER = 0
# The attempts of a job when neither its enqueue nor its handler gives a number: the
# default of ``Queue(default_max_attempts=...)``, and what a claim that knows no handler
# for the job's type gives it.
DEFAULT_MAX_ATTEMPTS = 3

# A new job row. The columns a batch insert takes from each job, and the ones every new
# job starts with:
BULK_COLUMNS = (
    "type", "args", "state", "error", "is_container", "parent_id", "group_key", "weight",
    "priority", "max_attempts", "timeout", "pending_deps", "open_children", "unique_key",
    "uses", "batch_key", "spawned_by",
)
# Bulk columns that most jobs leave NULL: an INSERT whose rows all do leaves them out, so
# that it writes only what the job table had before they were added (a job enqueued
# before a migration, or by a process of the release before).
SPARSE_COLUMNS = ("batch_key", "spawned_by")
BULK_CONSTANTS: dict[str, object] = {
    "attempts": 0,
    "failed_children": 0,
    "cancel_requested": False,
    "retry_on_timeout": True,
    "lease_token": 0,
}
# A new row's values as the store builds them: the bulk columns, then what sets the
# times, which the database's clock completes (run_after, finished_at).
ROW_KEYS = (*BULK_COLUMNS, "run_after_at", "run_after_delay", "finished_offset")
# The columns a bulk insert with ids taken beforehand writes, in order.
INSERT_COLUMNS = (
    "id", *BULK_COLUMNS, *BULK_CONSTANTS, "run_after", "created_at", "updated_at",
    "finished_at",
)


@dataclass(frozen=True)
class TableTraits:
    """What the statements over a database's tables may rely on, fixed when the tables
    are built (each dialect declares its own: ``Dialect.table_traits``).

    ``partial_indexes``: the ready, in-flight, waiting and live-key indexes are partial.
    Without them (MySQL, MariaDB) the jobs table has the generated columns
    ``live_unique_key``, ``waiting_type``, ``ready_type``, ``bad_end_state``,
    ``costed_type`` and ``active_type`` that stand in for them, and reads name those
    columns.

    ``type_test``: when set, reads of the ready jobs of some types test the type with it
    (rather than ``IN``) and order by the type first: how PostgreSQL's planner is held to
    the index of ready jobs by type (see :func:`readyq.sql.ready.ready_of_type`).
    """

    partial_indexes: bool = True
    # MySQL and MariaDB call every primary key PRIMARY, and answer a CREATE TABLE that
    # names one with the warning "Name '...' ignored for PRIMARY key" (which asyncmy
    # logs): there primary keys are left unnamed.
    named_primary_keys: bool = True
    type_test: Callable[[sa.ColumnElement[str], Sequence[str]], sa.ColumnElement[bool]] | None = (
        None
    )


@dataclass(frozen=True)
class Tables:
    """The readyq tables for one prefix."""

    metadata: sa.MetaData
    jobs: sa.Table
    deps: sa.Table
    groups: sa.Table
    gate: sa.Table
    rate_limits: sa.Table
    rate_slots: sa.Table
    resources: sa.Table
    reservations: sa.Table
    attempts: sa.Table
    pauses: sa.Table
    steps: sa.Table
    checkpoints: sa.Table
    schedules: sa.Table
    schedule_fires: sa.Table
    traits: TableTraits = TableTraits()

    @property
    def prefix(self) -> str:
        """The table prefix these tables were built for."""
        return self.jobs.name[: -len("jobs")]


def build_tables(prefix: str = DEFAULT_PREFIX, traits: TableTraits = TableTraits()) -> Tables:
    """Build the table definitions for ``prefix`` (validated first), for a database with
    ``traits``."""
    validate_prefix(prefix)
    md = sa.MetaData(
        naming_convention=NAMING_CONVENTION if traits.named_primary_keys
        else UNNAMED_PRIMARY_KEYS
    )
    jobs = sa.Table(
        f"{prefix}jobs",
        md,
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("type", Key, nullable=False),
        sa.Column("args", Payload, nullable=False),
        sa.Column("result", Payload, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("is_container", sa.Boolean, nullable=False, default=False),
        sa.Column("parent_id", Id, sa.ForeignKey(f"{prefix}jobs.id"), nullable=True),
        sa.Column("group_key", Key, nullable=False),
        sa.Column("weight", sa.Integer, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, default=0),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        sa.Column("timeout", sa.Double, nullable=True),
        sa.Column("retry_on_timeout", sa.Boolean, nullable=False, default=True),
        # Upstream jobs not yet done; the job is 'waiting' until this reaches zero.
        sa.Column("pending_deps", sa.Integer, nullable=False, default=0),
        # Containers only: children not yet terminal, and children that ended badly.
        sa.Column("open_children", sa.Integer, nullable=False, default=0),
        sa.Column("failed_children", sa.Integer, nullable=False, default=0),
        sa.Column("cancel_requested", sa.Boolean, nullable=False, default=False),
        sa.Column("lease_owner", sa.String(MAX_WORKER_ID_CHARS), nullable=True),
        # Fencing token: bumped at every claim, never reset.
        sa.Column("lease_token", sa.BigInteger, nullable=False, default=0),
        sa.Column("lease_expires", Instant, nullable=True),
        sa.Column("heartbeat_at", Instant, nullable=True),
        sa.Column("deadline", Instant, nullable=True),
        sa.Column("run_after", Instant, nullable=True),
        sa.Column("created_at", Instant, nullable=False),
        sa.Column("updated_at", Instant, nullable=False),
        sa.Column("started_at", Instant, nullable=True),
        sa.Column("finished_at", Instant, nullable=True),
        # Deduplication key: at most one job that has not ended holds a given key.
        sa.Column("unique_key", Key, nullable=True),
        # An id is never given twice, even once the newest jobs are pruned: without
        # AUTOINCREMENT, SQLite gives the largest id in the table plus one (migration
        # readyq_0007). SQLite takes AUTOINCREMENT on the id column itself, where
        # SQLAlchemy writes no constraint name: on SQLite this primary key is unnamed.
        sqlite_autoincrement=True,
    )
    generated = not traits.partial_indexes
    if generated:
        live = sa.Column(
            "live_unique_key", Key, sa.Computed(LIVE_KEY_EXPRESSION, persisted=True)
        )
        jobs.append_column(live)
        sa.Index(live_key_index_name(prefix), live, unique=True)
    else:
        sa.Index(
            live_key_index_name(prefix),
            jobs.c.unique_key,
            unique=True,
            postgresql_where=sa.text(LIVE_KEY_WHERE),
            sqlite_where=sa.text(LIVE_KEY_WHERE),
        )
    # The ready indexes are partial where the database allows it, and then do not begin
    # with ``state``: PostgreSQL leaves a condition that the predicate implies out of the
    # index conditions, so a leading ``state`` would keep a probe by group from seeking.
    # MySQL and MariaDB have no partial indexes: there ``state`` leads.
    ready = jobs.c.state == "ready"
    lead = [jobs.c.state] if generated else []
    # Delayed jobs only, where the database has partial indexes: a job that runs at once
    # is never looked up by its run_after, and would cost every enqueue and every claim
    # an entry (migration readyq_0018).
    delayed = sa.and_(ready, jobs.c.run_after.is_not(None))
    sa.Index(
        f"{prefix}jobs_state_run_after_ix",
        *lead,
        jobs.c.run_after,
        postgresql_where=delayed,
        sqlite_where=delayed,
    )
    sa.Index(
        f"{prefix}jobs_ready_group_ix",
        *lead,
        jobs.c.group_key,
        jobs.c.priority.desc(),
        jobs.c.id,
        postgresql_where=ready,
        sqlite_where=ready,
    )
    # Only what their readers look for, where the database has partial indexes: each
    # claim and finish rewrites the row with a new state, and every index that holds
    # the row takes a new entry.
    in_flight = jobs.c.state.in_(("leased", "running"))
    sa.Index(
        in_flight_index_name(jobs.name),
        jobs.c.state,
        jobs.c.lease_expires,
        postgresql_where=in_flight,
        sqlite_where=in_flight,
    )
    has_parent = jobs.c.parent_id.is_not(None)
    sa.Index(
        f"{prefix}jobs_parent_id_ix",
        jobs.c.parent_id,
        postgresql_where=has_parent,
        sqlite_where=has_parent,
    )
    # Jobs waiting for their dependencies, by type: whether a worker's types still have
    # unfinished jobs is then read from indexes alone (migration readyq_0004). MySQL and
    # MariaDB have no partial indexes: there the index is on a virtual column that holds
    # the type of waiting jobs only, so that no claim or finish changes its entries.
    if generated:
        waiting_type = sa.Column(
            "waiting_type", Key, sa.Computed(WAITING_TYPE_EXPRESSION, persisted=False)
        )
        jobs.append_column(waiting_type)
        sa.Index(f"{prefix}jobs_waiting_type_ix", waiting_type)
    else:
        waiting = jobs.c.state == "waiting"
        sa.Index(
            f"{prefix}jobs_waiting_type_ix",
            jobs.c.type,
            postgresql_where=waiting,
            sqlite_where=waiting,
        )
    # Ready jobs by type, then in each group's claim order: whether any job of a worker's
    # types is ready is one seek however many jobs of other types are ready (migration
    # readyq_0005), and a worker of one type reads its own type's rows of a group, in the
    # order it claims them, without stepping over the other types' (readyq_0006). MySQL
    # and MariaDB index a virtual column again, here the type of ready jobs.
    by_type = [jobs.c.group_key, jobs.c.priority.desc(), jobs.c.id]
    if generated:
        ready_type = sa.Column(
            "ready_type", Key, sa.Computed(READY_TYPE_EXPRESSION, persisted=False)
        )
        jobs.append_column(ready_type)
        sa.Index(ready_type_index_name(jobs.name), ready_type, *by_type)
    else:
        sa.Index(
            ready_type_index_name(jobs.name),
            jobs.c.type,
            *by_type,
            postgresql_where=ready,
            sqlite_where=ready,
        )

    # Jobs that ended badly, by state and id: a page of failed jobs is one range of it,
    # newest first, however many jobs are done (migration readyq_0008). Rows enter it only
    # when they fail, are cancelled or end upstream_failed, so that no claim and no
    # successful finish writes to it. MySQL and MariaDB index a virtual column again,
    # here the state of a job that ended badly.
    if generated:
        bad_end_state = sa.Column(
            "bad_end_state", sa.String(16), sa.Computed(BAD_END_STATE_EXPRESSION, persisted=False)
        )
        jobs.append_column(bad_end_state)
        sa.Index(bad_end_index_name(jobs.name), bad_end_state, jobs.c.id)
    else:
        sa.Index(
            bad_end_index_name(jobs.name),
            jobs.c.state,
            jobs.c.id,
            postgresql_where=sa.text(BAD_END),
            sqlite_where=sa.text(BAD_END_COMPARISONS),
        )
    # What the job takes of named resources while it runs, as canonical JSON ({"gpu":
    # 2}); NULL: what its handler declares, written here when it is claimed
    # (readyq.resources). Last, where migration readyq_0009 adds it.
    jobs.append_column(sa.Column("uses", Uses, nullable=True))
    # Ready jobs with costs of their own, by type (see COSTED_READY). Claims write the
    # handler's costs into a row only as it leaves the ready state, so that rows enter
    # this index only when enqueued with costs or sent back to ready after a claim.
    if generated:
        costed_type = sa.Column(
            "costed_type", Key, sa.Computed(COSTED_TYPE_EXPRESSION, persisted=False)
        )
        jobs.append_column(costed_type)
        sa.Index(costed_index_name(jobs.name), costed_type)
    else:
        sa.Index(
            costed_index_name(jobs.name),
            jobs.c.type,
            postgresql_where=sa.text(COSTED_READY),
            sqlite_where=sa.text(COSTED_READY),
        )
    # Containers that have not ended, by type (see ACTIVE). Last, where readyq_0012 adds
    # it.
    if generated:
        active_type = sa.Column(
            "active_type", Key, sa.Computed(ACTIVE_TYPE_EXPRESSION, persisted=False)
        )
        jobs.append_column(active_type)
        sa.Index(active_index_name(jobs.name), active_type)
    else:
        sa.Index(
            active_index_name(jobs.name),
            jobs.c.type,
            postgresql_where=sa.text(ACTIVE),
            sqlite_where=sa.text(ACTIVE),
        )
    # Who asked for the job's cancel ("api", "cli", "dashboard"); NULL if nobody did.
    # Last, where migration readyq_0013 adds it.
    jobs.append_column(sa.Column("cancelled_by", sa.String(16), nullable=True))
    # The job whose handler spawned this one (Job.spawn); NULL otherwise. Last, where
    # migration readyq_0015 adds it; no foreign key, as a spawner may be pruned first.
    jobs.append_column(sa.Column("spawned_by", Id, nullable=True))
    # The ``key`` a job was given in its enqueue_many batch (JobSpec.key); NULL for one
    # enqueued alone. ``Job.upstream_results(by="key")`` names results by it. Last,
    # where migration readyq_0016 adds it.
    jobs.append_column(sa.Column("batch_key", Key, nullable=True))

    deps = sa.Table(
        f"{prefix}job_deps",
        md,
        sa.Column(
            "job_id",
            Id,
            sa.ForeignKey(f"{prefix}jobs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column(
            "depends_on_id",
            Id,
            sa.ForeignKey(f"{prefix}jobs.id"),
            primary_key=True,
        ),
    )
    sa.Index(None, deps.c.depends_on_id)

    # Fair-share state shared by every worker: a virtual finish time per group (stride
    # scheduling) and the round-robin sequence that rotates ties.
    groups = sa.Table(
        f"{prefix}groups",
        md,
        sa.Column("group_key", Key, primary_key=True),
        sa.Column("vfinish", sa.Double, nullable=False),
        sa.Column("served_seq", sa.BigInteger, nullable=False),
    )
    # One row. Claim transactions lock it so that the global cap and the fair-share
    # clock are decided by one claimer at a time on every database.
    gate = sa.Table(
        f"{prefix}gate",
        md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("vclock", sa.Double, nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        # How many pause rows stand (expired ones included until they are removed): the
        # claim reads the pauses only when it is not 0, so a queue with none pays nothing.
        sa.Column("pauses", sa.Integer, nullable=False, server_default="0"),
    )
    # Pauses: no claim takes a ready job of a paused group, of a paused type, or of a
    # paused type in a paused group. ``group_key`` or ``type`` is ANY when the pause names
    # only the other; ``until`` (database clock) ends it, NULL holds it until a resume.
    pauses = sa.Table(
        f"{prefix}pauses",
        md,
        sa.Column("group_key", Key, primary_key=True),
        sa.Column("type", Key, primary_key=True),
        sa.Column("until", Instant, nullable=True),
        sa.Column("created_at", Instant, nullable=False),
    )
    # Rate limits shared by every worker: the definition, and a ring of ``capacity`` slots
    # holding the instants of the latest starts (database clock). A start is allowed
    # while some slot is older than ``period``; it then takes the oldest slot.
    rate_limits = sa.Table(
        f"{prefix}rate_limits",
        md,
        sa.Column("name", Key, primary_key=True),
        sa.Column("capacity", sa.Integer, nullable=False),
        sa.Column("period", sa.Double, nullable=False),
    )
    rate_slots = sa.Table(
        f"{prefix}rate_slots",
        md,
        sa.Column("name", Key, primary_key=True),
        sa.Column("slot", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("started_at", Instant, nullable=False),
    )
    sa.Index(None, rate_slots.c.name, rate_slots.c.started_at)
    # Named resources as the claims last saw them: each one's capacity (which workers
    # evaluate, as they do the concurrency cap) and the database instant it was seen. What
    # is in use is never stored: the claim sums it from the jobs in flight.
    resources = sa.Table(
        f"{prefix}resources",
        md,
        sa.Column("name", Key, primary_key=True),
        sa.Column("capacity", sa.Integer, nullable=False),
        sa.Column("seen_at", Instant, nullable=False),
    )
    # Jobs that were next in fair-share order but did not fit: the units they wait for
    # are held for them, in the order of ``seq``, so that smaller jobs cannot starve
    # them. A row whose job is no longer ready is dropped by the next claim.
    reservations = sa.Table(
        f"{prefix}reservations",
        md,
        sa.Column("job_id", Id, primary_key=True, autoincrement=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        # The costs the reserving claim resolved (the handler's, for a job without its
        # own), which every claimer holds for it.
        sa.Column("uses", Uses, nullable=True),
    )
    # The attempts that did not end their job done, one row per lease (a hand-back does
    # not charge an attempt, so attempt numbers may repeat): what a later success would
    # otherwise erase. The attempt that ends a job done is the job's row itself, so that
    # a job that succeeds at once writes nothing here (migration readyq_0013).
    attempts = sa.Table(
        f"{prefix}attempts",
        md,
        sa.Column(
            "job_id", Id, sa.ForeignKey(f"{prefix}jobs.id", ondelete="CASCADE"),
            primary_key=True, autoincrement=False,
        ),
        sa.Column("lease_token", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("worker", sa.String(MAX_WORKER_ID_CHARS), nullable=True),
        sa.Column("started_at", Instant, nullable=True),
        sa.Column("ended_at", Instant, nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("error", sa.Text, nullable=True),
    )
    # What a job's attempts keep for the attempts after them (migration readyq_0016).
    # Steps: the result of each ``Job.step`` that returned, by name, stored under the
    # attempt's lease; a later attempt reads it instead of running the step again.
    steps = sa.Table(
        f"{prefix}steps",
        md,
        sa.Column(
            "job_id", Id, sa.ForeignKey(f"{prefix}jobs.id", ondelete="CASCADE"),
            primary_key=True, autoincrement=False,
        ),
        sa.Column("name", Key, primary_key=True),
        sa.Column("result", Payload, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("stored_at", Instant, nullable=False),
    )
    # One row per job that saved state or reported progress: kept apart from the jobs
    # row, so that the claim's and the finish's rows stay as narrow as they were and a
    # progress write never rewrites a job row.
    checkpoints = sa.Table(
        f"{prefix}checkpoints",
        md,
        sa.Column(
            "job_id", Id, sa.ForeignKey(f"{prefix}jobs.id", ondelete="CASCADE"),
            primary_key=True, autoincrement=False,
        ),
        sa.Column("state", Payload, nullable=True),
        sa.Column("state_attempt", sa.Integer, nullable=True),
        sa.Column("saved_at", Instant, nullable=True),
        sa.Column("progress_current", sa.Double, nullable=True),
        sa.Column("progress_total", sa.Double, nullable=True),
        sa.Column("progress_message", sa.Text, nullable=True),
        sa.Column("progress_at", Instant, nullable=True),
    )
    # Periodic schedules (migration readyq_0017): one row per schedule name, with the
    # definition that stands (its fingerprint, and in words), the occurrences fired last
    # and next (epoch seconds, whole), and a definition that differed, seen last. A
    # worker fires a schedule with this row locked, so two cannot fire it at once.
    schedules = sa.Table(
        f"{prefix}schedules",
        md,
        sa.Column("name", Key, primary_key=True),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("definition", sa.Text, nullable=False),
        sa.Column("last_fire_at", sa.BigInteger, nullable=True),
        sa.Column("next_fire_at", sa.BigInteger, nullable=False),
        sa.Column("paused", sa.Boolean, nullable=False),
        sa.Column("conflict", sa.Text, nullable=True),
        sa.Column("conflict_at", Instant, nullable=True),
        sa.Column("updated_at", Instant, nullable=False),
    )
    # One row per occurrence fired, written in the transaction that enqueued its jobs:
    # the primary key makes a second enqueue of one occurrence fail whatever happened to
    # the schedule's row. ``job_id`` is the first job the occurrence enqueued.
    schedule_fires = sa.Table(
        f"{prefix}schedule_fires",
        md,
        sa.Column("name", Key, primary_key=True),
        sa.Column("fire_at", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("job_id", Id, nullable=True),
        sa.Column("created_at", Instant, nullable=False),
    )
    return Tables(
        metadata=md,
        jobs=jobs,
        deps=deps,
        groups=groups,
        gate=gate,
        rate_limits=rate_limits,
        rate_slots=rate_slots,
        resources=resources,
        reservations=reservations,
        attempts=attempts,
        pauses=pauses,
        steps=steps,
        checkpoints=checkpoints,
        schedules=schedules,
        schedule_fires=schedule_fires,
        traits=traits,
    )
