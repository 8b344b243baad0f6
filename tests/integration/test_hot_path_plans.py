"""Every statement of a worker's hot path reads the jobs table through an index.

The statements are captured as the worker really runs them (bound parameters, not
literal SQL), then the database explains each one with the same parameters. A partial
index only serves a query whose own terms imply the index's predicate: a bound
``state = ?`` never does on SQLite, so the states are written into the SQL, and this test
keeps it that way. The jobs table holds thousands of finished, waiting and ready rows,
so that a full scan would be the cheaper plan nowhere.

On PostgreSQL the claim's runnable counts are also run under EXPLAIN (ANALYZE, BUFFERS)
with a shallow and a deep ready backlog: the pages it touches must not grow with the backlog
(an index that begins with a column its predicate fixes cannot seek on the next one).

The last tests replay a whole claim, and a finish, under the database's own accounting
(PostgreSQL's buffers, MySQL's handler reads) and check that what they read does not grow
with what the table holds beyond the batch: ready jobs that arrived after the statistics
were taken or after a VACUUM, and jobs that ran and ended since the last vacuum.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from readyq.claim_order import ClaimOrder, StartPolicy
from readyq.resources import ResourceView
from readyq.schema import costed_index_name
from readyq.store import Lease, Outcome, OutcomeKind

GROUPS = ("a", "b", "c", "d")


def bulk(
    queue: readyq.Queue, state: str, count: int, *, start: int = 0, type_: str = "t",
    priority: int = 0,
) -> None:
    now = time.time()
    rows: list[dict[str, Any]] = []
    for i in range(start, start + count):
        rows.append(
            {
                "type": type_,
                "args": "{}",
                "state": state,
                "is_container": False,
                "group_key": GROUPS[i % len(GROUPS)],
                "weight": 1,
                "priority": priority,
                "attempts": 1 if state == "done" else 0,
                "max_attempts": 3,
                "retry_on_timeout": True,
                "pending_deps": 1 if state == "waiting" else 0,
                "open_children": 0,
                "failed_children": 0,
                "cancel_requested": False,
                "lease_token": 1 if state == "done" else 0,
                "created_at": now,
                "updated_at": now,
                "finished_at": now if state == "done" else None,
            }
        )
    with queue.engine.begin() as conn:
        conn.execute(sa.insert(queue.store.tables.jobs), rows)


def analyze(queue: readyq.Queue, dialect: str) -> None:
    t = queue.store.tables
    with queue.engine.begin() as conn:
        if dialect == "postgresql":
            for table in (t.jobs, t.deps, t.groups):
                conn.exec_driver_sql(f"ANALYZE {table.name}")
        elif dialect == "sqlite":
            conn.exec_driver_sql("ANALYZE")
        else:
            conn.exec_driver_sql(f"ANALYZE TABLE {t.jobs.name}, {t.deps.name}").all()


def full_scans(conn: sa.Connection, dialect: str, sql: str, params: Any) -> list[str]:
    """The lines of the plan of ``sql`` that read readyq_jobs without an index."""
    if dialect == "postgresql":
        plan = [r[0] for r in conn.exec_driver_sql("EXPLAIN " + sql, params)]
        return [line for line in plan if "Seq Scan on readyq_jobs" in line]
    if dialect == "sqlite":
        plan = [str(r[-1]) for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params)]
        return [line for line in plan if re.search(r"\bSCAN readyq_jobs\b(?! USING)", line)]
    rows = [dict(r._mapping) for r in conn.exec_driver_sql("EXPLAIN " + sql, params)]
    return [str(r) for r in rows if r.get("table") == "readyq_jobs" and r.get("type") == "ALL"]


def test_a_worker_tick_reads_jobs_through_indexes(
    queue: readyq.Queue, dialect_name: str
) -> None:
    bulk(queue, "done", 4000)
    bulk(queue, "waiting", 4000, start=4000)
    bulk(queue, "ready", 4000, start=8000)
    analyze(queue, dialect_name)

    @queue.handler("t")
    def handler(job: readyq.Job) -> None:
        return None

    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, context: Any,
               executemany: bool) -> None:
        if not executemany and "readyq_jobs" in statement:
            seen.append((statement, params))

    worker = queue.worker(concurrency=8, poll_interval=0.01, lease_ttl=30)
    sa.event.listen(queue.engine, "before_cursor_execute", record)
    try:
        worker.run_once()  # claims 8 jobs over the four groups
        deadline = time.monotonic() + 10
        while worker.stats.done < 8:
            assert time.monotonic() < deadline, "the claimed jobs never finished"
            worker.run_once()  # finishes them, claims more
            time.sleep(0.01)
        # The store's other fenced writes: a start on its own, a heartbeat, a hand-back.
        store = queue.store
        claimed = store.claim_jobs(ClaimOrder(
            owner="probe", cap=100, limit=4, lease_ttl=30, types=["t"],
        ))
        assert claimed
        assert store.start_jobs("probe", [(c, StartPolicy(None)) for c in claimed])
        store.heartbeat("probe", [Lease(c.id, c.lease_token) for c in claimed], 30)
        store.record_outcomes("probe", [Outcome(job=c, kind=OutcomeKind.RELEASE) for c in claimed])
        # What a worker run with until_idle asks when a tick finds nothing to do, here
        # for a type with no jobs, so that no plan may stop at a first match.
        assert not store.has_unfinished(["other"])
        queue.store.clock_offset = 3600.0  # every lease expires: the reclaim runs
        queue.store.reclaim_expired()
        queue.store.clock_offset = 0.0
    finally:
        sa.event.remove(queue.engine, "before_cursor_execute", record)
        worker.stop()
    kinds = {" ".join(sql.split()[:2]) for sql, _ in seen}
    assert any(k.startswith("UPDATE") for k in kinds), kinds
    assert len(seen) >= 5, seen

    problems = []
    with queue.engine.connect() as conn:
        for sql, params in seen:
            if sql.lstrip().upper().startswith("INSERT"):
                continue
            scans = full_scans(conn, dialect_name, sql, params)
            if scans:
                problems.append(f"{sql}\n  params {params}\n  " + "\n  ".join(scans))
    assert not problems, "full scans of readyq_jobs:\n" + "\n\n".join(problems)


def explain_custom(conn: sa.Connection, sql: str, params: Any) -> list[str]:
    """EXPLAIN (ANALYZE, BUFFERS) of ``sql`` planned for the parameters at hand, as a
    statement's first executions are."""
    return [r[0] for r in conn.exec_driver_sql(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT TEXT) " + sql, params)]


def plan_buffers(plan: list[str]) -> int:
    """Shared buffers (hit or read) on the top line of an EXPLAIN (ANALYZE, BUFFERS)."""
    top = next(line for line in plan if "Buffers:" in line)
    return sum(int(n) for n in re.findall(r"(?:hit|read)=(\d+)", top))


def handler_reads(conn: sa.Connection) -> int:
    """The session's handler reads so far (MySQL and MariaDB)."""
    rows = conn.exec_driver_sql("SHOW SESSION STATUS LIKE 'Handler_read%%'").all()
    return sum(int(v) for _, v in rows)


def snapshot_buffers(queue: readyq.Queue) -> int:
    """Shared buffers the claim's runnable counts touch on PostgreSQL."""
    store = queue.store
    dialect, t = store.dialect, store.tables
    captured: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, context: Any,
               executemany: bool) -> None:
        if statement.lstrip().startswith("WITH RECURSIVE ready_groups"):
            captured.append((statement, params))

    sa.event.listen(queue.engine, "before_cursor_execute", record)
    try:
        with queue.engine.connect() as conn:
            dialect.runnable_counts(conn, t, store.now(), ["t"], 100)
    finally:
        sa.event.remove(queue.engine, "before_cursor_execute", record)
    ((sql, params),) = captured
    with queue.engine.connect() as conn:
        plan = explain_custom(conn, sql, params)
    return plan_buffers(plan)


def test_postgresql_ready_counts_do_not_grow_with_the_ready_backlog(
    queue: readyq.Queue, dialect_name: str
) -> None:
    if dialect_name != "postgresql":
        import pytest

        pytest.skip("the one-statement ready counts and EXPLAIN BUFFERS are PostgreSQL's")
    bulk(queue, "ready", 2000)
    analyze(queue, dialect_name)
    shallow = snapshot_buffers(queue)
    bulk(queue, "ready", 30000, start=2000)
    analyze(queue, dialect_name)
    deep = snapshot_buffers(queue)
    assert deep <= 2 * shallow + 20, (shallow, deep)


def churn(queue: readyq.Queue, count: int, start: int) -> None:
    """``count`` jobs that ran and ended: inserted running, then marked done, as a worker
    would (each row gets a new version, and its old in-flight index entry is dead)."""
    t = queue.store.tables.jobs
    bulk(queue, "running", count, start=start)
    with queue.engine.begin() as conn:
        conn.execute(
            sa.update(t)
            .where(t.c.state == "running", t.c.lease_owner.is_(None))
            .values(state="done", finished_at=time.time())
        )


def finish_reads(queue: readyq.Queue, dialect: str) -> int:
    """What the hand-back of 100 done jobs reads: a claim of 100, their start, their
    finish as a worker records it, then that same statement again under the database's
    own accounting (shared buffers on PostgreSQL, handler reads on MySQL)."""
    store = queue.store
    claimed = store.claim_jobs(ClaimOrder(
        owner="w", cap=1000, limit=100, lease_ttl=30, types=["t"],
    ))
    assert len(claimed) == 100
    assert store.start_jobs("w", [(c, StartPolicy(None)) for c in claimed])
    captured: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, context: Any,
               executemany: bool) -> None:
        if statement.lstrip().upper().startswith(("WITH", "UPDATE")):
            captured.append((statement, params))

    sa.event.listen(queue.engine, "before_cursor_execute", record)
    try:
        applied = store.record_outcomes("w", [Outcome(job=c, kind=OutcomeKind.DONE, result_json="1")
                                     for c in claimed])
    finally:
        sa.event.remove(queue.engine, "before_cursor_execute", record)
    assert all(applied.values()) and len(applied) == 100
    ((sql, params),) = captured
    # The jobs are done now: the statement matches nothing, but reads what it read.
    with queue.engine.connect() as conn:
        if dialect == "postgresql":
            plan = explain_custom(conn, sql, params)
            conn.rollback()
            return plan_buffers(plan)

        before = handler_reads(conn)
        conn.exec_driver_sql(sql, params)
        reads = handler_reads(conn) - before
        conn.rollback()
        return reads


def test_the_finish_does_not_grow_with_the_jobs_that_ran_before_it(
    queue: readyq.Queue, dialect_name: str
) -> None:
    """The hand-back reads the batch's rows by primary key, whatever the index of jobs
    in flight still holds for jobs that ended since the last vacuum (PostgreSQL keeps
    those entries until then; statistics taken before the run make the running jobs
    look rare, which invites a plan that reads that index)."""
    if dialect_name == "sqlite":
        import pytest

        pytest.skip("SQLite removes a row's old index entries in the update itself")
    t = queue.store.tables.jobs
    if dialect_name == "postgresql":
        with queue.engine.begin() as conn:
            conn.exec_driver_sql(f"ALTER TABLE {t.name} SET (autovacuum_enabled = false)")
    bulk(queue, "ready", 200)
    analyze(queue, dialect_name)
    churn(queue, 500, start=200)
    shallow = finish_reads(queue, dialect_name)
    churn(queue, 30000, start=700)
    deep = finish_reads(queue, dialect_name)
    assert deep <= 2 * shallow + 20, (shallow, deep)


def sqlite_steps(conn: sa.Connection, sql: str, params: Any) -> int:
    """Virtual machine instructions SQLite runs for ``sql``, in hundreds: its count of
    the rows and index entries a statement steps through."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    raw = conn.connection.driver_connection
    raw.set_progress_handler(count, 100)
    try:
        conn.exec_driver_sql(sql, params)
    finally:
        raw.set_progress_handler(None, 100)
    return steps


def claim_reads(
    queue: readyq.Queue, dialect: str, types: list[str] | None = None, limit: int = 100,
    *, custom: bool = False, resources: ResourceView | None = None,
) -> int:
    """What one claim transaction reads: a claim of ``limit`` jobs of ``types`` runs as a
    worker's would, its statements are captured, then run again in that order in a
    transaction that is rolled back, under the database's own accounting (on PostgreSQL
    the shared buffers of each statement's generic plan, or with ``custom`` of its plan
    for the parameters at hand, as the first executions are planned; on MySQL handler
    reads, on SQLite the instructions its virtual machine runs)."""
    captured: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, context: Any,
               executemany: bool) -> None:
        captured.append((statement, params))

    sa.event.listen(queue.engine, "before_cursor_execute", record)
    try:
        claimed = queue.store.claim_jobs(ClaimOrder(
            owner="w", cap=400, limit=limit, lease_ttl=30, types=types or ["t"],
            resources=resources,
        ))
    finally:
        sa.event.remove(queue.engine, "before_cursor_execute", record)
    assert len(claimed) == limit
    reads = 0
    with queue.engine.connect() as conn:
        before = handler_reads(conn) if dialect == "mariadb" else 0
        for sql, params in captured:
            if sql.lstrip().upper().startswith(("INSERT", "UPDATE")) and "readyq_resources" in sql:
                continue  # the capacities the claim recorded are committed already
            if dialect == "postgresql" and "set_config(" in sql:
                conn.exec_driver_sql(sql, params)  # the claim's settings, for what follows
            elif dialect == "postgresql" and sql.lstrip().upper().startswith(("SELECT", "WITH")):
                explain = explain_custom if custom else explain_generic
                plan = explain(conn, sql, params)
                # No statement of a claim is worth compiling: JIT takes far longer than
                # the claim runs (the sort of a worker of several types' merge, priced
                # out by the claim's settings, once passed its cost threshold).
                assert not any(line.startswith("JIT:") for line in plan), plan
                reads += plan_buffers(plan)
            elif dialect == "sqlite":
                # The claim's reads and its UPDATE of the jobs; the progress it recorded
                # (groups, gate) is committed already and is not written twice.
                if "readyq_jobs" in sql:
                    reads += sqlite_steps(conn, sql, params)
            else:
                conn.exec_driver_sql(sql, params)
        if dialect == "mariadb":
            reads = handler_reads(conn) - before
        conn.rollback()
    return reads


PG_TYPES = {bool: "boolean", int: "bigint", float: "double precision", str: "text"}


def pg_type(value: Any) -> str:
    """The PostgreSQL type of a bound parameter's value (a list is an array)."""
    if isinstance(value, list):
        return PG_TYPES[type(value[0])] + "[]"
    return PG_TYPES[type(value)]


def explain_generic(conn: sa.Connection, sql: str, params: dict[str, Any]) -> list[str]:
    """EXPLAIN (ANALYZE, BUFFERS) of ``sql`` as a prepared statement's generic plan: the
    driver prepares a statement that a connection runs often, and the server may then
    plan it once for any parameters."""
    import psycopg.sql

    names: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", number, sql)
    types = [pg_type(params[n]) for n in names]
    conn.exec_driver_sql("SET LOCAL plan_cache_mode = force_generic_plan")
    conn.exec_driver_sql(f"PREPARE rq_probe ({', '.join(types)}) AS {text}".replace("%", "%%"))
    # EXECUTE's arguments are written out: a utility statement takes no parameters.
    raw = conn.connection.driver_connection
    args = ", ".join(
        psycopg.sql.Literal(params[n]).as_string(raw) + f"::{kind}"
        for n, kind in zip(names, types, strict=True)
    )
    try:
        return [r[0] for r in conn.exec_driver_sql(
            f"EXPLAIN (ANALYZE, BUFFERS, FORMAT TEXT) EXECUTE rq_probe({args})".replace(
                "%", "%%"))]
    finally:
        conn.exec_driver_sql("DEALLOCATE rq_probe")


# A claim that weighs resources: every job of type "t" takes one unit of "gpu".
GPUS = ResourceView({"gpu": 400}, {"t": {"gpu": 1}})


@pytest.mark.parametrize("resources", [None, GPUS], ids=["plain", "resources"])
def test_a_claim_does_not_read_a_backlog_that_came_after_the_statistics(
    queue: readyq.Queue, dialect_name: str, resources: ResourceView | None
) -> None:
    """Statistics taken while the table held finished jobs only say that ready jobs are
    rare. When a backlog then arrives, a claim must still take the first rows of each
    group in index order and stop, not collect and sort every ready row, and a claim of
    jobs by their ids must look them up by key, not test every ready row against the
    ids: it reads as much with 32,000 ready jobs as with 2,000."""
    if dialect_name == "sqlite":
        import pytest

        pytest.skip("SQLite keeps no statistics unless ANALYZE is run, and readyq runs none")
    bulk(queue, "done", 20000)
    analyze(queue, dialect_name)
    bulk(queue, "ready", 2000, start=20000)
    shallow = claim_reads(queue, dialect_name, resources=resources)
    bulk(queue, "ready", 30000, start=22000)
    deep = claim_reads(queue, dialect_name, resources=resources)
    assert deep <= 2 * shallow + 50, (shallow, deep)


def test_postgresql_claim_does_not_read_the_backlog_after_a_vacuum_without_statistics(
    queue: readyq.Queue, dialect_name: str
) -> None:
    """A VACUUM (or autovacuum) counts the table's rows but takes no column statistics:
    PostgreSQL then guesses that a group's ready range holds a row or two, which makes
    reading the range whole and sorting it look as cheap as reading it in index order. A
    claim reads as much with 100,000 ready jobs as with 2,000."""
    if dialect_name != "postgresql":
        import pytest

        pytest.skip("VACUUM and its row count are PostgreSQL's")
    jobs = queue.store.tables.jobs.name

    def vacuum() -> None:
        with queue.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
                f"VACUUM {jobs}"
            )

    with queue.engine.begin() as conn:
        conn.exec_driver_sql(f"ALTER TABLE {jobs} SET (autovacuum_enabled = false)")
    bulk(queue, "ready", 2000)
    vacuum()
    shallow = claim_reads(queue, dialect_name)
    bulk(queue, "ready", 98000, start=2000)
    vacuum()
    deep = claim_reads(queue, dialect_name)
    assert deep <= 2 * shallow + 50, (shallow, deep)


def probe_reads(queue: readyq.Queue, dialect: str, probe: Any) -> int:
    """What one idle probe reads (PostgreSQL: the shared buffers of its generic plan;
    MySQL: handler reads); on SQLite, 0 if its plan reads the jobs table through the
    ready-by-type index. The statements before the probe's read (the settings of its
    transaction) run first, as they did."""
    captured: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, context: Any,
               executemany: bool) -> None:
        captured.append((statement, params))

    sa.event.listen(queue.engine, "before_cursor_execute", record)
    try:
        assert probe() is False
    finally:
        sa.event.remove(queue.engine, "before_cursor_execute", record)
    *settings, (sql, params) = captured
    assert "readyq_jobs" in sql and all("readyq_jobs" not in s for s, _ in settings)
    with queue.engine.connect() as conn:
        for setting, setting_params in settings:
            conn.exec_driver_sql(setting, setting_params)
        if dialect == "postgresql":
            plan = explain_generic(conn, sql, params)
            conn.rollback()
            return plan_buffers(plan)
        if dialect == "sqlite":
            plan = [str(r[-1]) for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params)]
            ready = next(line for line in plan if "readyq_jobs" in line)
            assert "readyq_jobs_ready_type_ix" in ready, plan
            return 0

        before = handler_reads(conn)
        conn.exec_driver_sql(sql, params).all()
        reads = handler_reads(conn) - before
        conn.rollback()
        return reads


def test_an_idle_probe_does_not_read_the_ready_jobs_of_other_types(
    queue: readyq.Queue, dialect_name: str
) -> None:
    """A worker whose types have nothing ready asks at every tick whether one is (and,
    run with ``until_idle``, whether any is unfinished): the answer comes from the ready
    jobs of its own types, whatever the backlog of other types. It reads as much with
    50,000 ready jobs of another type as with 2,000 (readyq runs no ANALYZE on SQLite,
    whose plan is checked instead)."""
    store = queue.store
    probes = {
        "runnable": lambda: store.runnable_exists(["other"]),
        "unfinished": lambda: store.has_unfinished(["other"]),
    }
    bulk(queue, "ready", 2000)
    if dialect_name != "sqlite":
        analyze(queue, dialect_name)
    shallow = {name: probe_reads(queue, dialect_name, p) for name, p in probes.items()}
    bulk(queue, "ready", 48000, start=2000)
    if dialect_name != "sqlite":
        analyze(queue, dialect_name)
    deep = {name: probe_reads(queue, dialect_name, p) for name, p in probes.items()}
    for name in probes:
        assert deep[name] <= 2 * shallow[name] + 20, (name, shallow, deep)


@pytest.mark.parametrize("types", [["other"], ["other", "third"]], ids=["one", "two"])
def test_a_claim_of_its_types_does_not_read_the_ready_jobs_of_other_types(
    queue: readyq.Queue, dialect_name: str, types: list[str]
) -> None:
    """A worker claims in each group the first ready jobs of its types: the index of
    ready jobs by type holds a group's jobs of a type in claim order (for a worker of
    several types, one range per type, merged). Ready jobs of another type ahead of them
    in the same groups (of a higher priority) are not read: a claim reads as much with
    50,000 of them as with 2,000, before any ANALYZE (the state of a table autovacuum
    has not visited yet) and after one."""
    bulk(queue, "ready", 2000, priority=1)
    for i, type_ in enumerate(types):
        bulk(queue, "ready", 400 // len(types), start=2000 + i * 400, type_=type_)

    def reads() -> list[int]:
        # On PostgreSQL, as a generic plan and as the first executions' custom plans.
        plans = (False, True) if dialect_name == "postgresql" else (False,)
        return [claim_reads(queue, dialect_name, types, 10, custom=c) for c in plans]

    shallow = reads()
    bulk(queue, "ready", 48000, start=2800, priority=1)
    deep = reads()
    analyze(queue, dialect_name)
    analyzed = reads()
    for later in (deep, analyzed):
        for before, after in zip(shallow, later, strict=True):
            assert after <= 2 * before + 50, (shallow, deep, analyzed)


def test_sqlite_writes_test_the_bad_end_index_without_an_in_list(
    queue: readyq.Queue, dialect_name: str
) -> None:
    """Every claim and finish writes a job's state, and SQLite tests the predicate of
    each partial index on the row's old and new values. An IN list of three values or
    more it tests through a temporary B-tree built for the occasion; the index of jobs
    that ended badly says the same states as comparisons (migration readyq_0010)."""
    if dialect_name != "sqlite":
        pytest.skip("PostgreSQL tests an IN list in place; MySQL and MariaDB index a column")
    with queue.engine.connect() as conn:
        ddl = conn.execute(
            sa.text("SELECT sql FROM sqlite_master WHERE type = 'index' AND name = :n"),
            {"n": f"{queue.store.tables.jobs.name}_bad_end_ix"},
        ).scalar_one()
    where = ddl.split(" WHERE ", 1)[1]
    assert " IN " not in where.upper(), ddl
    assert all(f"'{s}'" in where for s in ("failed", "cancelled", "upstream_failed")), ddl


def plan_text(conn: sa.Connection, dialect: str, sql: str, params: Any) -> str:
    """The whole plan of ``sql`` as text."""
    if dialect == "postgresql":
        return "\n".join(r[0] for r in conn.exec_driver_sql("EXPLAIN " + sql, params))
    if dialect == "sqlite":
        return "\n".join(str(r[-1]) for r in
                         conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params))
    return "\n".join(str(dict(r._mapping)) for r in conn.exec_driver_sql("EXPLAIN " + sql, params))


def test_a_claim_that_weighs_resources_asks_for_costed_jobs_through_their_index(
    queue: readyq.Queue, dialect_name: str
) -> None:
    """Before it reads any group's first jobs, a claim that weighs resources asks whether
    a ready job of its types carries costs of its own: a seek of the index that holds
    only those, never a read of the ready jobs."""
    # A small table, then a large one, without statistics and then with them.
    bulk(queue, "ready", 8)
    probe_uses_the_costed_index(queue, dialect_name)
    bulk(queue, "done", 4000, start=8)
    bulk(queue, "ready", 4000, start=4008)
    probe_uses_the_costed_index(queue, dialect_name)
    analyze(queue, dialect_name)
    probe_uses_the_costed_index(queue, dialect_name)


def probe_uses_the_costed_index(queue: readyq.Queue, dialect_name: str) -> None:
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, context: Any,
               executemany: bool) -> None:
        if "rq_costed" in statement:
            seen.append((statement, params))

    view = ResourceView({"gpu": 100}, {"t": {"gpu": 1}})
    sa.event.listen(queue.engine, "before_cursor_execute", record)
    try:
        claimed = queue.store.claim_jobs(ClaimOrder(
            owner="w", cap=8, limit=8, lease_ttl=30, types=["t"], resources=view,
        ))
    finally:
        sa.event.remove(queue.engine, "before_cursor_execute", record)
    assert len(claimed) == 8
    with queue.engine.begin() as conn:  # back to ready, for the next probe
        j = queue.store.tables.jobs
        conn.execute(sa.update(j).where(j.c.id.in_([c.id for c in claimed]))
                     .values(state="ready", uses=None, lease_owner=None))
    ((sql, params),) = seen
    with queue.engine.connect() as conn:
        assert not full_scans(conn, dialect_name, sql, params)
        assert costed_index_name("readyq_jobs") in plan_text(conn, dialect_name, sql, params)
