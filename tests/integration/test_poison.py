"""Poison: one value or row that the database or readyq cannot take never stops a worker.

* A handler's error text with a NUL character (which PostgreSQL text refuses) or a lone
  surrogate (which no driver can encode) is stored escaped: the attempt ends as its
  policy says, and the other outcomes of the same transaction are recorded.
* A value the database refuses all the same (here: a result longer than a column that
  was narrowed by hand, text outside the column's character set) fails that attempt
  alone, with an error saying what was refused; the rest of the batch commits and the
  worker goes on claiming. It is never waited out as an outage.
* A ready row whose args are not JSON (written by hand) fails at once with a clear
  error; the jobs claimed with it run.
* A state readyq does not know, or stored args that are not JSON, are shown as stored.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from typing import Any

import pytest
import sqlalchemy as sa

import readyq
import readyq.admin
from readyq import JobState
from readyq.payload import NotJSON


def run_bounded(queue: readyq.Queue, timeout: float = 30.0, **options: Any) -> Any:
    """Run a worker until idle in a thread; fail (instead of hanging) if it never is."""
    options = {"concurrency": 4, "poll_interval": 0.02, "lease_ttl": 10.0,
               "heartbeat_interval": 2.0, **options}
    worker = queue.worker(**options)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["stats"] = worker.run(until_idle=True, handle_signals=False)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        worker.stop()
        thread.join(30)
        pytest.fail(f"the worker did not become idle within {timeout}s: {queue.counts()} "
                    f"{worker.stats}")
    if "error" in box:
        raise box["error"]
    return box["stats"]


def together(queue: readyq.Queue, type_: str, fn: Any, n: int = 2, **kw: Any) -> None:
    """Register ``fn`` for ``type_`` so that ``n`` such jobs return at the same moment
    (their outcomes are then recorded in one transaction, as far as timing allows)."""
    barrier = threading.Barrier(n, timeout=10)

    def handler(job: readyq.Job) -> Any:
        barrier.wait()
        return fn(job)

    queue.handler(type_, **kw)(handler)


@pytest.mark.parametrize(
    "message, shown",
    [("bad\x00byte", "bad\\x00byte"), ("bad\ud800half", "bad\\ud800half")],
    ids=["nul", "lone-surrogate"],
)
def test_an_error_text_no_database_stores_is_stored_escaped(
    queue: readyq.Queue, message: str, shown: str
) -> None:
    def fn(job: readyq.Job) -> Any:
        if job.args["bad"]:
            raise ValueError(message)
        return {"ok": True}

    together(queue, "t", fn, max_attempts=1)
    bad = queue.enqueue("t", {"bad": True})
    good = queue.enqueue("t", {"bad": False})
    stats = run_bounded(queue)
    assert queue.get(good).state == JobState.DONE
    assert queue.get(good).result == {"ok": True}
    info = queue.get(bad)
    assert info.state == JobState.FAILED
    assert f"ValueError: {shown}" in (info.error or "")
    assert stats.db_errors == 0


def narrow_result_column(queue: readyq.Queue, dialect_name: str) -> None:
    """Make the database refuse results longer than 100 characters, as a schema edited
    by hand (or a server limit) would."""
    jobs = queue.store.tables.jobs.name
    if dialect_name == "sqlite":
        return  # see sqlite_queue: a per-connection length limit
    with queue.engine.begin() as conn:
        if dialect_name == "postgresql":
            conn.exec_driver_sql(f"ALTER TABLE {jobs} ALTER COLUMN result TYPE varchar(100)")
        else:
            conn.exec_driver_sql(f"ALTER TABLE {jobs} MODIFY result VARCHAR(100)")


def refusing_queue(db: str, dialect_name: str) -> readyq.Queue:
    """A queue whose database refuses long results (SQLite: a length limit of 2,000
    bytes on every value of every connection of the engine)."""
    if dialect_name != "sqlite":
        q = readyq.Queue(db)
        q.create_schema()
        narrow_result_column(q, dialect_name)
        return q
    engine = sa.create_engine(db)

    @sa.event.listens_for(engine, "connect")
    def limit(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 2000)

    q = readyq.Queue(engine)
    q.create_schema()
    return q


def test_a_value_the_database_refuses_fails_that_attempt_alone(
    db: str, dialect_name: str
) -> None:
    if dialect_name == "sqlite" and not hasattr(sqlite3.Connection, "setlimit"):
        pytest.skip("Connection.setlimit needs Python 3.11")
    queue = refusing_queue(db, dialect_name)
    try:
        def fn(job: readyq.Job) -> Any:
            return {"text": "x" * job.args["n"]}

        together(queue, "t", fn, n=3, max_attempts=3)
        long = queue.enqueue("t", {"n": 5000})
        short = [queue.enqueue("t", {"n": 3}) for _ in range(2)]
        stats = run_bounded(queue)
        for i in short:
            assert queue.get(i).state == JobState.DONE
        info = queue.get(long)
        # Failed at once, not retried: the same value would be refused again.
        assert info.state == JobState.FAILED and info.attempts == 1
        assert "the database refused its result" in (info.error or "")
        assert stats.done == 2 and stats.failed == 1 and stats.db_errors == 0

        # The worker goes on: a job enqueued afterwards runs.
        queue.handler("t2")(lambda job: "fine")
        later = queue.enqueue("t2")
        run_bounded(queue)
        assert queue.get(later).state == JobState.DONE
    finally:
        queue.close()


@pytest.mark.parametrize("db", ["mariadb"], indirect=True)
def test_text_outside_the_columns_character_set_fails_that_attempt_alone(
    queue: readyq.Queue,
) -> None:
    """A MariaDB table whose error column is latin1 (a database made with that default)
    refuses a message in Japanese: the attempt fails, saying so, and nothing wedges."""
    jobs = queue.store.tables.jobs.name
    with queue.engine.begin() as conn:
        conn.exec_driver_sql(f"ALTER TABLE {jobs} MODIFY error TEXT CHARACTER SET latin1")

    def fn(job: readyq.Job) -> Any:
        if job.args["bad"]:
            raise ValueError("日本語のエラー")
        return "ok"

    together(queue, "t", fn, max_attempts=2)
    bad = queue.enqueue("t", {"bad": True})
    good = queue.enqueue("t", {"bad": False})
    run_bounded(queue)
    assert queue.get(good).state == JobState.DONE
    info = queue.get(bad)
    assert info.state == JobState.FAILED and info.attempts == 1
    assert "the database refused its error text" in (info.error or "")
    assert "1366" in (info.error or "")


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_a_ready_row_with_args_that_are_not_json_fails_and_the_rest_run(
    queue: readyq.Queue, isolation: str
) -> None:
    from isolated.handlers import echo_args

    queue.handler("t", max_attempts=3, isolation=isolation)(echo_args)
    ids = [queue.enqueue("t", {"n": n}) for n in range(3)]
    jobs = queue.store.tables.jobs
    with queue.engine.begin() as conn:
        conn.execute(sa.update(jobs).where(jobs.c.id == ids[1]).values(args="{not json"))
    stats = run_bounded(queue, concurrency=3)
    assert [queue.get(i).state for i in ids] == [
        JobState.DONE, JobState.FAILED, JobState.DONE
    ]
    bad = queue.get(ids[1])
    assert bad.attempts == 1 and "its stored args are not JSON" in (bad.error or "")
    assert bad.args == "{not json" and isinstance(bad.args, NotJSON)
    assert stats.failed == 1 and stats.done == 2


def test_a_state_readyq_does_not_know_is_shown_as_stored(queue: readyq.Queue) -> None:
    ids = [queue.enqueue("t", {"n": n}) for n in range(3)]
    jobs = queue.store.tables.jobs
    with queue.engine.begin() as conn:
        conn.execute(sa.update(jobs).where(jobs.c.id == ids[0]).values(state="bogus"))
        conn.execute(sa.update(jobs).where(jobs.c.id == ids[2]).values(result="{half"))
    page = queue.jobs(limit=10)
    assert [(j.id, str(j.state)) for j in page.jobs] == [
        (ids[2], "ready"), (ids[1], "ready"), (ids[0], "bogus")
    ]
    info = queue.get(ids[0])
    assert info.state == "bogus" and not info.state.is_terminal
    assert queue.get(ids[2]).result == "{half"
    assert queue.counts()["bogus"] == 1
    assert readyq.admin.status(queue).to_json()["states"]["bogus"] == 1


def test_worker_ids_with_control_characters_are_refused(queue: readyq.Queue) -> None:
    """A worker id is written into every lease and log line of its worker."""
    for bad in ("a\nb", "clear\x1b[2J", "rtl\u202e", "tab\there"):
        with pytest.raises(readyq.ConfigurationError, match="worker_id"):
            queue.worker(worker_id=bad)
    with pytest.raises(readyq.ConfigurationError, match="at most 120"):
        queue.worker(worker_id="w" * 121)


def test_a_job_type_with_a_newline_keeps_each_log_line_one_line(
    queue: readyq.Queue, caplog: pytest.LogCaptureFixture
) -> None:
    forged = "t\nreadyq.worker INFO job 99 (x) attempt 1 done"
    queue.handler(forged)(lambda job: None)
    job_id = queue.enqueue(forged)
    with caplog.at_level(logging.INFO, logger="readyq.worker"):
        run_bounded(queue)
    assert queue.get(job_id).state == JobState.DONE
    about = [r.getMessage() for r in caplog.records if getattr(r, "job_id", None) == job_id]
    assert len(about) == 2  # started, done
    for message in about:
        assert "\n" not in message and "t\\x0areadyq.worker" in message
