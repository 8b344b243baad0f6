"""SQLite: a write transaction waits for another connection's write lock by polling
(``SQLiteDialect.begin_write``), never past the busy timeout, and leaves the
connection's busy timeout as it found it."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

import readyq
from readyq.dialects import sqlite as sqlite_dialect


def busy_timeout(queue: readyq.Queue) -> int:
    with queue.engine.connect() as conn:
        return int(conn.exec_driver_sql("PRAGMA busy_timeout").scalar_one())


@pytest.fixture
def queue(tmp_path: Path) -> readyq.Queue:
    q = readyq.Queue(f"sqlite:///{tmp_path / 'q.db'}")
    q.create_schema()
    yield q
    q.close()


def hold_write_lock(path: str, seconds: float, taken: threading.Event) -> threading.Thread:
    def hold() -> None:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        taken.set()
        time.sleep(seconds)
        other.execute("COMMIT")
        other.close()

    thread = threading.Thread(target=hold)
    thread.start()
    return thread


def test_a_write_waits_for_the_lock_and_then_commits(queue: readyq.Queue) -> None:
    path = queue.engine.url.database
    assert path is not None
    taken = threading.Event()
    holder = hold_write_lock(path, 0.3, taken)
    assert taken.wait(5)
    began = time.monotonic()
    job_id = queue.enqueue("a")
    waited = time.monotonic() - began
    holder.join()
    assert waited >= 0.25  # it did wait for the other writer
    assert queue.get(job_id).state == "ready"
    assert busy_timeout(queue) == sqlite_dialect.BUSY_TIMEOUT_MS


def test_the_wait_ends_at_the_busy_timeout_with_the_lock_error(
    queue: readyq.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_dialect, "BUSY_TIMEOUT_MS", 200)
    path = queue.engine.url.database
    assert path is not None
    taken = threading.Event()
    holder = hold_write_lock(path, 1.0, taken)
    assert taken.wait(5)
    try:
        with queue.engine.connect() as conn:
            with pytest.raises(sa.exc.OperationalError, match="database is locked"):
                queue.store.dialect.begin_write(conn)
            # The busy timeout is set back (to BUSY_TIMEOUT_MS), however the wait ended.
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar_one() == 200
    finally:
        holder.join()
    assert queue.counts() == {}


def test_an_uncontended_write_sends_one_begin(queue: readyq.Queue) -> None:
    statements: list[str] = []

    def seen(conn: object, cursor: object, statement: str, *args: object) -> None:
        statements.append(statement)

    sa.event.listen(queue.engine, "before_cursor_execute", seen)
    queue.enqueue("a")
    sa.event.remove(queue.engine, "before_cursor_execute", seen)
    assert [s for s in statements if s.startswith("BEGIN")] == ["BEGIN IMMEDIATE"]
