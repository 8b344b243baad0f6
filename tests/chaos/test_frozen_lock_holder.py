"""A process frozen while it holds the claim lock never makes a healthy worker's job run
twice.

A healthy worker runs a job longer than its lease. Meanwhile another process freezes
(SIGSTOP) inside a claim transaction, holding the gate row (the write lock on SQLite),
for twice the lease; the healthy worker has a second job to claim, so its loop waits
for that lock. Its heartbeats do not: they run apart from the loop. A second healthy
worker, with nothing to claim, keeps sweeping: it would reclaim any lease that expired.

* PostgreSQL and MariaDB: the heartbeats extend the lease all along (they lock only the
  worker's own rows); the server ends the frozen session after its idle timeout. The
  job runs once, its lease is never lost, and the second job runs after the frozen
  session ends.
* SQLite: every write waits for the one write lock, heartbeats too, so the lease cannot
  be extended while the frozen process holds it. The worker gives the lease up before
  it can expire and kills the job's child process: when the job runs again, its first
  run is over. Two runs, never at once.
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

import readyq
from isolated import handlers
from readyq import JobState

pytestmark = pytest.mark.slow

HOLDER = Path(__file__).resolve().parent / "gate_holder.py"
LEASE = 2.0
FROZEN = 2 * LEASE


def test_a_frozen_lock_holder_never_makes_a_healthy_job_run_twice_at_once(
    db: str, dialect_name: str, tmp_path: Path
) -> None:
    events = tmp_path / "events"
    queue = readyq.Queue(db)
    queue.create_schema()
    queue.handler("long", isolation="process")(handlers.noted_sleep)
    queue.handler("next")(lambda job: "ran")
    long_job = queue.enqueue("long", {"events": str(events), "seconds": 3 * LEASE})
    queue.handler("other")(lambda job: None)
    worker = queue.worker(concurrency=2, lease_ttl=LEASE, heartbeat_interval=LEASE / 4,
                          poll_interval=0.05, types=["long", "next"])
    # A second healthy worker with nothing of its own to claim: it never waits for the
    # lock, and its sweeps reclaim any lease that expires meanwhile.
    sweeper = queue.worker(concurrency=1, lease_ttl=LEASE, heartbeat_interval=LEASE / 4,
                           poll_interval=0.05, types=["other"])
    runners = [threading.Thread(target=w.run, kwargs={"handle_signals": False}, daemon=True)
               for w in (worker, sweeper)]
    holder: subprocess.Popen[str] | None = None
    try:
        for runner in runners:
            runner.start()
        deadline = time.monotonic() + 20
        while "start" not in (events.read_text() if events.exists() else ""):
            assert time.monotonic() < deadline, "the long job did not start"
            time.sleep(0.02)
        # Claimable once the lock is held and frozen: the loop then waits for the lock.
        # (Enqueued before: on SQLite an enqueue would wait for the frozen lock too.)
        next_job = queue.enqueue("next", run_after=1.0)
        holder = subprocess.Popen(
            [sys.executable, str(HOLDER), db, str(FROZEN)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "LOCKED"
        os.kill(holder.pid, signal.SIGSTOP)
        time.sleep(FROZEN + 0.5)
        os.kill(holder.pid, signal.SIGCONT)
        holder.stdin.write("go on\n")
        holder.stdin.flush()
        holder.stdout.readline()
        assert holder.wait(10) == 0

        deadline = time.monotonic() + 30
        while not all(queue.get(j).state is JobState.DONE for j in (long_job, next_job)):
            assert time.monotonic() < deadline, [queue.get(j) for j in (long_job, next_job)]
            time.sleep(0.05)
    finally:
        if holder is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(holder.pid, signal.SIGKILL)
            holder.wait()
            for pipe in (holder.stdin, holder.stdout):
                if pipe is not None:
                    pipe.close()
        for w in (worker, sweeper):
            w.stop()
        for runner in runners:
            runner.join(30)
        queue.close()

    seen = [line.split() for line in events.read_text().splitlines()]
    starts = [e for e in seen if e[0] == "start"]
    if dialect_name != "sqlite":
        assert len(starts) == 1, starts
        assert worker.stats.leases_lost == 0, worker.stats
        assert worker.stats.reclaimed == sweeper.stats.reclaimed == 0
        return
    # SQLite: the first run was over before the second began.
    first_alive = [float(e[2]) for e in seen if e[0] == "alive" and e[1] == "attempt1"]
    later = [float(e[2]) for e in starts if e[1] != "attempt1"]
    assert later, "the lease cannot be kept on SQLite while the write lock is held"
    assert max(first_alive) < min(later), (max(first_alive), min(later))
