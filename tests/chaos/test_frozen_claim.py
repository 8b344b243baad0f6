"""A worker frozen inside its claim transaction no longer stalls every other worker.

A claim holds the gate row's lock until it commits. A process frozen (SIGSTOP) while it
holds it used to stall every other worker's claims until it resumed. On the engines
readyq creates, the server now ends a session idle inside a transaction after
``idle_transaction_timeout`` (PostgreSQL ``idle_in_transaction_session_timeout``,
MariaDB ``idle_transaction_timeout``): the lock is released, the others claim again, and
the frozen transaction is rolled back (it finds its session gone when it resumes).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

import readyq

pytestmark = pytest.mark.slow

HOLDER = Path(__file__).resolve().parent / "gate_holder.py"
TIMEOUT = 1.0  # seconds; MariaDB counts whole seconds


@pytest.mark.parametrize("db", ["postgresql", "mariadb"], indirect=True)
def test_a_worker_frozen_inside_its_claim_stalls_the_others_only_until_the_timeout(
    db: str,
) -> None:
    queue = readyq.Queue(db)
    queue.create_schema()
    ids = [queue.enqueue("t", {"n": n}) for n in range(4)]
    holder = subprocess.Popen(
        [sys.executable, str(HOLDER), db, str(TIMEOUT)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    worker_thread: threading.Thread | None = None
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "LOCKED"
        locked_at = time.monotonic()
        os.kill(holder.pid, signal.SIGSTOP)

        started: list[float] = []
        queue.handler("t")(lambda job: started.append(time.monotonic() - locked_at))
        worker = queue.worker(concurrency=2, poll_interval=0.05, lease_ttl=10.0,
                              heartbeat_interval=2.0)
        worker_thread = threading.Thread(
            target=worker.run, kwargs={"until_idle": True, "handle_signals": False})
        worker_thread.start()
        worker_thread.join(TIMEOUT + 6)
        assert not worker_thread.is_alive(), "claims still stalled by the frozen process"
        assert len(started) == 4
        # The claims waited for the frozen holder's lock, and no longer than needed.
        assert 0.7 * TIMEOUT <= min(started) <= TIMEOUT + 4, started
        assert [queue.get(i).state for i in ids] == [readyq.JobState.DONE] * 4

        os.kill(holder.pid, signal.SIGCONT)
        holder.stdin.write("go on\n")
        holder.stdin.flush()
        said = holder.stdout.readline().strip()
        assert said.startswith("LOST"), f"the frozen claim should be rolled back: {said}"
        assert holder.wait(10) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        for pipe in (holder.stdin, holder.stdout):
            if pipe is not None:
                pipe.close()
        if worker_thread is not None and worker_thread.is_alive():
            worker.stop()
            worker_thread.join(10)
        queue.close()


def test_session_timeouts_only_on_engines_readyq_creates(db: str, dialect_name: str) -> None:
    probe = {
        "postgresql": "SHOW idle_in_transaction_session_timeout",
        "mariadb": "SELECT @@idle_transaction_timeout, @@innodb_lock_wait_timeout",
    }.get(dialect_name)
    if probe is None:
        pytest.skip("SQLite has no sessions to time out")

    def seen(queue: readyq.Queue) -> tuple[object, ...]:
        with queue.engine.connect() as conn:
            return tuple(conn.exec_driver_sql(probe).one())

    queues = {
        "default": readyq.Queue(db),
        "short": readyq.Queue(db, idle_transaction_timeout=2.5),
        "off": readyq.Queue(db, idle_transaction_timeout=None),
        "theirs": readyq.Queue(sa.create_engine(db), idle_transaction_timeout=2.5),
    }
    try:
        got = {name: seen(q) for name, q in queues.items()}
    finally:
        for q in queues.values():
            q.close()
        queues["theirs"].engine.dispose()
    # 20 s by default (below the default lease of 30 s); the lock wait is its own
    # setting, 5 s by default (see test_lock_waits_are_bounded_on_engines_readyq_creates).
    if dialect_name == "postgresql":
        assert got == {"default": ("20s",), "short": ("2500ms",), "off": ("0",),
                       "theirs": ("0",)}
    else:
        assert got["default"] == (20, 5) and got["short"] == (3, 5)
        assert got["off"] == (0, 5) and got["theirs"][0] == 0
    with pytest.raises(readyq.ConfigurationError, match="idle_transaction_timeout"):
        readyq.Queue(db, idle_transaction_timeout=0)


def test_lock_waits_are_bounded_on_engines_readyq_creates(db: str, dialect_name: str) -> None:
    """Every statement of readyq's engine waits at most ``lock_timeout`` for a lock (5 s
    by default, within a heartbeat interval), so nothing waits behind a frozen holder
    for longer; an engine passed in is left as it is."""
    probe = {
        "postgresql": "SHOW lock_timeout",
        "mariadb": "SELECT @@innodb_lock_wait_timeout",
    }.get(dialect_name)
    if probe is None:
        pytest.skip("SQLite waits for its write lock for its busy timeout, 5 s")

    def seen(queue: readyq.Queue) -> object:
        with queue.engine.connect() as conn:
            return conn.exec_driver_sql(probe).scalar_one()

    queues = {
        "default": readyq.Queue(db),
        "short": readyq.Queue(db, lock_timeout=1.5),
        "off": readyq.Queue(db, lock_timeout=None, idle_transaction_timeout=None),
        "theirs": readyq.Queue(sa.create_engine(db), lock_timeout=1.5),
    }
    try:
        got = {name: seen(q) for name, q in queues.items()}
    finally:
        for q in queues.values():
            q.close()
        queues["theirs"].engine.dispose()
    if dialect_name == "postgresql":
        assert got == {"default": "5s", "short": "1500ms", "off": "0", "theirs": "0"}
    else:
        with queues["theirs"].engine.connect() as conn:
            server = conn.exec_driver_sql("SELECT @@GLOBAL.innodb_lock_wait_timeout").scalar()
        assert got == {"default": 5, "short": 2, "off": server, "theirs": server}
    with pytest.raises(readyq.ConfigurationError, match="lock_timeout"):
        readyq.Queue(db, lock_timeout=-1)
