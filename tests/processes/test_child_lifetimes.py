"""No child outlives its worker, and a child never runs the worker's script again.

* A worker script with no ``if __name__ == "__main__":`` guard runs once: its children
  come from the spawner, which never imports the worker's ``__main__``.
* A child stuck in C code with the GIL held (no thread of its own can run) dies with
  its worker when the worker is killed with SIGKILL.
* A grandchild that leaves the child's process group (a session of its own) is killed
  with the child at a timeout, when the worker stops, and when the worker is killed.
* The documented decorator form, ``@queue.handler(..., isolation="process")`` above a
  module-level function, imports and runs.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import readyq
from isolated import handlers
from readyq import JobState

pytestmark = pytest.mark.slow

TESTS = str(Path(__file__).resolve().parents[1])
FAST = {"poll_interval": 0.05, "lease_ttl": 10.0, "heartbeat_interval": 1.0}


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pid: int, timeout: float) -> float:
    began = time.monotonic()
    while alive(pid):
        if time.monotonic() - began > timeout:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            raise AssertionError(f"process {pid} still alive after {timeout}s")
        time.sleep(0.02)
    return time.monotonic() - began


def read_pid(path: Path, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"no pid in {path}"
        time.sleep(0.02)
    return int(path.read_text())


def worker_script(tmp_path: Path, db: str, body: str) -> Path:
    """A worker script as a user writes it: top-level code, no main guard."""
    script = tmp_path / "worker_script.py"
    script.write_text(textwrap.dedent(f"""\
        import sys
        sys.path.insert(0, {TESTS!r})
        import readyq
        from isolated import handlers
        queue = readyq.Queue({db!r})
    """) + textwrap.dedent(body))
    return script


def test_an_unguarded_worker_script_runs_once(queue: readyq.Queue, db: str,
                                               tmp_path: Path) -> None:
    script = worker_script(tmp_path, db, """\
        queue.handler("quick", isolation="process")(handlers.quick)
        queue.enqueue("quick")
        stats = queue.run_worker(until_idle=True, poll_interval=0.05)
        print("RAN", stats.done, flush=True)
    """)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["RAN 1"], done.stdout
    page = queue.jobs(limit=10)
    assert [j.state for j in page.jobs] == [JobState.DONE]


def test_a_child_stuck_in_c_dies_with_its_killed_worker(
    queue: readyq.Queue, db: str, tmp_path: Path
) -> None:
    pid_file = tmp_path / "child.pid"
    queue.enqueue("stuck", {"pid_file": str(pid_file)})
    script = worker_script(tmp_path, db, """\
        queue.handler("stuck", isolation="process")(handlers.stuck_in_c)
        queue.run_worker(poll_interval=0.05)
    """)
    worker = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path,
                              stderr=subprocess.DEVNULL)
    try:
        child = read_pid(pid_file)
        time.sleep(0.3)
        assert alive(child)
        worker.kill()
        worker.wait(10)
        wait_gone(child, 10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            worker.kill()
        worker.wait()


def test_a_grandchild_in_its_own_session_dies_at_the_timeout(
    queue: readyq.Queue, tmp_path: Path
) -> None:
    pid_file = tmp_path / "grandchild.pid"
    # The timeout counts from the claim: room for the spawner's first start on a busy host.
    queue.handler("spawning", isolation="process", timeout=5.0,
                  max_attempts=1)(handlers.with_grandchild)
    job_id = queue.enqueue("spawning", {"pid_file": str(pid_file)})
    holder: dict[str, int] = {}

    def watch() -> None:
        holder["pid"] = read_pid(pid_file)

    watcher = threading.Thread(target=watch)
    watcher.start()
    queue.run_worker(until_idle=True, kill_grace=0.5, **FAST)
    watcher.join(30)
    assert queue.get(job_id).state is JobState.FAILED
    wait_gone(holder["pid"], 10)


def test_a_grandchild_in_its_own_session_dies_when_the_worker_stops(
    queue: readyq.Queue, tmp_path: Path
) -> None:
    pid_file = tmp_path / "grandchild.pid"
    queue.handler("spawning", isolation="process")(handlers.with_grandchild)
    queue.enqueue("spawning", {"pid_file": str(pid_file)})
    worker = queue.worker(kill_grace=0.5, **FAST)
    runner = threading.Thread(target=worker.run, kwargs={"handle_signals": False})
    runner.start()
    try:
        grandchild = read_pid(pid_file)
        assert alive(grandchild)
    finally:
        worker.stop()
        runner.join(30)
    wait_gone(grandchild, 10)


def test_a_grandchild_in_its_own_session_dies_with_its_killed_worker(
    queue: readyq.Queue, db: str, tmp_path: Path
) -> None:
    pid_file = tmp_path / "grandchild.pid"
    queue.enqueue("spawning", {"pid_file": str(pid_file)})
    script = worker_script(tmp_path, db, """\
        queue.handler("spawning", isolation="process")(handlers.with_grandchild)
        queue.run_worker(poll_interval=0.05)
    """)
    worker = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path,
                              stderr=subprocess.DEVNULL)
    try:
        grandchild = read_pid(pid_file)
        worker.kill()
        worker.wait(10)
        wait_gone(grandchild, 10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            worker.kill()
        worker.wait()


def test_the_documented_decorator_form_imports_and_runs(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("READYQ_DECORATED_URL", db)
    sys.modules.pop("isolated.decorated", None)
    decorated = importlib.import_module("isolated.decorated")
    queue = decorated.queue
    try:
        queue.create_schema()
        job_id = queue.enqueue("decorated")
        queue.run_worker(until_idle=True, **FAST)
        info = queue.get(job_id)
        assert info.state is JobState.DONE and info.result["pid"] != os.getpid()
    finally:
        queue.close()
        sys.modules.pop("isolated.decorated", None)
    assert handlers.quick  # the ordinary handlers' module is untouched
