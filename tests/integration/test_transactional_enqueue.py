"""Enqueue inside the caller's transaction: the job exists exactly when the caller commits.

The caller's Connection or Session is opened on ``queue.engine``, so on SQLite it is the
same database file; readyq neither commits nor rolls it back.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import readyq
from readyq import JobState


def run_until_idle(queue: readyq.Queue) -> readyq.WorkerStats:
    # Same options as conftest.run_until_idle; defined here so that this module does not
    # depend on which directory's conftest is imported under the name "conftest".
    return queue.run_worker(
        until_idle=True, concurrency=4, poll_interval=0.02, lease_ttl=10.0,
        heartbeat_interval=2.0,
    )


@pytest.fixture
def echo(queue: readyq.Queue) -> list[Any]:
    seen: list[Any] = []

    @queue.handler("echo")
    def handler(job: readyq.Job) -> Any:
        seen.append(job.args)
        return job.args

    return seen


@pytest.fixture
def app_table(queue: readyq.Queue) -> Iterator[sa.Table]:
    """An application table written in the same transaction as the enqueue."""
    md = sa.MetaData()
    table = sa.Table(
        "app_orders",
        md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("job_id", sa.BigInteger, nullable=False),
    )
    md.create_all(queue.engine)
    yield table
    md.drop_all(queue.engine)


def job_rows(queue: readyq.Queue) -> int:
    j = queue.store.tables.jobs
    with queue.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(j)).scalar_one())


def dep_rows(queue: readyq.Queue) -> int:
    d = queue.store.tables.deps
    with queue.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(d)).scalar_one())


def order_rows(queue: readyq.Queue, table: sa.Table) -> list[tuple[int, int]]:
    with queue.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.select(table).order_by(table.c.id))]


def test_connection_rollback_leaves_no_job(
    queue: readyq.Queue, echo: list[Any], app_table: sa.Table
) -> None:
    with queue.engine.connect() as conn:
        tx = conn.begin()
        job_id = queue.enqueue("echo", {"order": 1}, connection=conn)
        container = queue.enqueue_container("batch", connection=conn)
        child = queue.enqueue("echo", {"child": True}, parent=container, depends_on=[job_id],
                              connection=conn)
        conn.execute(sa.insert(app_table).values(id=1, job_id=job_id))
        # Visible inside the transaction...
        j = queue.store.tables.jobs
        inside = conn.execute(sa.select(j.c.id).where(j.c.id.in_([job_id, child]))).scalars()
        assert sorted(inside) == sorted([job_id, child])
        # ...and to nobody else before the commit.
        with pytest.raises(readyq.JobNotFound):
            queue.get(job_id)
        tx.rollback()

    for missing in (job_id, container, child):
        with pytest.raises(readyq.JobNotFound):
            queue.get(missing)
    assert job_rows(queue) == 0
    assert dep_rows(queue) == 0
    assert order_rows(queue, app_table) == []
    run_until_idle(queue)
    assert echo == []


def test_connection_commit_runs_the_job(
    queue: readyq.Queue, echo: list[Any], app_table: sa.Table
) -> None:
    with queue.engine.connect() as conn:
        tx = conn.begin()
        job_id = queue.enqueue("echo", {"order": 2}, connection=conn)
        after = queue.enqueue("echo", {"after": 2}, depends_on=[job_id], connection=conn)
        conn.execute(sa.insert(app_table).values(id=2, job_id=job_id))
        with pytest.raises(readyq.JobNotFound):
            queue.get(job_id)
        tx.commit()

    assert queue.get(job_id).state is JobState.READY
    assert queue.get(after).state is JobState.WAITING
    assert order_rows(queue, app_table) == [(2, job_id)]
    run_until_idle(queue)
    assert queue.get(job_id).state is JobState.DONE
    assert queue.get(job_id).result == {"order": 2}
    assert queue.get(after).state is JobState.DONE
    assert echo == [{"order": 2}, {"after": 2}]


def test_failed_enqueue_inside_a_transaction_leaves_it_usable(
    queue: readyq.Queue, echo: list[Any], app_table: sa.Table
) -> None:
    """Bad input is refused before anything is written: the caller's work survives."""
    with queue.engine.connect() as conn:
        tx = conn.begin()
        conn.execute(sa.insert(app_table).values(id=3, job_id=0))
        with pytest.raises(readyq.PayloadNotJSON):
            queue.enqueue("echo", {1, 2}, connection=conn)
        with pytest.raises(readyq.UnknownJobType):
            queue.enqueue("nope", connection=conn)
        job_id = queue.enqueue("echo", {"order": 3}, connection=conn)
        tx.commit()
    assert order_rows(queue, app_table) == [(3, 0)]
    assert job_rows(queue) == 1
    run_until_idle(queue)
    assert queue.get(job_id).state is JobState.DONE


def test_session_rollback_leaves_no_job(
    queue: readyq.Queue, echo: list[Any], app_table: sa.Table
) -> None:
    with Session(queue.engine) as session:
        session.execute(sa.insert(app_table).values(id=4, job_id=0))
        job_id = queue.enqueue("echo", {"session": "rollback"}, connection=session)
        other = queue.enqueue("echo", depends_on=[job_id], connection=session)
        with pytest.raises(readyq.JobNotFound):
            queue.get(job_id)
        session.rollback()

    for missing in (job_id, other):
        with pytest.raises(readyq.JobNotFound):
            queue.get(missing)
    assert job_rows(queue) == 0
    assert dep_rows(queue) == 0
    assert order_rows(queue, app_table) == []
    run_until_idle(queue)
    assert echo == []


def test_session_commit_runs_the_job(
    queue: readyq.Queue, echo: list[Any], app_table: sa.Table
) -> None:
    with Session(queue.engine) as session:
        job_id = queue.enqueue("echo", {"session": "commit"}, connection=session)
        session.execute(sa.insert(app_table).values(id=5, job_id=job_id))
        with pytest.raises(readyq.JobNotFound):
            queue.get(job_id)
        session.commit()

    assert queue.get(job_id).state is JobState.READY
    assert order_rows(queue, app_table) == [(5, job_id)]
    run_until_idle(queue)
    info = queue.get(job_id)
    assert info.state is JobState.DONE
    assert info.result == {"session": "commit"}
    assert echo == [{"session": "commit"}]


def test_session_begin_context_manager(
    queue: readyq.Queue, echo: list[Any], app_table: sa.Table
) -> None:
    """``with session.begin():`` commits on success and rolls back on an exception."""
    with Session(queue.engine) as session:
        with pytest.raises(RuntimeError, match="abort"), session.begin():
            doomed = queue.enqueue("echo", {"doomed": True}, connection=session)
            raise RuntimeError("abort the unit of work")
        with session.begin():
            kept = queue.enqueue("echo", {"kept": True}, connection=session)

    # SQLite may hand the rolled-back id out again, so check rows rather than the id.
    assert job_rows(queue) == 1
    assert queue.get(kept).args == {"kept": True}
    if doomed != kept:
        with pytest.raises(readyq.JobNotFound):
            queue.get(doomed)
    run_until_idle(queue)
    assert queue.get(kept).state is JobState.DONE
    assert echo == [{"kept": True}]
