"""Adding jobs: one job, or a batch that may hold a whole DAG; with unique keys.

Every insert checks what the new jobs refer to inside the transaction, with those rows
locked (containers first, then dependencies, each in id order): a missing dependency
or container, a cycle through a container, a finished container. A job is born
``waiting``, ``ready`` or ``upstream_failed`` (a dependency already ended badly), a
container ``active`` or ``upstream_failed``.

Unique keys: at most one job that has not ended holds a given key. The database enforces
it with a unique index over the keys of jobs that have not ended (see
:mod:`readyq.schema`), so the UPDATE that ends a job frees its key in the same
statement. An enqueue with a key, in its transaction:

1. On a database without row locks (SQLite) it takes the write lock first, so that no
   other writer can come between the look-up and the insert.
2. It looks the key up among jobs that have not ended; if one holds it, that job's id is
   returned and nothing is written.
3. Otherwise it inserts, inside a savepoint where the database has row locks. If another
   transaction inserted the same key first, the index refuses the row (after waiting
   for that transaction to end); the savepoint is rolled back, which keeps the
   surrounding transaction usable (a failed statement aborts the whole transaction on
   PostgreSQL), and the look-up runs again, now seeing the other job.

The key is global within a table prefix, whatever the job type.
"""

from __future__ import annotations

import contextlib
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from readyq.dialects.base import ReadyNotifier
from readyq.errors import DependencyCycle, DependencyNotFound, InvalidParent
from readyq.model import BAD_ENDS, UNFINISHED_STATES, JobState
from readyq.schema import NOT_ENDED, Tables, live_key_index_name
from readyq.store.context import StoreContext
from readyq.store.graph import propagate
from readyq.store.records import BatchJob, NewJob

_STATE_VALUES = {state: state.value for state in JobState}
_NONE: frozenset[int] = frozenset()
# Rounds of look-up and insert before a conflict is raised as it is. A round is only
# repeated when the job that held the key ended between the conflict and the look-up,
# and another enqueue may take the key again before the next insert: under heavy churn
# of a few keys (jobs of one key cancelled as fast as they come) five rounds were seen
# to run out on PostgreSQL. Each round is a savepoint and two reads.
MAX_ROUNDS = 50


def insert_job(ctx: StoreContext, conn: Connection, job: NewJob) -> int:
    """Insert one job (no unique key) in the open transaction; return its id.

    A batch of one, so that a new job's rules live in one path.
    """
    return insert_batch(ctx, conn, [BatchJob(job)])[0]


def inserts_in_one_statement(job: NewJob) -> bool:
    """Whether :func:`insert_job` runs a single statement for ``job``: with no container
    and no dependency there is nothing to lock, check or link, and the wake-up rides on
    the INSERT."""
    return job.parent is None and not job.depends_on and job.unique_key is None


def insert_batch(ctx: StoreContext, conn: Connection, batch: Sequence[BatchJob]) -> list[int]:
    """Insert a batch (no unique keys) in the open transaction; the ids by position."""
    # Existing jobs the batch refers to: lock containers first, then dependencies,
    # each in id order.
    inherited = _lock_containers(
        ctx, conn, sorted({b.job.parent for b in batch if b.job.parent is not None})
    )
    outer = outside_dependencies(batch, inherited)
    states = _lock_dependencies(ctx, conn, sorted(set().union(*(x for x in outer if x))))
    inner = inside_dependencies(batch)
    born = born_states(batch, outer, inner, states)
    if any(b.job.parent is not None or b.parent_in_batch is not None for b in batch):
        _refuse_wait_cycles(
            ctx,
            conn,
            [
                (_NONE, _NONE, b.job.parent, b.parent_in_batch)
                if born[pos].state is JobState.UPSTREAM_FAILED
                else (outer[pos], inner[pos], b.job.parent, b.parent_in_batch)
                for pos, b in enumerate(batch)
            ],
        )
    # The wake-up for new ready jobs rides on the INSERT of a single row (one round
    # trip less for a single enqueue); a larger batch sends it once at the end.
    ready = ctx.notifier is not None and any(x.state is JobState.READY for x in born)
    ride = ctx.notifier if ready and len(batch) == 1 else None
    ids = _insert_rows(ctx, conn, batch, born, ride)
    edges = [
        {"job_id": ids[pos], "depends_on_id": dep}
        for pos in range(len(batch))
        if outer[pos] or inner[pos]
        for dep in sorted({*outer[pos], *(ids[x] for x in inner[pos])})
    ]
    if edges:
        ctx.dialect.insert_edges(conn, ctx.tables, edges)
    j = ctx.tables.jobs
    for pid, n in Counter(b.job.parent for b in batch if b.job.parent is not None).items():
        conn.execute(
            sa.update(j)
            .where(j.c.id == pid)
            .values(open_children=j.c.open_children + n, updated_at=ctx.now)
        )
    born_bad = [
        (ids[pos], JobState.UPSTREAM_FAILED.value,
         ids[b.parent_in_batch] if b.parent_in_batch is not None else b.job.parent)
        for pos, b in enumerate(batch)
        if born[pos].state is JobState.UPSTREAM_FAILED
    ]
    if born_bad:
        propagate(ctx, conn, born_bad)
    if ready and ride is None:
        ctx.notify_ready(conn)
    return ids


# -- the rules for a new job: checks, first state, row values ------------------------


def check_container(parent: int, row: Any | None) -> None:
    """Raise InvalidParent unless ``row`` (``is_container``, ``state``) is a container
    that can still take children."""
    if row is None:
        raise InvalidParent(f"parent job {parent} does not exist")
    if not row.is_container:
        raise InvalidParent(
            f"job {parent} is not a container; create one with enqueue_container()"
        )
    if row.state != JobState.ACTIVE.value:
        raise InvalidParent(f"container {parent} has already finished ({row.state})")


def check_found(wanted: Sequence[int], states: Mapping[int, str]) -> None:
    """Raise DependencyNotFound if a dependency in ``wanted`` has no row."""
    missing = sorted(set(wanted) - states.keys())
    if missing:
        raise DependencyNotFound(
            f"depends_on names job(s) that do not exist: {', '.join(map(str, missing))}"
        )


def check_not_own_container(depends_on: Sequence[int], chain: AbstractSet[int]) -> None:
    """Raise DependencyCycle if a job depends on one of its containers (``chain``)."""
    looped = set(depends_on) & chain
    if looped:
        raise DependencyCycle(
            f"a job cannot depend on its own container {min(looped)}: "
            "the container only finishes after the job"
        )


def outside_dependencies(
    batch: Sequence[BatchJob], inherited: Mapping[int, tuple[AbstractSet[int], set[int]]]
) -> list[AbstractSet[int]]:
    """The existing jobs each new job waits for: its own dependencies and those its
    containers pass down (``inherited``: outside container -> its chain of containers
    and the dependencies they pass down). Refuses a job that depends on its container."""
    outer: list[AbstractSet[int]] = []
    outer_chain: list[AbstractSet[int]] = []
    for b in batch:
        job = b.job
        if job.parent is None and b.parent_in_batch is None:
            # No container: nothing inherited, no container to depend on.
            outer.append(set(job.depends_on) if job.depends_on else _NONE)
            outer_chain.append(_NONE)
            continue
        deps = set(job.depends_on)
        chain: AbstractSet[int] = _NONE
        if job.parent is not None:
            chain, passed = inherited[job.parent]
            deps |= passed
        elif b.parent_in_batch is not None:
            chain = outer_chain[b.parent_in_batch]
            deps |= outer[b.parent_in_batch]
        check_not_own_container(job.depends_on, chain)
        outer.append(deps)
        outer_chain.append(chain)
    return outer


def inside_dependencies(batch: Sequence[BatchJob]) -> list[AbstractSet[int]]:
    """The batch positions each new job waits for, its containers' included."""
    inner: list[AbstractSet[int]] = []
    for b in batch:
        deps_in: AbstractSet[int] = set(b.deps_in_batch) if b.deps_in_batch else _NONE
        if b.parent_in_batch is not None:
            deps_in = deps_in | inner[b.parent_in_batch]
        inner.append(deps_in)
    return inner


class Born(NamedTuple):
    """How a new job starts: its state, its count of unfinished upstream jobs, and
    which upstream job ended badly when it is born ``upstream_failed``."""

    state: JobState
    pending: int
    error: str | None = None


def first_state(is_container: bool, pending: int, bad_upstream: str | None) -> Born:
    """A new job's first state: ``upstream_failed`` when an upstream job ended badly
    (``bad_upstream`` says which), else ``active`` for a container, ``waiting`` while
    upstream jobs are unfinished, ``ready`` otherwise."""
    if bad_upstream is not None:
        return Born(JobState.UPSTREAM_FAILED, pending, bad_upstream)
    if is_container:
        return Born(JobState.ACTIVE, pending)
    return Born(JobState.WAITING if pending else JobState.READY, pending)


def born_states(
    batch: Sequence[BatchJob],
    outer: Sequence[AbstractSet[int]],
    inner: Sequence[AbstractSet[int]],
    states: Mapping[int, str],
) -> list[Born]:
    """Each new job's start, in batch order (references point backwards), from the
    states of the existing jobs it waits for and of the earlier new ones."""
    born: list[Born] = []
    upstream_failed, done = JobState.UPSTREAM_FAILED, JobState.DONE.value
    for pos, b in enumerate(batch):
        out, deps_in = outer[pos], inner[pos]
        bad_out = min((x for x in out if states[x] in BAD_ENDS), default=None)
        bad_in = min((x for x in deps_in if born[x].state is upstream_failed), default=None)
        pending = len(deps_in)
        if out:
            pending += sum(1 for x in out if states[x] != done)
        if bad_out is not None:
            bad: str | None = f"dependency {bad_out} ended {states[bad_out]}"
        elif bad_in is not None:
            bad = f"dependency #{bad_in} of the batch ended upstream_failed"
        else:
            bad = None
        born.append(first_state(b.job.is_container, pending, bad))
    return born


def row_values(
    job: NewJob,
    state: JobState,
    pending: int,
    error: str | None,
    parent_id: int | None,
    open_children: int,
) -> tuple[Any, ...]:
    """The values of a new row, in the order of :data:`readyq.schema.ROW_KEYS`."""
    return (
        job.type,
        job.args_json,
        _STATE_VALUES[state],
        error,
        job.is_container,
        parent_id,
        job.group,
        job.weight,
        job.priority,
        job.max_attempts,
        job.timeout,
        pending,
        open_children,
        job.unique_key,
        job.uses,
        job.key,
        job.spawned_by,
        job.run_after_at,
        job.run_after_delay,
        0.0 if state is JobState.UPSTREAM_FAILED else None,
    )


# -- the reads and writes ------------------------------------------------------------


def _lock_containers(
    ctx: StoreContext, conn: Connection, parents: Sequence[int]
) -> dict[int, tuple[AbstractSet[int], set[int]]]:
    """Lock and check the existing containers ``parents``; for each, its chain of
    containers and the dependencies they pass down to their children."""
    if not parents:
        return {}
    t = ctx.tables
    j = t.jobs
    rows = conn.execute(
        sa.select(j.c.id, j.c.is_container, j.c.state)
        .where(j.c.id.in_(parents))
        .order_by(j.c.id)
        .with_for_update()
    ).all()
    found = {int(r.id): r for r in rows}
    inherited: dict[int, tuple[AbstractSet[int], set[int]]] = {}
    for pid in parents:
        check_container(pid, found.get(pid))
        ancestors = _ancestors(ctx, conn, pid)
        passed = {
            int(x)
            for x in conn.execute(
                sa.select(t.deps.c.depends_on_id).where(t.deps.c.job_id.in_(ancestors))
            ).scalars()
        }
        inherited[pid] = (set(ancestors), passed)
    return inherited


def _lock_dependencies(
    ctx: StoreContext, conn: Connection, wanted: Sequence[int]
) -> dict[int, str]:
    """Lock the existing jobs ``wanted`` (in id order) and return their states."""
    if not wanted:
        return {}
    j = ctx.tables.jobs
    rows = conn.execute(
        sa.select(j.c.id, j.c.state)
        .where(ctx.dialect.match_ids(j.c.id, wanted))
        .order_by(j.c.id)
        .with_for_update()
    ).all()
    states = {int(r.id): r.state for r in rows}
    check_found(wanted, states)
    return states


def _insert_rows(
    ctx: StoreContext,
    conn: Connection,
    batch: Sequence[BatchJob],
    born: Sequence[Born],
    notifier: ReadyNotifier | None,
) -> list[int]:
    """Insert the rows in waves, a container's before its children's; the ids.
    ``notifier`` (if any) is told with the first wave."""
    size = len(batch)
    children = Counter(b.parent_in_batch for b in batch if b.parent_in_batch is not None)
    depth = [0] * size
    for pos, b in enumerate(batch):
        if b.parent_in_batch is not None:
            depth[pos] = depth[b.parent_in_batch] + 1
    ids: list[int] = [0] * size
    for wave in range(max(depth) + 1):
        positions = [pos for pos in range(size) if depth[pos] == wave]
        rows = []
        for pos in positions:
            b = batch[pos]
            start = born[pos]
            parent_id = (
                ids[b.parent_in_batch] if b.parent_in_batch is not None else b.job.parent
            )
            rows.append(
                row_values(
                    b.job, start.state, start.pending, start.error, parent_id, children[pos]
                )
            )
        new_ids = ctx.dialect.insert_job_rows(
            conn, ctx.tables, rows, ctx.now, notifier if wave == 0 else None
        )
        for pos, new_id in zip(positions, new_ids, strict=True):
            ids[pos] = new_id
    return ids


def _refuse_wait_cycles(
    ctx: StoreContext,
    conn: Connection,
    new: Sequence[tuple[AbstractSet[int], AbstractSet[int], int | None, int | None]],
) -> None:
    """Raise DependencyCycle if a new job would wait for itself through a container.

    ``new`` holds, per new job (by batch position): the existing jobs and the batch
    positions it waits for, and its existing or in-batch container. A container ends
    only after its children, so a child whose dependencies wait, directly or through
    other jobs and containers, for one of its own containers never starts. Edges only
    point from a new job to older ones, except container -> child, so such a cycle
    always passes through a new child: the unfinished graph reachable from the new
    jobs is loaded (its containers locked, so that two transactions cannot each close
    half of a cycle unseen) and searched.
    """
    j, dt = ctx.tables.jobs, ctx.tables.deps
    live = (*UNFINISHED_STATES, JobState.ACTIVE.value)
    succ: dict[Any, set[Any]] = defaultdict(set)  # node -> nodes it waits for
    for pos, (outer, inner, parent, parent_in) in enumerate(new):
        succ[("new", pos)].update(outer, (("new", x) for x in inner))
        if parent_in is not None:
            succ[("new", parent_in)].add(("new", pos))
        if parent is not None:
            succ[parent].add(("new", pos))
    # Without an existing container gaining a child, no path leads back into the batch.
    frontier = (
        set().union(*(outer for outer, _, _, _ in new))
        if any(parent is not None for _, _, parent, _ in new)
        else set()
    )
    seen: set[int] = set()
    while frontier:
        ids = sorted(frontier - seen)
        seen.update(ids)
        rows = conn.execute(
            sa.select(j.c.id, j.c.is_container)
            .where(ctx.dialect.match_ids(j.c.id, ids), j.c.state.in_(live))
        ).all()
        waiting = [int(r.id) for r in rows]
        boxes = [int(r.id) for r in rows if r.is_container]
        if boxes:
            conn.execute(
                sa.select(j.c.id).where(ctx.dialect.match_ids(j.c.id, boxes))
                .order_by(j.c.id).with_for_update()
            ).all()
        frontier = set()
        if not waiting:
            break
        edges = list(conn.execute(
            sa.select(dt.c.job_id, dt.c.depends_on_id)
            .where(ctx.dialect.match_ids(dt.c.job_id, waiting))
        ))
        if boxes:
            edges += conn.execute(
                sa.select(j.c.parent_id, j.c.id).where(
                    ctx.dialect.match_ids(j.c.parent_id, boxes), j.c.state.in_(live)
                )
            ).all()
        for a, b in edges:
            succ[int(a)].add(int(b))
            if int(b) not in seen:
                frontier.add(int(b))
    # Depth-first search for a cycle from the new jobs.
    color: dict[Any, int] = {}
    for pos in range(len(new)):
        root = ("new", pos)
        if root in color:
            continue
        color[root] = 1
        path = [root]
        stack = [iter(sorted(succ.get(root, ()), key=str))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                color[path.pop()] = 2
                stack.pop()
            elif color.get(nxt) == 1:
                loop = [*path[path.index(nxt):], nxt]
                names = [f"new job #{x[1]}" if isinstance(x, tuple) else str(x) for x in loop]
                raise DependencyCycle(
                    "dependency cycle through a container (a container only ends after "
                    "its children): " + " waits for ".join(names)
                )
            elif nxt not in color:
                color[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(succ.get(nxt, ()), key=str)))


def _ancestors(ctx: StoreContext, conn: Connection, parent: int) -> list[int]:
    j = ctx.tables.jobs
    chain = [parent]
    seen = {parent}
    current: int | None = parent
    while current is not None:
        row = conn.execute(sa.select(j.c.parent_id).where(j.c.id == current)).first()
        current = None if row is None or row.parent_id is None else int(row.parent_id)
        if current is not None:
            if current in seen:  # corrupted data; never loop forever
                break
            seen.add(current)
            chain.append(current)
    return chain


# -- unique keys ---------------------------------------------------------------------


def live_key_match(t: Tables, keys: Sequence[str]) -> sa.ColumnElement[bool]:
    """Jobs that have not ended holding one of ``keys``, in the terms of the index."""
    j = t.jobs
    if not t.traits.partial_indexes:
        return j.c.live_unique_key.in_(list(keys))
    # The same text as the partial index's predicate, so that the planner uses it.
    return sa.and_(j.c.unique_key.in_(list(keys)), sa.text(NOT_ENDED))


def holders(
    ctx: StoreContext, conn: Connection, keys: Sequence[str], *, after_conflict: bool = False
) -> dict[str, int]:
    """key -> id of the job that has not ended and holds it.

    After a conflict the read takes a shared lock: a locking read sees the latest
    committed rows even inside a REPEATABLE READ transaction on MySQL, where a plain read
    would keep showing the snapshot from before the other job was committed.
    """
    if not keys:
        return {}
    j = ctx.tables.jobs
    stmt = sa.select(j.c.unique_key, j.c.id).where(live_key_match(ctx.tables, keys))
    if after_conflict and ctx.dialect.capabilities.row_locks:
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


def _take_write_lock(ctx: StoreContext, conn: Connection) -> None:
    """SQLite: take the database's write lock now (a no-op inside readyq's own
    transactions, which begin with BEGIN IMMEDIATE).

    An UPDATE takes the write lock when it starts, even if it matches no row; inside a
    caller's deferred transaction it makes the look-up and the insert one atomic step.
    """
    if not ctx.dialect.capabilities.row_locks:
        gate = ctx.tables.gate
        conn.execute(sa.update(gate).where(sa.false()).values(seq=gate.c.seq))


@contextlib.contextmanager
def _savepoint(ctx: StoreContext, conn: Connection) -> Iterator[None]:
    """A savepoint where the database has row locks, rolled back if the block raises.

    SQLite needs none: its write lock is already held, so the index cannot refuse the
    row, and a constraint error there aborts only the statement anyway. (A savepoint at
    the start of a caller's transaction would even be harmful with Python's sqlite3,
    where releasing it commits.)

    MySQL and MariaDB end the whole transaction at a deadlock, savepoints included, so
    the ROLLBACK TO SAVEPOINT then fails (error 1305, "SAVEPOINT ... does not exist"):
    the error that ended the transaction is raised instead, and readyq's retry loop runs
    the whole unit again (a caller's transaction is the caller's to run again).
    """
    if not ctx.dialect.capabilities.row_locks:
        yield
        return
    savepoint = conn.begin_nested()
    try:
        yield
    except BaseException as exc:
        try:
            savepoint.rollback()
        except sa.exc.DBAPIError:
            raise exc from exc.__cause__
        raise
    savepoint.commit()


def _retry_after(exc: sa.exc.IntegrityError, ctx: StoreContext, round_: int) -> bool:
    """Whether a refused insert may run again after a fresh look-up: only a live-key
    conflict rolled back to a savepoint, and only so many times."""
    return (
        ctx.dialect.capabilities.row_locks
        and is_live_key_conflict(exc, ctx.tables)
        and round_ < MAX_ROUNDS - 1
    )


def insert_unique_job(ctx: StoreContext, conn: Connection, job: NewJob) -> tuple[int, bool]:
    """Insert ``job`` unless a job that has not ended holds its key: a batch of one.

    Returns (id, created): the new job's id and True, or the holder's id and False.
    """
    assert job.unique_key is not None
    return insert_unique_batch(ctx, conn, [BatchJob(job)])[0]


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


def insert_unique_batch(
    ctx: StoreContext, conn: Connection, batch: Sequence[BatchJob]
) -> list[tuple[int, bool]]:
    """Insert a batch whose jobs may have unique keys (distinct within the batch).

    A job whose key is held by a job that has not ended is not inserted: its position
    gets the holder's id, and jobs of the batch that depended on it depend on the
    holder. Returns (id, created) per position.
    """
    keys = sorted({b.job.unique_key for b in batch if b.job.unique_key is not None})
    _take_write_lock(ctx, conn)
    found = holders(ctx, conn, keys)
    for round_ in range(MAX_ROUNDS):
        kept, where = without_held(batch, found)
        try:
            with _savepoint(ctx, conn):
                ids = insert_batch(ctx, conn, kept) if kept else []
        except sa.exc.IntegrityError as exc:
            if not _retry_after(exc, ctx, round_):
                raise
            found = holders(ctx, conn, keys, after_conflict=True)
            continue
        return [
            (found[b.job.unique_key or ""], False) if w is None else (ids[w], True)
            for b, w in zip(batch, where, strict=True)
        ]
    raise AssertionError("unreachable")  # pragma: no cover


def taken_keys(
    ctx: StoreContext, conn: Connection, ids: Sequence[int]
) -> list[tuple[int, str, int]]:
    """For jobs about to be brought back from an end state: (job id, key, holder id) for
    each whose unique key another job now holds (or another of ``ids`` holds too)."""
    j = ctx.tables.jobs
    if not ids:
        return []
    rows = conn.execute(
        sa.select(j.c.id, j.c.unique_key)
        .where(j.c.id.in_(list(ids)), j.c.unique_key.is_not(None))
        .order_by(j.c.id)
    ).all()
    if not rows:
        return []
    found = holders(ctx, conn, sorted({r.unique_key for r in rows}))
    out: list[tuple[int, str, int]] = []
    first: dict[str, int] = {}
    for r in rows:
        holder = found.get(r.unique_key, first.get(r.unique_key))
        if holder is not None and holder != r.id:
            out.append((int(r.id), r.unique_key, holder))
        first.setdefault(r.unique_key, int(r.id))
    return out
