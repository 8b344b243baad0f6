"""The bulk insert's row layout, and PostgreSQL's COPY path when the database refuses a row."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

import readyq
from readyq import JobState
from readyq.dialects.postgresql import copy_jobs
from readyq.schema import BULK_COLUMNS, BULK_CONSTANTS, INSERT_COLUMNS, ROW_KEYS
from readyq.store import NewJob
from readyq.store.enqueue import row_values


def test_row_values_follow_the_row_keys_and_insert_columns_follow_them() -> None:
    job = NewJob("T", "A", "G", 2, 3, 4, 5.0, 6.0, None, (), None, False, "U", '{"gpu":2}', "K",
                 77)
    row = dict(zip(ROW_KEYS, row_values(job, JobState.WAITING, 7, "E", 8, 9), strict=True))
    assert row == {
        "type": "T", "args": "A", "state": "waiting", "error": "E", "is_container": False,
        "parent_id": 8, "group_key": "G", "weight": 2, "priority": 3, "max_attempts": 4,
        "timeout": 5.0, "pending_deps": 7, "open_children": 9, "unique_key": "U",
        "uses": '{"gpu":2}', "batch_key": "K", "spawned_by": 77, "run_after_at": 6.0,
        "run_after_delay": None, "finished_offset": None,
    }
    assert tuple(ROW_KEYS) == (*BULK_COLUMNS, "run_after_at", "run_after_delay", "finished_offset")
    assert tuple(INSERT_COLUMNS) == (
        "id", *BULK_COLUMNS, *BULK_CONSTANTS, "run_after", "created_at", "updated_at",
        "finished_at",
    )


def test_a_refused_copy_raises_the_error_any_statement_would(
    queue: readyq.Queue, dialect_name: str
) -> None:
    if dialect_name != "postgresql":
        pytest.skip("COPY is PostgreSQL's bulk path")
    existing = queue.enqueue("a")
    store = queue.store
    row = row_values(NewJob("a", "{}"), JobState.READY, 0, None, None, 0)
    with queue.engine.connect() as conn:
        conn.execute(sa.select(sa.literal(1)))  # a transaction under way, as in insert_jobs
        with pytest.raises(sa.exc.IntegrityError) as caught:
            copy_jobs(conn, store.tables.jobs, [existing], [row], 0.0)  # a taken id
        assert type(caught.value.orig).__name__ == "UniqueViolation"
        conn.rollback()
        assert conn.execute(sa.select(sa.literal(1))).scalar_one() == 1
    assert queue.counts() == {"ready": 1}


def test_a_connection_lost_during_copy_is_retried_and_the_batch_lands_once(
    queue: readyq.Queue, dialect_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if dialect_name != "postgresql":
        pytest.skip("COPY is PostgreSQL's bulk path")
    import readyq.dialects.postgresql as pg

    real = pg.copy_jobs
    killed: list[int] = []

    def copy_after_losing_the_connection(conn: sa.Connection, *args: object) -> None:
        if not killed:  # the first attempt's server process goes away before the COPY
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
            with queue.engine.connect() as other:
                other.exec_driver_sql(f"SELECT pg_terminate_backend({int(pid)})")
                other.commit()
            killed.append(pid)
            with pytest.raises(sa.exc.OperationalError) as caught:
                real(conn, *args)  # type: ignore[arg-type]
            assert conn.invalidated  # never handed out again
            # Told as lost, whatever SQLSTATE (none, with psycopg 3.2) the driver gives.
            assert caught.value.connection_invalidated
            raise caught.value
        real(conn, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(pg, "copy_jobs", copy_after_losing_the_connection)
    specs = [readyq.JobSpec("a", {"i": i}) for i in range(120)]
    ids = queue.enqueue_many(specs)
    assert len(killed) == 1
    assert len(set(ids)) == 120
    assert queue.counts() == {"ready": 120}
    assert [queue.get(i).args for i in ids[:2]] == [{"i": 0}, {"i": 1}]
