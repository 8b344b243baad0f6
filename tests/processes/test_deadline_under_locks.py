"""An isolated job's timeout is kept whatever the database does.

The child heartbeats (or saves its state) all the time, and another session holds the
job's row lock (on SQLite: the database's write lock) for much longer than the job's
timeout, so every heartbeat and every write about the job waits. The worker's watch
of the child never waits for the database: the child is stopped at its deadline (plus
the SIGTERM grace), and the timeout is recorded once the lock is released.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

import readyq
from isolated import handlers
from readyq import JobState

pytestmark = pytest.mark.slow

# The deadline runs from the claim, so it also covers the child's start (the spawner's
# fork and the handler's imports): more than 2 s on 2 cores that run the suite in parallel.
TIMEOUT = 4.0
GRACE = 0.5
LOCKED_FOR = 12.0


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("handler", ["heartbeat_forever", "save_state_forever"])
def test_the_hard_stop_at_the_timeout_happens_while_the_job_row_is_locked(
    queue: readyq.Queue, dialect_name: str, tmp_path: Path, handler: str
) -> None:
    queue.handler("beat", timeout=TIMEOUT, max_attempts=1,
                  isolation="process")(getattr(handlers, handler))
    pid_file = tmp_path / "pid"
    job_id = queue.enqueue("beat", {"pid_file": str(pid_file)})
    worker = queue.worker(concurrency=1, lease_ttl=30.0, heartbeat_interval=0.5,
                          poll_interval=0.05, kill_grace=GRACE)
    runner = threading.Thread(target=worker.run, kwargs={"handle_signals": False},
                              daemon=True)
    released = threading.Event()
    locked = threading.Event()
    jobs = queue.store.tables.jobs

    def hold_the_lock() -> None:
        with queue.engine.connect() as conn:
            if dialect_name == "sqlite":
                queue.store.dialect.begin_write(conn)
            else:
                conn.execute(sa.select(jobs.c.id).where(jobs.c.id == job_id).with_for_update())
            locked.set()
            released.wait(LOCKED_FOR)
            conn.rollback()

    locker = threading.Thread(target=hold_the_lock, daemon=True)
    try:
        runner.start()
        deadline = time.monotonic() + 60
        while not pid_file.exists():
            assert time.monotonic() < deadline, "the child did not start"
            time.sleep(0.01)
        started = time.monotonic()
        pid = int(pid_file.read_text())
        locker.start()
        assert locked.wait(10)
        while alive(pid):
            assert time.monotonic() - started < LOCKED_FOR - 1, (
                "the child outlived its timeout while the row was locked"
            )
            time.sleep(0.01)
        stopped_after = time.monotonic() - started
        assert stopped_after <= TIMEOUT + GRACE + 1.0, stopped_after
        released.set()
        deadline = time.monotonic() + 30
        while queue.get(job_id).state is not JobState.FAILED:
            assert time.monotonic() < deadline, queue.get(job_id)
            time.sleep(0.05)
        assert f"timed out after {TIMEOUT:g}s" in (queue.get(job_id).error or "")
    finally:
        released.set()
        worker.stop()
        runner.join(30)
        if locker.ident is not None:  # started: a failure before it must not be hidden
            locker.join(30)
    assert os.path.exists(pid_file)
