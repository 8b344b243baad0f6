"""A worker process started while its database cannot be reached comes up by itself.

PostgreSQL and MariaDB: the worker is pointed at a TCP proxy in front of the real server.
The proxy refuses connections at first (nothing listens on its port), as a server that
is not running would; the worker must log the outage, wait, and run every job once the
proxy forwards. Half-way through, the proxy goes down again for a second, resetting
every live connection (the listener's included) and refusing new ones: the worker must
ride that out too. Every job ends done, each handler started exactly once, and the
recorded history passes the checker. The real servers are never restarted.

SQLite: the database file is in a directory that appears only after the worker started
(a volume mounted late); the file is moved into place whole, schema and jobs included.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import history
import pytest
import sqlalchemy as sa
from chaos_procs import Proc, Procs, wait_for
from tcp_proxy import TcpProxy

import readyq
from readyq import JobSpec

pytestmark = pytest.mark.slow

JOBS = 16
WORKER = {"concurrency": 4, "lease_ttl": 4.0, "heartbeat": 0.5, "poll": 0.05}
WAITING = "cannot reach the database yet"
BACK = "database available again"


@pytest.fixture
def proxy(db: str) -> Iterator[TcpProxy]:
    url = sa.make_url(db)
    p = TcpProxy((url.host or "127.0.0.1", int(url.port or 0)))
    try:
        yield p
    finally:
        p.close()


def setup_jobs(url: str) -> list[int]:
    queue = readyq.Queue(url)
    try:
        queue.create_schema()
        history.install(queue)
        return queue.enqueue_many([JobSpec("chaos", {"ms": 250}) for _ in range(JOBS)])
    finally:
        queue.close()


def wait_for_log(worker: Proc, text: str, count: int, timeout: float = 15.0) -> None:
    """Wait until the worker's log says ``text`` ``count`` times; it must stay alive."""
    try:
        wait_for(lambda: worker.log().count(text) >= count or not worker.alive(),
                 timeout=timeout, what=f"{text!r} in the worker's log")
    except AssertionError as exc:
        raise AssertionError(f"{exc}:\n{worker.log()[-3000:]}") from None
    assert worker.alive(), f"the worker exited:\n{worker.log()[-3000:]}"


def starts(engine: sa.Engine) -> Counter[int]:
    return Counter(e.job for e in history.read_history(engine) if e.event == "start")


def finish(worker: Proc, url: str, ids: list[int]) -> str:
    """Wait for every job to end, stop the worker, and check the history."""
    queue = readyq.Queue(url)
    try:
        wait_for(lambda: queue.counts().get("done", 0) == JOBS, timeout=20,
                 what=f"all jobs done:\n{worker.log()[-3000:]}", interval=0.1)
        worker.signal(signal.SIGTERM)
        stats = worker.wait_ok(timeout=10)
        log = worker.log()
        assert stats["done"] == JOBS and stats["db_errors"] >= 1, stats
        events = history.read_history(queue.engine)
        per_job = Counter(e.job for e in events if e.event == "start")
        assert per_job == dict.fromkeys(ids, 1), "each job started exactly once"
        report = history.check(events, None, cap=WORKER["concurrency"])
        assert report.ok, report.summary()
        return log
    finally:
        queue.close()


@pytest.mark.parametrize("db", ["postgresql", "mariadb"], indirect=True)
def test_a_worker_started_while_the_server_is_unreachable_comes_up_and_rides_out_a_drop(
    db: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    ids = setup_jobs(db)
    through_proxy = sa.make_url(db).set(port=proxy.port).render_as_string(hide_password=False)
    procs = Procs(through_proxy, tmp_path)
    try:
        worker = procs.start("A", **WORKER)  # type: ignore[arg-type]
        # Refused, then refused again after a back-off: the worker waits, says so.
        wait_for_log(worker, WAITING, 2)
        probe = readyq.Queue(db)
        try:
            assert probe.counts() == {"ready": JOBS}
            proxy.up()
            wait_for(lambda: sum(starts(probe.engine).values()) >= 6, timeout=15,
                     what="jobs to start once the server is reachable")
            # A second outage in the middle of the run: live connections reset, new
            # ones refused, for one second (well under the lease).
            proxy.down()
            cut_at = time.monotonic()
            wait_for_log(worker, "database unavailable", 1, timeout=5)
            time.sleep(max(0.0, 1.0 - (time.monotonic() - cut_at)))
            proxy.up()
        finally:
            probe.close()
        log = finish(worker, db, ids)
        assert log.count(BACK) >= 2, log
    finally:
        procs.close()


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_a_worker_started_before_its_sqlite_directory_exists_comes_up(
    db: str, tmp_path: Path
) -> None:
    staging = tmp_path / "staging"
    staging.mkdir()
    ids = setup_jobs(f"sqlite:///{staging / 'jobs.db'}")
    live = tmp_path / "volume"
    url = f"sqlite:///{live / 'jobs.db'}"
    procs = Procs(url, tmp_path)
    try:
        worker = procs.start("A", **WORKER)  # type: ignore[arg-type]
        wait_for_log(worker, WAITING, 2)
        assert not live.exists()
        os.rename(staging, live)  # the whole directory appears at once
        log = finish(worker, url, ids)
        assert BACK in log, log
    finally:
        procs.close()
