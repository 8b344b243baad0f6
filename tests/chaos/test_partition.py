"""A worker cut off from its database stops believing it holds its leases.

The far worker runs in a network namespace of its own and reaches the database through
a veth pair; the test cuts the pair by making both ends drop every packet (nothing is
refused or reset: the far worker's writes are simply never answered). The near worker,
on the host, reclaims the far worker's jobs once their leases expire in the database
and runs them.

What must hold, on this machine's monotonic clock (one clock for every process here):

* the far worker's isolated child is dead before the near worker starts its job;
* its thread handler sees ``job.lease_lost`` before the near worker starts its job;
* ``job.heartbeat()`` never blocks longer than its stated bound (5 s) during the cut,
  never raises a driver's error, and raises LeaseLost at once once the lease is given
  up;
* each job ends done once, with the near worker's result.

Lease 4 s, heartbeats every 1 s, a cut of 10 s. SQLite has no network to cut.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from netns import Netns
from tcp_proxy import TcpProxy

import readyq
from isolated.handlers import note
from readyq import JobState

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("partitioned_worker.py")
CUT_SECONDS = 10.0
ANSWER_BOUND = 5.0 + 0.5  # readyq.heartbeats.ANSWER_WITHIN, and scheduling slack


def read_events(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines() if line.strip()]


def first(events: list[list[str]], kind: str, who: str) -> float | None:
    times = [float(e[2]) for e in events if e[0] == kind and e[1] == who]
    return min(times) if times else None


@pytest.mark.parametrize("db", ["postgresql", "mariadb"], indirect=True)
def test_a_cut_off_worker_stops_its_jobs_before_another_worker_starts_them(
    db: str, tmp_path: Path
) -> None:
    ns = Netns()
    reason = ns.create()
    if reason is not None:
        pytest.skip(f"this machine cannot make a network namespace to cut: {reason}")
    url = sa.make_url(db)
    proxy = TcpProxy((url.host or "127.0.0.1", url.port or 0), host=ns.outer)
    events = tmp_path / "events"
    queue = readyq.Queue(db)
    far: subprocess.Popen[str] | None = None
    far_log = ""
    near_thread: threading.Thread | None = None
    near: readyq.Worker | None = None
    try:
        proxy.up()
        queue.create_schema()
        far_url = url.set(host=ns.outer, port=proxy.port).render_as_string(hide_password=False)
        args = {"events": str(events)}
        thread_job = queue.enqueue("threaded", args, max_attempts=3)
        child_job = queue.enqueue("isolated", args, max_attempts=3)
        far = subprocess.Popen(
            [*ns.inside(sys.executable, str(WORKER), far_url, str(events), "far")],
            stderr=subprocess.PIPE, text=True,
        )
        deadline = time.monotonic() + 30
        while not (first(read_events(events), "start", "thread")
                   and first(read_events(events), "start", "child")):
            assert far.poll() is None, far.stderr.read() if far.stderr else ""
            assert time.monotonic() < deadline, "the far worker did not start both jobs"
            time.sleep(0.05)

        def near_handler(who: str) -> object:
            def handler(job: readyq.Job) -> str:
                note(str(events), "start", who, time.monotonic())
                return "near"
            return handler

        queue.handler("threaded")(near_handler("near-thread"))
        queue.handler("isolated")(near_handler("near-child"))
        near = queue.worker(concurrency=2, lease_ttl=4.0, heartbeat_interval=1.0,
                            poll_interval=0.1, worker_id="near")
        near_thread = threading.Thread(target=near.run, kwargs={"handle_signals": False},
                                       daemon=True)
        near_thread.start()

        ns.cut()
        cut_at = time.monotonic()
        while time.monotonic() - cut_at < CUT_SECONDS:
            time.sleep(0.1)
        ns.heal()
        healed_at = time.monotonic()

        deadline = time.monotonic() + 30
        while not all(queue.get(j).state is JobState.DONE for j in (thread_job, child_job)):
            assert time.monotonic() < deadline, [queue.get(j) for j in (thread_job, child_job)]
            time.sleep(0.1)
    finally:
        if far is not None:
            with contextlib.suppress(ProcessLookupError):
                far.send_signal(signal.SIGTERM)
            try:
                far.wait(30)
            except subprocess.TimeoutExpired:
                far.kill()
                far.wait()
            if far.stderr is not None:
                far_log = far.stderr.read()
                far.stderr.close()
        if near is not None and near_thread is not None:
            near.stop()
            near_thread.join(30)
        proxy.close()
        queue.close()
        ns.close()

    seen = read_events(events)
    near_child = first(seen, "start", "near-child")
    near_thread_start = first(seen, "start", "near-thread")
    assert near_child is not None and near_thread_start is not None, seen
    assert near_child > cut_at and near_thread_start > cut_at
    # The child was dead before the job started again elsewhere.
    alive = [float(e[2]) for e in seen if e[0] == "alive" and e[1] == "child"]
    assert alive and max(alive) < near_child, (max(alive) - near_child, far_log)
    # The thread handler was told before the job started again elsewhere.
    lost = first(seen, "lost", "thread")
    assert lost is not None and lost < near_thread_start, (lost, near_thread_start)
    # Heartbeats answered within their bound, and once the lease was given up at once.
    beats = [(e[1], float(e[2]), float(e[3]), e[4]) for e in seen if e[0] == "heartbeat"]
    during = [b for b in beats if cut_at <= b[1] <= healed_at]
    assert during, beats
    for who, began, ended, answer in beats:
        assert not answer.startswith("error"), (who, answer)
        assert ended - began <= ANSWER_BOUND, (who, ended - began, answer)
    assert any(b[3] == "lost" for b in during), during
    [(_, began, ended, answer)] = [b for b in beats if b[0] == "after-lost"]
    assert answer == "lost" and ended - began < 0.1, (answer, ended - began)
    # Each job ended once, with the near worker's result.
    assert queue_results(db, (thread_job, child_job)) == ["near", "near"]


def queue_results(db: str, ids: tuple[int, ...]) -> list[object]:
    q = readyq.Queue(db)
    try:
        return [q.get(i).result for i in ids]
    finally:
        q.close()
