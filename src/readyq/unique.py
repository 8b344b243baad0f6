"""Unique jobs: at most one job that has not ended holds a given unique key.

The database enforces it with a unique index over the keys of jobs that have not ended
(see :mod:`readyq.schema`): a partial index on PostgreSQL and SQLite, an index on a
generated column on MySQL and MariaDB. Either way the index follows the job's state, so
the UPDATE that ends a job (done, failed, cancelled, upstream_failed: whichever path
ends it) frees its key in the same statement, with nothing to maintain by hand. Only
``admin.retry``, which brings an ended job back, must check that its key is still free.

An enqueue with a key, in its transaction:

1. On a database without row locks (SQLite) it takes the write lock first, so that no
   other writer can come between the look-up and the insert.
2. It looks the key up among jobs that have not ended; if one holds it, that job's id is
   returned and nothing is written.
3. Otherwise it inserts, inside a savepoint where the database has row locks. If another
   transaction inserted the same key first, the index refuses the row (after waiting
   for that transaction to end); the savepoint is rolled back, which keeps the
   surrounding transaction usable (a failed statement aborts the whole transaction on
   PostgreSQL), and the look-up runs again, now seeing the other job.

The key is global within a table prefix, whatever the job type: put the type in the key
if two types may share one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from readyq.schema import NOT_ENDED, Tables, live_key_index_name

if TYPE_CHECKING:
    from readyq.store import BatchJob, NewJob, Store

# Rounds of look-up and insert before a conflict is raised as it is. A round is only
# repeated when the job that held the key ended between the conflict and the look-up.
MAX_ROUNDS = 5


def live_key_match(t: Tables, keys: Sequence[str]) -> sa.ColumnElement[bool]:
    """Jobs that have not ended holding one of ``keys``, in the terms of the index."""
    j = t.jobs
    if "live_unique_key" in j.c:
        return j.c.live_unique_key.in_(list(keys))
    # The same text as the partial index's predicate, so that the planner uses it.
    return sa.and_(j.c.unique_key.in_(list(keys)), sa.text(NOT_ENDED))


def holders(
    store: Store, conn: Connection, keys: Sequence[str], *, after_conflict: bool = False
) -> dict[str, int]:
    """key -> id of the job that has not ended and holds it.

    After a conflict the read takes a shared lock: a locking read sees the latest
    committed rows even inside a REPEATABLE READ transaction on MySQL, where a plain read
    would keep showing the snapshot from before the other job was committed.
    """
    if not keys:
        return {}
    j = store.tables.jobs
    stmt = sa.select(j.c.unique_key, j.c.id).where(live_key_match(store.tables, keys))
    if after_conflict and store.dialect.capabilities.row_locks:
        stmt = stmt.with_for_update(read=True)
    return {row.unique_key: int(row.id) for row in conn.execute(stmt)}


def is_live_key_conflict(exc: BaseException, t: Tables) -> bool:
    """True if ``exc`` is the live-key index refusing a row of ``t.jobs``.

    PostgreSQL and MySQL name the index in the message; SQLite names the column.
    """
    if not isinstance(exc, sa.exc.IntegrityError):
        return False
    text = str(exc.orig)
    prefix = t.jobs.name[: -len("jobs")]
    return live_key_index_name(prefix) in text or f"{t.jobs.name}.unique_key" in text


def _take_write_lock(store: Store, conn: Connection) -> None:
    """SQLite: take the database's write lock now (a no-op inside readyq's own
    transactions, which begin with BEGIN IMMEDIATE).

    An UPDATE takes the write lock when it starts, even if it matches no row; inside a
    caller's deferred transaction it makes the look-up and the insert one atomic step.
    """
    if not store.dialect.capabilities.row_locks:
        gate = store.tables.gate
        conn.execute(sa.update(gate).where(sa.false()).values(seq=gate.c.seq))


def _savepoint(store: Store, conn: Connection) -> contextlib.AbstractContextManager[object]:
    """A savepoint where the database has row locks.

    SQLite needs none: its write lock is already held, so the index cannot refuse the
    row, and a constraint error there aborts only the statement anyway. (A savepoint at
    the start of a caller's transaction would even be harmful with Python's sqlite3,
    where releasing it commits.)
    """
    if store.dialect.capabilities.row_locks:
        return conn.begin_nested()
    return contextlib.nullcontext()


def _retry_after(exc: sa.exc.IntegrityError, store: Store, round_: int) -> bool:
    """Whether a refused insert may run again after a fresh look-up: only a live-key
    conflict rolled back to a savepoint, and only so many times."""
    return (
        store.dialect.capabilities.row_locks
        and is_live_key_conflict(exc, store.tables)
        and round_ < MAX_ROUNDS - 1
    )


def enqueue_one(store: Store, conn: Connection, job: NewJob) -> tuple[int, bool]:
    """Insert ``job`` unless a job that has not ended holds its key.

    Returns (id, created): the new job's id and True, or the holder's id and False.
    """
    key = job.unique_key
    assert key is not None
    _take_write_lock(store, conn)
    found = holders(store, conn, [key])
    for round_ in range(MAX_ROUNDS):
        if key in found:
            return found[key], False
        try:
            with _savepoint(store, conn):
                return store._insert_job(conn, job), True
        except sa.exc.IntegrityError as exc:
            if not _retry_after(exc, store, round_):
                raise
        found = holders(store, conn, [key], after_conflict=True)
    raise AssertionError("unreachable")  # pragma: no cover


def without_held(
    batch: Sequence[BatchJob], held: dict[str, int]
) -> tuple[list[BatchJob], list[int | None]]:
    """Drop the jobs whose unique key is held by an existing job.

    Returns the jobs left, and for each position of ``batch`` its position among them
    (None for a dropped job). A job that depended on a dropped one depends on the job
    holding its key instead. Containers have no unique key, so no parent is dropped.
    """
    kept: list[BatchJob] = []
    where: list[int | None] = []
    for b in batch:
        key = b.job.unique_key
        if key is not None and key in held:
            where.append(None)
            continue
        outside: list[int] = []
        inside: list[int] = []
        for x in b.deps_in_batch:
            moved = where[x]
            if moved is not None:
                inside.append(moved)
            else:
                outside.append(held[batch[x].job.unique_key or ""])
        parent = None if b.parent_in_batch is None else where[b.parent_in_batch]
        assert b.parent_in_batch is None or parent is not None, "a container was dropped"
        job = b.job
        if outside:
            job = job._replace(depends_on=tuple(dict.fromkeys((*job.depends_on, *outside))))
        kept.append(
            b._replace(job=job, deps_in_batch=tuple(sorted(inside)), parent_in_batch=parent)
        )
        where.append(len(kept) - 1)
    return kept, where


def enqueue_batch(
    store: Store, conn: Connection, batch: Sequence[BatchJob]
) -> list[tuple[int, bool]]:
    """Insert a batch whose jobs may have unique keys (distinct within the batch).

    A job whose key is held by a job that has not ended is not inserted: its position
    gets the holder's id, and jobs of the batch that depended on it depend on the
    holder. Returns (id, created) per position.
    """
    keys = sorted({b.job.unique_key for b in batch if b.job.unique_key is not None})
    _take_write_lock(store, conn)
    found = holders(store, conn, keys)
    for round_ in range(MAX_ROUNDS):
        kept, where = without_held(batch, found)
        try:
            with _savepoint(store, conn):
                ids = store._insert_batch(conn, kept) if kept else []
        except sa.exc.IntegrityError as exc:
            if not _retry_after(exc, store, round_):
                raise
            found = holders(store, conn, keys, after_conflict=True)
            continue
        return [
            (found[b.job.unique_key or ""], False) if w is None else (ids[w], True)
            for b, w in zip(batch, where, strict=True)
        ]
    raise AssertionError("unreachable")  # pragma: no cover


def taken_keys(store: Store, conn: Connection, ids: Sequence[int]) -> list[tuple[int, str, int]]:
    """For jobs about to be brought back from an end state: (job id, key, holder id) for
    each whose unique key another job now holds (or another of ``ids`` holds too)."""
    j = store.tables.jobs
    if not ids:
        return []
    rows = conn.execute(
        sa.select(j.c.id, j.c.unique_key)
        .where(j.c.id.in_(list(ids)), j.c.unique_key.is_not(None))
        .order_by(j.c.id)
    ).all()
    if not rows:
        return []
    found = holders(store, conn, sorted({r.unique_key for r in rows}))
    out: list[tuple[int, str, int]] = []
    first: dict[str, int] = {}
    for r in rows:
        holder = found.get(r.unique_key, first.get(r.unique_key))
        if holder is not None and holder != r.id:
            out.append((int(r.id), r.unique_key, holder))
        first.setdefault(r.unique_key, int(r.id))
    return out
