"""Handlers in child processes (``isolation="process"``): a hard stop at the timeout, crashes
that fail only their attempt, memory limits, terminating cancels, children that die with
their worker, and no zombies or leaked descriptors. Every test runs on each database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import readyq
from isolated import handlers
from readyq import JobState

FAST = {"poll_interval": 0.05, "lease_ttl": 10.0, "heartbeat_interval": 1.0}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone, or going between open and read
        return False


def _wait_for(what: str, test: Any, timeout: float = 30.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = test()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_children_are_never_forked_from_the_worker(queue: readyq.Queue) -> None:
    """A child's parent is the spawner, a fresh interpreter started by the worker (never
    a fork of the worker, whose threads and connections a copy would share)."""
    queue.handler("parent", isolation="process")(handlers.parent_pid)
    job_id = queue.enqueue("parent")
    queue.run_worker(until_idle=True, **FAST)
    result = queue.get(job_id).result
    assert result["parent"] != os.getpid()
    assert "readyq.spawner" in result["parent_cmdline"]


def test_a_spinning_handler_deaf_to_sigterm_is_killed_and_its_slot_reused(
    queue: readyq.Queue,
) -> None:
    queue.handler("spin", isolation="process", timeout=1, max_attempts=1)(handlers.spin)
    queue.handler("quick", isolation="process")(handlers.quick)
    spin = queue.enqueue("spin")
    after = queue.enqueue("quick")
    began = time.monotonic()
    queue.run_worker(until_idle=True, concurrency=1, kill_grace=1, **FAST)
    info = queue.get(spin)
    # Ended by the worker's kill or by a sweep of its deadline, whichever came first.
    assert info.state is JobState.FAILED and "timed out after 1s" in (info.error or "")
    assert queue.get(after).state is JobState.DONE  # in the same, single slot
    # timeout + kill_grace + one tick, and room for starting the children on a busy host.
    assert time.monotonic() - began < 1 + 1 + FAST["poll_interval"] + 8


@pytest.mark.parametrize("crash", ["abort", "segfault"])
def test_a_crashing_handler_fails_its_attempt_and_the_worker_carries_on(
    queue: readyq.Queue, crash: str
) -> None:
    queue.handler("crash", isolation="process", max_attempts=2, retry_backoff=0)(
        getattr(handlers, crash))
    queue.handler("quick", isolation="process")(handlers.quick)
    crashing = queue.enqueue("crash")
    others = [queue.enqueue("quick") for _ in range(3)]
    stats = queue.run_worker(until_idle=True, concurrency=2, **FAST)
    info = queue.get(crashing)
    name = "SIGABRT" if crash == "abort" else "SIGSEGV"
    assert info.state is JobState.FAILED and info.attempts == 2  # retried, then failed
    assert f"was killed by {name}" in (info.error or "")
    assert stats.retried == 1 and stats.failed == 1
    assert all(queue.get(i).state is JobState.DONE for i in others)


def test_a_child_over_its_memory_limit_is_killed_with_a_clear_error(
    queue: readyq.Queue,
) -> None:
    queue.handler("hog", isolation="process", max_attempts=1)(handlers.hog)
    job_id = queue.enqueue("hog", {"mib": 300})
    queue.run_worker(until_idle=True, max_memory_per_child=150 * 2**20, kill_grace=1, **FAST)
    info = queue.get(job_id)
    assert info.state is JobState.FAILED
    assert "over max_memory_per_child (150 MiB): killed" in (info.error or "")


def test_a_terminating_cancel_kills_the_child_and_ends_the_job_cancelled(
    queue: readyq.Queue, tmp_path: Path
) -> None:
    queue.handler("sleeper", isolation="process", on_cancel="terminate")(handlers.sleeper)
    pid_file = tmp_path / "pid"
    job_id = queue.enqueue("sleeper", {"pid_file": str(pid_file), "seconds": 60})
    worker = queue.worker(heartbeat_interval=0.2, lease_ttl=5, poll_interval=0.05,
                          kill_grace=1)
    import threading

    thread = threading.Thread(target=worker.run, kwargs={"until_idle": True,
                                                          "handle_signals": False})
    thread.start()
    try:
        pid = int(_wait_for("the child to start", lambda: pid_file.exists()
                            and pid_file.read_text().split()[0]))
        queue.cancel(job_id)
        _wait_for("the job to end", lambda: queue.get(job_id).is_terminal, timeout=15)
    finally:
        worker.stop()
        thread.join(30)
    assert queue.get(job_id).state is JobState.CANCELLED
    assert not _alive(pid)


def test_heartbeats_keep_a_long_isolated_job_alive_and_a_late_result_is_not_taken(
    queue: readyq.Queue, tmp_path: Path
) -> None:
    queue.handler("sleeper", isolation="process")(handlers.sleeper)
    queue.handler("late", isolation="process", timeout=1, max_attempts=1)(handlers.late)
    long_job = queue.enqueue("sleeper", {"pid_file": str(tmp_path / "p"), "seconds": 2.5,
                                         "beat": True})
    late = queue.enqueue("late", {"seconds": 1.5})
    stats = queue.run_worker(until_idle=True, concurrency=2, lease_ttl=1.0,
                             heartbeat_interval=0.3, poll_interval=0.05, kill_grace=3)
    info = queue.get(long_job)
    # Never reclaimed for an expired lease (the late job was, for its timeout).
    assert info.state is JobState.DONE and info.attempts == 1
    assert stats.reclaimed == stats.timed_out
    late_info = queue.get(late)
    assert late_info.state is JobState.FAILED and late_info.result is None
    assert "timed out" in (late_info.error or "")


def test_pydantic_args_and_results_cross_the_process_boundary(queue: readyq.Queue) -> None:
    queue.handler("area", isolation="process", args_model=handlers.Size,
                  result_model=handlers.Area)(handlers.area)
    job_id = queue.enqueue("area", {"width": "3", "height": 4})
    queue.run_worker(until_idle=True, **FAST)
    result = queue.get(job_id).result
    assert result["area"] == 12 and result["pid"] != os.getpid()


def _zombies() -> list[int]:
    """Zombie processes whose parent is this process or one of its children."""
    mine = {os.getpid()}
    found: list[int] = []
    stats = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats.append((int(entry), fields[0], int(fields[1])))
    for pid, _, ppid in stats:
        if ppid == os.getpid():
            mine.add(pid)
    for pid, state, ppid in stats:
        if state == "Z" and ppid in mine:
            found.append(pid)
    return found


def test_a_thousand_isolated_jobs_leave_no_zombie_and_no_descriptor(
    queue: readyq.Queue,
) -> None:
    queue.handler("quick", isolation="process")(handlers.quick)
    queue.run_worker(until_idle=True, **FAST)  # a first run opens the pools
    # Pooled database connections are closed before counting: how many the pool keeps
    # depends on how many threads (the loop, the heartbeats) used it at once.
    queue.engine.dispose()
    fds = len(os.listdir("/proc/self/fd"))
    queue.enqueue_many([readyq.JobSpec("quick") for _ in range(1000)])
    stats = queue.run_worker(until_idle=True, concurrency=4, max_jobs_per_child=300, **FAST)
    assert stats.done == 1000
    assert _zombies() == []
    queue.engine.dispose()
    assert len(os.listdir("/proc/self/fd")) <= fds


def test_no_child_outlives_a_worker_killed_with_sigkill(db: str, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    script = textwrap.dedent(f"""
        import readyq
        from isolated import handlers
        queue = readyq.Queue({db!r})
        queue.handler("sleeper", isolation="process")(handlers.sleeper)
        queue.run_worker(lease_ttl=2, heartbeat_interval=0.5, poll_interval=0.1)
    """)
    with readyq.Queue(db) as queue:
        queue.create_schema()
        job_id = queue.enqueue("sleeper", {"pid_file": str(pid_file), "seconds": 1})
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).parents[1]), *sys.path])}
        worker = subprocess.Popen([sys.executable, "-c", script], env=env)
        try:
            child = int(_wait_for("the child to start", lambda: pid_file.exists()
                                  and pid_file.read_text().split()[0]))
            pid_file.unlink()
            worker.send_signal(signal.SIGKILL)
            worker.wait(10)
            _wait_for("the child to die with its worker", lambda: not _alive(child),
                      timeout=10)
        finally:
            if worker.poll() is None:
                worker.kill()
        # The job is reclaimed once its lease expires, and runs once more.
        queue.handler("sleeper", isolation="process")(handlers.sleeper)
        queue.run_worker(until_idle=True, lease_ttl=2, heartbeat_interval=0.5,
                         poll_interval=0.1)
        info = queue.get(job_id)
        assert info.state is JobState.DONE and info.attempts == 2
        assert pid_file.read_text().split()[1] == "2"


def test_a_stopping_worker_hands_isolated_jobs_back_and_ends_their_children(
    queue: readyq.Queue, tmp_path: Path
) -> None:
    import threading

    queue.handler("sleeper", isolation="process")(handlers.sleeper)
    pid_file = tmp_path / "pid"
    job_id = queue.enqueue("sleeper", {"pid_file": str(pid_file), "seconds": 60})
    worker = queue.worker(kill_grace=1, **FAST)
    thread = threading.Thread(target=worker.run, kwargs={"handle_signals": False})
    thread.start()
    try:
        pid = int(_wait_for("the child to start", lambda: pid_file.exists()
                            and pid_file.read_text().split()[0]))
        worker.stop(grace=0.5)
        thread.join(30)
    finally:
        worker.stop()
        thread.join(30)
    info = queue.get(job_id)
    assert info.state is JobState.READY and info.attempts == 0  # handed back, uncharged
    assert not _alive(pid) and _zombies() == []


def test_an_async_worker_runs_isolated_handlers_in_children(db: str) -> None:
    from async_support import Runner, async_engine

    runner = Runner()
    engine = async_engine(db)
    aq = readyq.AsyncQueue(engine)
    try:
        runner.run(aq.create_schema())
        aq.handler("quick", isolation="process")(handlers.quick)
        job_id = runner.run(aq.enqueue("quick"))
        runner.run(aq.run_worker(until_idle=True, **FAST))
        result = runner.run(aq.get(job_id)).result
        assert result["pid"] != os.getpid()
    finally:
        runner.run(aq.close())
        runner.run(engine.dispose())
        runner.close()
