"""Sharp edges a new user meets: each test pins one, on every database it applies to."""

from __future__ import annotations

import logging
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from readyq import admin
from readyq.claim_order import ClaimOrder
from readyq.cli import main


def _jobs(queue: readyq.Queue) -> int:
    j = queue.store.tables.jobs
    with queue.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(j)).scalar_one())


# -- naive run_after datetimes are refused --------------------------------------------------


def test_a_naive_run_after_is_refused_and_writes_nothing(queue: readyq.Queue) -> None:
    naive = datetime.now() + timedelta(minutes=10)
    with pytest.raises(readyq.InvalidJobOption, match=r"naive datetime.*timezone.utc"):
        queue.enqueue("t", run_after=naive)
    with pytest.raises(readyq.InvalidJobOption, match="naive datetime"):
        queue.enqueue_many([readyq.JobSpec("t"), readyq.JobSpec("t", run_after=naive)])
    assert _jobs(queue) == 0
    # Aware datetimes and delays are still taken.
    aware = datetime.now(timezone.utc) + timedelta(minutes=10)
    when = queue.get(queue.enqueue("t", run_after=aware)).run_after
    assert when is not None and abs((when - aware).total_seconds()) < 0.01
    assert queue.get(queue.enqueue("t", run_after=timedelta(minutes=10))).run_after


# -- a handler's result that cannot be stored ----------------------------------------------


def test_a_result_that_cannot_be_stored_is_reported_as_such(
    queue: readyq.Queue, caplog: pytest.LogCaptureFixture
) -> None:
    @queue.handler("returns_a_set", max_attempts=1)
    def bad(job: readyq.Job) -> Any:
        return {1, 2}

    job_id = queue.enqueue("returns_a_set")
    with caplog.at_level(logging.INFO, logger="readyq.worker"):
        queue.run_worker(until_idle=True, poll_interval=0.05)
    info = queue.get(job_id)
    assert info.state is readyq.JobState.FAILED
    assert "returned a result that cannot be stored: the result is not JSON-serialisable" in (
        info.error or "")
    assert "InvalidJobResult" in (info.error or "")
    ends = [r.getMessage() for r in caplog.records if "returns_a_set" in r.getMessage()]
    assert any("returned a result that could not be stored" in m for m in ends), ends
    assert not any("raised" in m for m in ends), ends


def test_payload_messages_agree_with_their_subject() -> None:
    from readyq.payload import encode

    with pytest.raises(readyq.PayloadNotJSON, match=r"^result is not JSON"):
        encode({1}, max_bytes=100, what="result")
    with pytest.raises(readyq.PayloadNotJSON, match=r"^args are not JSON"):
        encode({1}, max_bytes=100, what="args")
    with pytest.raises(readyq.PayloadTooLarge, match=r"^result takes 12 bytes"):
        encode("x" * 10, max_bytes=5, what="result")


# -- one name for the attempt ------------------------------------------------------------


def test_job_info_attempt_is_the_handlers_attempt(queue: readyq.Queue) -> None:
    seen: list[int] = []

    @queue.handler("t", max_attempts=3, retry_backoff=0)
    def t(job: readyq.Job) -> None:
        seen.append(job.attempt)
        if job.attempt < 2:
            raise RuntimeError("again")

    job_id = queue.enqueue("t")
    assert queue.get(job_id).attempt == 0
    queue.run_worker(until_idle=True, poll_interval=0.02)
    info = queue.get(job_id)
    assert info.state is readyq.JobState.DONE
    assert info.attempt == info.attempts == seen[-1] == 2


# -- types no worker runs ----------------------------------------------------------------


def test_status_lists_the_types_that_no_worker_seems_to_run(queue: readyq.Queue) -> None:
    queue.enqueue("nosuchtype")
    queue.enqueue("nosuchtype")
    queue.enqueue("fresh")
    st = admin.status(queue)
    assert st.unclaimed_types == []  # nothing has waited a minute yet
    queue.store.clock_offset = 120
    st = admin.status(queue)
    assert sorted((u.type, u.runnable) for u in st.unclaimed_types) == [
        ("fresh", 1), ("nosuchtype", 2)
    ]
    # A type with a job in flight has a worker.
    queue.store.claim_jobs(ClaimOrder(owner="w", cap=1, limit=1, lease_ttl=300, types=["fresh"]))
    queue.enqueue("fresh")
    queue.store.clock_offset = 300
    assert [u.type for u in admin.status(queue).unclaimed_types] == ["nosuchtype"]
    assert admin.status(queue).to_json()["unclaimed_types"][0]["runnable"] == 2


def test_the_cli_status_names_an_unclaimed_type(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with readyq.Queue(db) as queue:
        queue.create_schema()
        queue.enqueue("nosuchtype")
    assert main(["--db", db, "status", "--unclaimed-after", "0"]) == 0
    out = capsys.readouterr().out
    assert "no worker seems to run job type 'nosuchtype'" in " ".join(out.split())


# -- URL mistakes ------------------------------------------------------------------------


def test_url_mistakes_name_the_fix() -> None:
    with pytest.raises(readyq.UnsupportedDatabase, match=r"postgresql\+psycopg://"):
        readyq.Queue("postgres://user@localhost/db")
    with pytest.raises(readyq.ConfigurationError, match=r"readyq.AsyncQueue"):
        readyq.Queue("sqlite+aiosqlite:///jobs.db")
    with pytest.raises(readyq.ConfigurationError, match=r"readyq.Queue"):
        readyq.AsyncQueue("sqlite:///jobs.db")
    try:
        import MySQLdb  # noqa: F401
    except ImportError:
        with pytest.raises(readyq.ConfigurationError, match=r"mysql\+pymysql://.*readyq\[mysql\]"):
            readyq.Queue("mysql://root@127.0.0.1/test")
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine("sqlite+aiosqlite://")
    with pytest.raises(readyq.ConfigurationError, match="AsyncQueue"):
        readyq.Queue(engine)  # type: ignore[arg-type]
    with pytest.raises(readyq.ConfigurationError, match=r"readyq.Queue"):
        readyq.AsyncQueue(sa.create_engine("sqlite://"))  # type: ignore[arg-type]


# -- no stray files ----------------------------------------------------------------------


def test_a_queue_on_a_missing_sqlite_file_leaves_no_file_behind(tmp_path: Path) -> None:
    path = tmp_path / "typo.db"
    queue = readyq.Queue(f"sqlite:///{path}")
    with pytest.raises(readyq.SchemaNotFound):
        queue.counts()
    queue.close()
    assert not path.exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith("typo.db")]


def test_an_existing_file_is_never_removed(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE app (id INTEGER)")
    engine.dispose()
    for _ in range(2):
        queue = readyq.Queue(f"sqlite:///{path}")
        with pytest.raises(readyq.SchemaNotFound):
            queue.counts()
        queue.close()
        assert path.exists()
