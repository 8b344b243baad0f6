"""Job memory against real process deaths: a worker killed with SIGKILL mid-job leaves
the job's saved state and stored steps to the next attempt, and a worker frozen with
SIGSTOP past its lease can never overwrite the state its successor saves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from harness import Workers, job_row, wait_for, wait_taken_from

import readyq

pytestmark = pytest.mark.slow


def _checkpoint(queue: readyq.Queue, job_id: int) -> Any:
    c = queue.store.tables.checkpoints
    with queue.engine.connect() as conn:
        return conn.execute(sa.select(c).where(c.c.job_id == job_id)).first()


def _state(queue: readyq.Queue, job_id: int) -> Any:
    row = _checkpoint(queue, job_id)
    return None if row is None or row.state is None else readyq.payload.decode(row.state)


def _lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_a_job_killed_at_step_60_resumes_at_step_60(
    queue: readyq.Queue, workers: Workers, tmp_path: Path, isolation: str
) -> None:
    log = tmp_path / "log"
    job_id = queue.enqueue("count", {"log": str(log), "steps": 100, "hold_at": 60,
                                     "pause": 0.005})
    a = workers.start("A", concurrency=1, lease_ttl=2.0, heartbeat=0.5, poll=0.1,
                      until_idle=False, isolation=isolation)
    wait_for(lambda: _state(queue, job_id) == 60, timeout=30,
             what="worker A to save step 60")
    a.kill()
    orphan = job_row(queue, job_id)
    assert (orphan.state, orphan.lease_owner) == ("running", "A")

    b = workers.start("B", concurrency=1, lease_ttl=2.0, heartbeat=0.5, poll=0.1,
                      isolation=isolation)
    wait_taken_from(queue, job_id, "A", orphan.lease_expires, timeout=30)
    stats = b.wait_ok(timeout=60)
    assert stats["reclaimed"] == 1 and stats["done"] == 1

    info = queue.get(job_id)
    assert info.state is readyq.JobState.DONE, info.error
    assert info.attempts == 2
    assert info.result == {"start": 60, "attempt": 2}
    assert _lines(log) == ["setup 1", "start 1 0", "start 2 60"]
    row = _checkpoint(queue, job_id)
    assert (row.state, row.state_attempt) == ("100", 2)


def test_a_frozen_worker_never_overwrites_the_state_its_successor_saved(
    queue: readyq.Queue, workers: Workers, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    # Attempt 1 saves every 0.5 s for ever; attempt 2 saves 10 times, every 0.1 s.
    job_id = queue.enqueue("saver", {"log": str(log), "gap": 0.5, "last": 10})
    # Heartbeats seldom and a long poll: A's transactions are few and short, so that the
    # freeze below lands between two of them (a frozen transaction would hold its locks).
    a = workers.start("A", concurrency=1, lease_ttl=2.0, heartbeat=1.0, poll=5.0,
                      until_idle=False)
    wait_for(lambda: "saved 1 2" in _lines(log), timeout=30,
             what="worker A to save its state twice")
    # Right after a save: the handler sleeps 0.5 s now.
    seen = len(_lines(log))
    wait_for(lambda: len(_lines(log)) > seen, timeout=10, interval=0.002,
             what="another save of worker A")
    a.pause()
    paused = job_row(queue, job_id)
    saved_by_a = [line for line in _lines(log) if line.startswith("saved 1 ")]

    b = workers.start("B", concurrency=1, lease_ttl=2.0, heartbeat=0.5, poll=0.1)
    wait_taken_from(queue, job_id, "A", paused.lease_expires, timeout=30)
    wait_for(lambda: "saved 2 1" in _lines(log), timeout=30,
             what="worker B to save its state")
    # A wakes up while B holds the lease: only owner and token tell A's writes from B's.
    a.resume()
    wait_for(lambda: any(line.startswith("lease_lost 1 ") for line in _lines(log)),
             timeout=30, what="worker A's handler to get LeaseLost")
    stats_b = b.wait_ok(timeout=60)
    assert stats_b["done"] == 1 and stats_b["leases_lost"] == 0
    a.terminate()
    a.wait(30)

    lines = _lines(log)
    print(lines)
    # Nothing A saved after the freeze was stored; B saved all of its 10.
    assert [line for line in lines if line.startswith("saved 1 ")] == saved_by_a
    assert [line for line in lines if line.startswith("saved 2 ")] == [
        f"saved 2 {i}" for i in range(1, 11)]
    assert not any(line.startswith("lease_lost 2") for line in lines)
    row = _checkpoint(queue, job_id)
    assert row.state_attempt == 2
    assert readyq.payload.decode(row.state) == {"attempt": 2, "i": 10}
    info = queue.get(job_id)
    assert (info.state, info.attempts, info.lease_owner) == (readyq.JobState.DONE, 2, "B")
    assert info.result == {"attempt": 2, "i": 10}
