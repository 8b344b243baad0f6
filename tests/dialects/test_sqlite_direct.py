"""SQLite: the loop's statements run on sqlite3's own cursor (``SQLiteDialect.execute``,
:mod:`readyq.dialects.sqlite_direct`) and give what SQLAlchemy's execution gives; whoever
watches the engine's statements still sees them all.

SQLite only: on PostgreSQL and MariaDB ``Dialect.execute`` is ``Connection.execute``.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from readyq.claim_order import ClaimOrder
from readyq.dialects import sqlite_direct as direct
from readyq.dialects.base import Dialect
from readyq.dialects.sqlite import SQLiteDialect
from readyq.errors import SchemaNotFound


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[readyq.Queue]:
    q = readyq.Queue(f"sqlite:///{tmp_path / 'q.db'}")
    q.create_schema()
    yield q
    q.close()


def rows_of(result: Any) -> list[tuple[tuple[Any, ...], tuple[str, ...]]]:
    return [(tuple(r), tuple(r._fields)) for r in result.all()]


def run_mixed_workload(queue: readyq.Queue) -> dict[str, int]:
    """Groups of several weights, chains, a failure that retries, a delayed job and a
    parent with children: every branch of the loop's statements runs."""
    ran: Counter[str] = Counter()
    failed_once: set[int] = set()

    @queue.handler("work", retry_backoff=0.01, retry_backoff_max=0.01)
    def work(job: readyq.Job) -> dict[str, int]:
        ran[job.group] += 1
        if job.args.get("fail_once") and job.id not in failed_once:
            failed_once.add(job.id)
            raise RuntimeError("first attempt fails")
        return {"n": job.args["n"]}

    @queue.handler("timed", timeout=30)
    def timed(job: readyq.Job) -> None:
        ran["timed"] += 1

    for g, weight in (("a", 3), ("b", 2), ("c", 1)):
        for n in range(12):
            queue.enqueue("work", {"n": n, "fail_once": n == 3}, group=g, weight=weight)
    first = queue.enqueue("work", {"n": 100}, group="chain")
    second = queue.enqueue("work", {"n": 101}, group="chain", depends_on=[first])
    queue.enqueue("work", {"n": 102}, group="chain", depends_on=[first, second])
    queue.enqueue("timed", {}, run_after=0.05)
    queue.enqueue("timed", {}, group="b")
    worker = queue.worker(concurrency=5, poll_interval=0.01)
    worker.run(until_idle=True)
    assert queue.counts() == {"done": 41}
    return dict(ran)


def test_each_direct_statement_returns_what_sqlalchemy_returns(
    queue: readyq.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each statement the loop runs direct is first run through SQLAlchemy inside a
    savepoint that is rolled back; the rows, their column names and the row counts must
    be the same both ways.

    The two runs read SQLite's clock a moment apart, so a delayed job may become ready
    between them: a pair that differs is run again (both ways), up to three times; a
    difference in the statement's handling shows every time.
    """
    direct_execute = SQLiteDialect.execute
    compared: Counter[str] = Counter()

    def through_sqlalchemy(self: SQLiteDialect, conn: sa.Connection, stmt: Any,
                           params: Any) -> tuple[Any, Any]:
        result = Dialect.execute(self, conn, stmt, params)
        rows = rows_of(result) if result.returns_rows else []
        # (with RETURNING, sqlite3 counts the rows as they are fetched and SQLAlchemy
        # reads the count before; readyq reads the rows instead)
        count = result.rowcount if isinstance(stmt, sa.Update) and not result.returns_rows else None
        return rows, count

    def both_ways(self: SQLiteDialect, conn: sa.Connection, stmt: Any, params: Any = None) -> Any:
        raw = self._direct_connection(conn)
        if raw is None or direct.plan(stmt, conn.dialect) is None:
            return direct_execute(self, conn, stmt, params)
        for _ in range(3):
            raw.execute("SAVEPOINT rq_expected")
            try:
                expected = through_sqlalchemy(self, conn, stmt, params)
            finally:
                raw.execute("ROLLBACK TO rq_expected")
                raw.execute("RELEASE rq_expected")
            raw.execute("SAVEPOINT rq_direct")
            got = direct_execute(self, conn, stmt, params)
            assert isinstance(got, direct.DirectResult)
            count = got.rowcount if expected[1] is not None else None
            if (rows_of(got), count) == expected:
                raw.execute("RELEASE rq_direct")
                compared[" ".join(str(stmt).split()[:3])] += 1
                return got
            raw.execute("ROLLBACK TO rq_direct")
            raw.execute("RELEASE rq_direct")
        pytest.fail(f"{stmt}\n{params}\ndirect: {rows_of(got), count}\nSQLAlchemy: {expected}")

    monkeypatch.setattr(SQLiteDialect, "execute", both_ways)
    ran = run_mixed_workload(queue)
    assert ran["a"] > 12 and ran["timed"] == 2  # the failures ran again
    kinds = set(compared)
    # the claim and the finish, the dependents and their release, the gate and the
    # fair-share progress, the counts, and the idle and reclaim checks
    assert {"UPDATE readyq_jobs SET", "UPDATE readyq_groups SET", "UPDATE readyq_gate SET",
            "SELECT readyq_job_deps.job_id, readyq_jobs.is_container",
            "SELECT readyq_gate.vclock, readyq_gate.seq,",  # and the pauses standing
            "SELECT readyq_jobs.id FROM"} <= kinds, kinds
    assert sum(compared.values()) >= 50


def test_without_listeners_the_loop_runs_direct(queue: readyq.Queue) -> None:
    ran = run_mixed_workload(queue)
    assert sum(ran.values()) == 44  # 41 jobs, three of them twice
    dialect = queue.store.dialect
    assert isinstance(dialect, SQLiteDialect)
    planned = [s for s, p in dialect._plans.items() if p is not None]
    claims = [s for s in planned if isinstance(s, sa.Update) and "RETURNING" in str(s)]
    assert claims, "the claim ran through SQLAlchemy"


def test_a_statement_listener_sees_every_statement_of_the_loop(queue: readyq.Queue) -> None:
    """With a ``before_cursor_execute`` listener on the engine, the loop's statements go
    through SQLAlchemy: the listener sees the claim and the finish."""
    seen: list[str] = []

    def listen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(" ".join(statement.split()))

    sa.event.listen(queue.engine, "before_cursor_execute", listen)
    try:
        run_mixed_workload(queue)
    finally:
        sa.event.remove(queue.engine, "before_cursor_execute", listen)
    assert any(s.startswith("UPDATE readyq_jobs SET state=") and "RETURNING" in s for s in seen)
    assert any(s.startswith("UPDATE readyq_jobs SET result=") for s in seen)
    assert any(s.startswith("SELECT readyq_gate.vclock") for s in seen)
    dialect = queue.store.dialect
    assert isinstance(dialect, SQLiteDialect)
    assert dialect._plans == {}  # nothing was planned, so nothing ran direct


def test_a_callable_parameter_is_read_at_each_execution(queue: readyq.Queue) -> None:
    """The store's clock offset is a parameter read when the statement runs: moving it
    moves the clock of a statement already planned."""
    queue.enqueue("a")
    store = queue.store
    claimed = store.claim_jobs(ClaimOrder(owner="w", cap=1, limit=1, lease_ttl=10.0, types=None))
    assert len(claimed) == 1
    assert store.reclaim_due() is False
    store.clock_offset = 60.0
    assert store.reclaim_due() is True
    store.clock_offset = 0.0
    assert store.reclaim_due() is False


def test_errors_are_wrapped_as_sqlalchemy_wraps_them(queue: readyq.Queue) -> None:
    store = queue.store
    dialect = store.dialect
    stmt = sa.select(store.tables.gate.c.vclock)
    with queue.engine.connect() as conn:
        conn.exec_driver_sql(f"DROP TABLE {store.tables.gate.name}")
        conn.commit()
        with pytest.raises(sa.exc.OperationalError) as caught:
            dialect.execute(conn, stmt)
        assert isinstance(caught.value.orig, sqlite3.OperationalError)
        assert "no such table" in str(caught.value)
    # and the store still tells the user what is wrong
    with queue.engine.connect() as conn:
        conn.exec_driver_sql(f"DROP TABLE {store.tables.jobs.name}")
        conn.commit()
    with pytest.raises(SchemaNotFound):
        store.reclaim_due()


def test_a_missing_parameter_raises_sqlalchemys_error_and_writes_nothing(
    queue: readyq.Queue,
) -> None:
    job_id = queue.enqueue("a")
    jobs = queue.store.tables.jobs
    stmt = (
        sa.update(jobs)
        .where(jobs.c.id == sa.bindparam("which"))
        .values(priority=sa.bindparam("p", type_=sa.Integer))
    )
    with queue.engine.connect() as conn:
        with pytest.raises(sa.exc.StatementError, match="which"):
            queue.store.dialect.execute(conn, stmt, {"p": 5})
        conn.rollback()
        updated = queue.store.dialect.execute(conn, stmt, {"which": job_id, "p": 7})
        assert updated.rowcount == 1
        conn.rollback()
    with queue.engine.connect() as conn:
        assert conn.execute(sa.select(jobs.c.priority)).scalar_one() == 0


def test_the_first_direct_statement_begins_a_transaction(queue: readyq.Queue) -> None:
    job_id = queue.enqueue("a")
    jobs = queue.store.tables.jobs
    stmt = sa.update(jobs).where(jobs.c.id == job_id).values(priority=sa.bindparam("p"))
    dialect = queue.store.dialect
    with queue.engine.connect() as conn:
        dialect.execute(conn, stmt, {"p": 4})
        assert conn.in_transaction()
        conn.rollback()
    with queue.engine.connect() as conn:
        assert conn.execute(sa.select(jobs.c.priority)).scalar_one() == 0
        dialect.execute(conn, stmt, {"p": 9})
        conn.commit()
    with queue.engine.connect() as conn:
        assert conn.execute(sa.select(jobs.c.priority)).scalar_one() == 9


def test_many_parameter_sets_run_as_one_executemany(queue: readyq.Queue) -> None:
    ids = [queue.enqueue("a") for _ in range(3)]
    jobs = queue.store.tables.jobs
    stmt = (
        sa.update(jobs)
        .where(jobs.c.id == sa.bindparam("which"))
        .values(priority=sa.bindparam("p", type_=sa.Integer))
    )
    with queue.engine.connect() as conn:
        result = queue.store.dialect.execute(
            conn, stmt, [{"which": i, "p": n} for n, i in enumerate(ids, start=1)]
        )
        assert result.rowcount == 3
        conn.commit()
        got = conn.execute(sa.select(jobs.c.id, jobs.c.priority).order_by(jobs.c.id)).all()
    assert [tuple(r) for r in got] == [(i, n) for n, i in enumerate(ids, start=1)]


def test_statements_whose_text_follows_their_parameters_run_through_sqlalchemy(
    queue: readyq.Queue,
) -> None:
    ids = [queue.enqueue("a") for _ in range(3)]
    jobs = queue.store.tables.jobs
    expanding = sa.select(jobs.c.id).where(jobs.c.id.in_(sa.bindparam("ids", expanding=True)))
    insert = sa.insert(queue.store.tables.groups)
    dialect = queue.store.engine.dialect
    assert direct.plan(expanding, dialect) is None
    assert direct.plan(insert, dialect) is None
    with queue.engine.connect() as conn:
        got = queue.store.dialect.execute(conn, expanding, {"ids": ids[:2]})
        assert sorted(got.scalars().all()) == ids[:2]


def test_result_processors_apply_to_direct_rows(queue: readyq.Queue) -> None:
    """A Boolean column comes back as a bool, as SQLAlchemy returns it."""
    queue.enqueue("a")
    jobs = queue.store.tables.jobs
    stmt = sa.select(jobs.c.cancel_requested, jobs.c.is_container)
    with queue.engine.connect() as conn:
        row = queue.store.dialect.execute(conn, stmt).first()
        assert row == (False, False)
        assert type(row[0]) is bool
        assert row._fields == ("cancel_requested", "is_container")


def test_an_idle_ticks_reads_leave_the_drivers_prepared_statements_alone(
    queue: readyq.Queue,
) -> None:
    """The one-statement reads of a tick (is a job runnable, is one unfinished, is a lease
    due) run as plain SELECTs: Python's sqlite3 opens no transaction for them. Switching
    the connection to autocommit would cost SQLAlchemy's reset on its way back to the
    pool, ``PRAGMA read_uncommitted = 0``, which expires every statement sqlite3 has
    prepared on the connection, so that the next claim compiles its SQL again."""
    store = queue.store
    queue.enqueue("t")
    seen: list[str] = []

    def trace(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        dbapi_conn.set_trace_callback(seen.append)

    def untrace(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.set_trace_callback(None)

    sa.event.listen(queue.engine, "checkout", trace)
    sa.event.listen(queue.engine, "checkin", untrace)
    try:
        assert store.runnable_exists(["t"])
        assert store.has_unfinished(["t"])
        assert store.reclaim_expired().total == 0
    finally:
        sa.event.remove(queue.engine, "checkout", trace)
        sa.event.remove(queue.engine, "checkin", untrace)
    assert len(seen) == 3, seen
    assert all(s.lstrip().startswith("SELECT") for s in seen), seen
