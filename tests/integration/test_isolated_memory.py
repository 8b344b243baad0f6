"""Job memory in a child process (``isolation="process"``): steps, state, progress and
upstream results cross the pipe to the worker, the child raises the same errors as a
thread, and ``job.stopping`` reaches it; on every database."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

import readyq
from isolated import handlers
from readyq import JobSpec, JobState

FAST = {"poll_interval": 0.05, "lease_ttl": 10.0, "heartbeat_interval": 1.0}


def _checkpoint(queue: readyq.Queue, job_id: int) -> Any:
    c = queue.store.tables.checkpoints
    with queue.engine.connect() as conn:
        return conn.execute(sa.select(c).where(c.c.job_id == job_id)).first()


def test_an_isolated_handler_keeps_steps_and_state_across_attempts(
    queue: readyq.Queue, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    queue.handler("up")(lambda job: {"v": 7})
    queue.handler("mem", isolation="process", max_attempts=2, retry_backoff=0)(
        handlers.remembers)
    ids = queue.enqueue_many([
        JobSpec("up", key="first"),
        JobSpec("mem", {"log": str(log)}, key="mem", depends_on=["first"]),
    ])
    queue.run_worker(until_idle=True, **FAST)
    info = queue.get(ids[1])
    assert info.state is JobState.DONE, info.error
    assert info.attempts == 2
    # Attempt 2 started from attempt 1's state, and got the step's result without a run.
    assert info.result == {"start": 3, "state": 6, "setup": {"n": 3},
                           "upstream": {"first": {"v": 7}}}
    assert log.read_text() == "setup\n"
    row = _checkpoint(queue, ids[1])
    assert (row.state, row.state_attempt) == ("6", 2)
    # The last progress was flushed before the end was recorded.
    assert (row.progress_current, row.progress_message) == (9, "almost")


def test_an_isolated_handler_gets_the_errors_a_thread_gets(queue: readyq.Queue) -> None:
    queue.handler("misuse", isolation="process")(handlers.misuses_memory)
    job_id = queue.enqueue("misuse")
    queue.run_worker(until_idle=True, **FAST)
    info = queue.get(job_id)
    assert info.state is JobState.DONE, info.error
    assert info.result == {
        "connection": "InvalidState", "name": "InvalidStep", "state": "InvalidState",
        "progress": "InvalidProgress", "by": "InvalidArgument", "twice": "InvalidStep",
    }


def test_a_stopping_worker_tells_its_isolated_handler(
    queue: readyq.Queue, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    queue.handler("stop", isolation="process", max_attempts=3)(handlers.until_stopping)
    job_id = queue.enqueue("stop", {"pid_file": str(pid_file)})
    worker = queue.worker(kill_grace=1, **FAST)
    t = threading.Thread(target=worker.run, kwargs={"handle_signals": False})
    t.start()
    deadline = time.monotonic() + 30
    while not pid_file.exists():
        assert time.monotonic() < deadline, "the child never started"
        time.sleep(0.02)
    worker.stop(grace=10.0)
    t.join(30)
    assert not t.is_alive()
    assert _checkpoint(queue, job_id).state == '{"stopping":true}'


def test_an_isolated_handler_spawns_through_the_worker(queue: readyq.Queue) -> None:
    seen: list[str] = []
    queue.handler("split", isolation="process", max_attempts=2, retry_backoff=0)(
        handlers.spawner)
    queue.handler("part")(lambda job: seen.append(f"part{job.args['i']}"))
    queue.handler("merge")(lambda job: seen.append("merge"))
    queue.handler("after")(lambda job: seen.append("after"))
    split = queue.enqueue("split", {"n": 3})
    after = queue.enqueue("after", {}, depends_on=[split])
    queue.run_worker(until_idle=True, **FAST)
    info = queue.get(split)
    assert info.state is JobState.DONE, info.error
    assert info.result == {"refused": ["InvalidJobOption"]}
    j = queue.store.tables.jobs
    with queue.engine.connect() as conn:
        spawned = conn.execute(
            sa.select(j.c.type, j.c.timeout, j.c.state).where(j.c.spawned_by == split)
        ).all()
    # The failed first attempt's spawn never landed; the second attempt's did, once.
    assert sorted(r.type for r in spawned) == ["merge", "part", "part", "part"]
    assert {r.timeout for r in spawned if r.type == "part"} == {300.0}
    assert all(r.state == "done" for r in spawned)
    # Joined: "after" waited for the spawned jobs as well as for the spawner.
    assert seen[-1] == "after" and sorted(seen[:-1]) == ["merge", "part0", "part1", "part2"]
    assert queue.get(after).state is JobState.DONE


def test_a_state_near_the_payload_limit_crosses_the_pipe(queue: readyq.Queue) -> None:
    # 2 bytes per character in the database, 6 in the message (\\u00e9).
    n = (queue.max_payload_bytes - 10) // 2
    queue.handler("big", isolation="process", max_attempts=1)(handlers.big_state)
    job_id = queue.enqueue("big", {"n": n})
    queue.run_worker(until_idle=True, **FAST)
    info = queue.get(job_id)
    assert info.state is JobState.DONE, info.error
    assert info.result == n
