"""The bulk insert's row layout, and PostgreSQL's COPY path when the database refuses a row."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

import readyq
from readyq import JobState
from readyq.dialects.postgresql import COPY_COLUMNS, copy_jobs
from readyq.store import BULK_COLUMNS, BULK_CONSTANTS, ROW_KEYS, NewJob, Store


def test_row_values_follow_the_row_keys_and_copy_columns_follow_them() -> None:
    job = NewJob("T", "A", "G", 2, 3, 4, 5.0, 6.0, None, (), None, False, "U")
    row = dict(zip(ROW_KEYS, Store._row_values(job, JobState.WAITING, 7, "E", 8, 9), strict=True))
    assert row == {
        "type": "T", "args": "A", "state": "waiting", "error": "E", "is_container": False,
        "parent_id": 8, "group_key": "G", "weight": 2, "priority": 3, "max_attempts": 4,
        "timeout": 5.0, "pending_deps": 7, "open_children": 9, "unique_key": "U",
        "run_after_at": 6.0, "run_after_delay": None, "finished_offset": None,
    }
    assert tuple(ROW_KEYS) == (*BULK_COLUMNS, "run_after_at", "run_after_delay", "finished_offset")
    assert tuple(COPY_COLUMNS) == (
        "id", *BULK_COLUMNS, *BULK_CONSTANTS, "run_after", "created_at", "updated_at",
        "finished_at",
    )


def test_a_refused_copy_raises_the_error_any_statement_would(
    queue: readyq.Queue, dialect_name: str
) -> None:
    if dialect_name != "postgresql":
        pytest.skip("COPY is PostgreSQL's bulk path")
    existing = queue.enqueue("a")
    store = queue._store
    row = store._row_values(NewJob("a", "{}"), JobState.READY, 0, None, None, 0)
    with queue.engine.connect() as conn:
        conn.execute(sa.select(sa.literal(1)))  # a transaction under way, as in insert_jobs
        with pytest.raises(sa.exc.IntegrityError) as caught:
            copy_jobs(conn, store.tables.jobs, [existing], [row], 0.0)  # a taken id
        assert type(caught.value.orig).__name__ == "UniqueViolation"
        conn.rollback()
        assert conn.execute(sa.select(sa.literal(1))).scalar_one() == 1
    assert queue.counts() == {"ready": 1}
