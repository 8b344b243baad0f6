"""A worker process for the chaos, poison and shutdown tests.

    python tests/chaos/chaos_worker.py --url URL --worker-id ID --concurrency N
        --lease-ttl S --heartbeat S --poll S [--max-running N] [--clock-skew S]
        [--shutdown-grace S] [--slow-claim P --marker-dir DIR] [--stats-file PATH]

It runs ``queue.run_worker`` until SIGTERM/SIGINT (handled by the worker itself, with
``--shutdown-grace``) and records its handlers' events with :class:`history.Recorder`.
Handlers:

``chaos``
    runs ``ms`` milliseconds (``first_ms`` on attempt 1, ``retry_ms`` on later ones,
    ``first_lease_ms`` under the job's first lease), stopping early once its lease is
    lost; raises on attempt 1 when ``fail_first`` is set, and on every attempt, with
    text no database stores as it is (NUL, a lone surrogate), when ``bad_text`` is.
    With ``step`` set it first runs ``job.step("side", ...)``, whose function records a
    ``step`` event (its side effect) and returns the lease token that ran it.
``slow``
    registered with ``timeout=1``: attempt 1 runs ``first_ms`` (past the timeout, so the
    attempt is ended by a sweep and its late result fenced out), later ones ``ms``.
``poison``
    SIGKILLs its own process on every attempt.

``--clock-skew`` shifts this process's ``time.time()`` by that many seconds before
readyq is imported: lease decisions use the database's clock and must not notice.
``--slow-claim P`` makes a claim transaction, with probability P or when a ``want-ID``
file appears in ``--marker-dir``, lock the gate row, drop an ``inclaim-ID`` marker file
and linger, so that the test can SIGKILL the process while it holds the claim lock
(SQLite: the database's write lock).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

# A SIGTERM that arrives while this process is still starting up is kept for later: the
# worker then stops as soon as it runs (its own handlers take over inside run()).
_early_stop: list[int] = []
signal.signal(signal.SIGTERM, lambda signum, frame: _early_stop.append(signum))
_real_time = time.time


def _skew(argv: list[str]) -> float:
    if "--clock-skew" in argv:
        return float(argv[argv.index("--clock-skew") + 1])
    return 0.0


SKEW = _skew(sys.argv)
if SKEW:
    time.time = lambda: _real_time() + SKEW

import contextlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import threading  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import sqlalchemy as sa  # noqa: E402
from history import Recorder  # noqa: E402

import readyq  # noqa: E402


class Active:
    """Handlers still running, so that abandoned attempts can record their last events."""

    def __init__(self) -> None:
        self.n = 0
        self.cond = threading.Condition()

    def __enter__(self) -> None:
        with self.cond:
            self.n += 1

    def __exit__(self, *exc: object) -> None:
        with self.cond:
            self.n -= 1
            self.cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: self.n == 0, timeout)


class FencedRecorder(logging.Handler):
    """Turns the worker's "outcome ... fenced out" warnings into ``fenced`` events."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__(logging.WARNING)
        self.recorder = recorder

    def emit(self, record: logging.LogRecord) -> None:
        if "fenced out" not in str(record.msg) or not isinstance(record.args, tuple):
            return
        job_id, attempt, kind = record.args[0], record.args[1], record.args[2]
        self.recorder.note("fenced", job_id=int(job_id), attempt=int(attempt), token=None,
                           kind=str(kind))


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--worker-id", required=True)
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--max-running", type=int)
    p.add_argument("--lease-ttl", type=float, default=2.0)
    p.add_argument("--heartbeat", type=float, default=0.5)
    p.add_argument("--poll", type=float, default=0.1)
    p.add_argument("--clock-skew", type=float, default=0.0)
    p.add_argument("--shutdown-grace", type=float, default=0.0)
    p.add_argument("--slow-claim", type=float, default=0.0)
    p.add_argument("--slow-claim-hold", type=float, default=0.5)
    p.add_argument("--marker-dir")
    p.add_argument("--stats-file")
    p.add_argument("--resource", action="append", default=[], metavar="NAME=CAPACITY",
                   help="a resource this worker defines (its jobs carry their own uses)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    wid = args.worker_id
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr,
        format=f"%(asctime)s {wid} %(threadName)s %(name)s %(levelname)s %(message)s",
    )
    queue = readyq.Queue(args.url)
    for item in args.resource:
        name, _, capacity = item.partition("=")
        queue.resource(name, capacity=int(capacity))
    recorder = Recorder(args.url, wid, queue.store.now)
    active = Active()

    def sleep_ms(job: readyq.Job, ms: float) -> None:
        deadline = time.monotonic() + ms / 1000.0
        while not job.lease_lost:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(left, 0.02))

    def finish(job: readyq.Job) -> dict[str, Any]:
        if job.lease_lost:
            recorder.job("lease_lost", job)
        opts = job.args or {}
        if opts.get("bad_text"):
            # Text PostgreSQL refuses (NUL) and no driver encodes (a lone surrogate).
            recorder.job("end", job, "raise")
            raise ValueError("poison: NUL \x00 and half a pair \ud800")
        fails = job.attempt == 1 and opts.get("fail_first")
        recorder.job("end", job, "raise" if fails else "return")
        if fails:
            raise RuntimeError("attempt 1 fails on purpose")
        return {"w": wid, "a": job.attempt}

    def side_effect(job: readyq.Job) -> None:
        def run() -> dict[str, int]:
            recorder.job("step", job, "side")
            return {"token": job.lease_token}

        # Whatever the step meets (a lost lease, a database gone), the handler goes on to
        # record its end: the checker pairs every finalization with one.
        with contextlib.suppress(Exception):
            job.step("side", run)

    @queue.handler("chaos", retry_backoff=0.05, retry_backoff_max=0.5)
    def chaos(job: readyq.Job) -> dict[str, Any]:
        with active:
            recorder.job("start", job)
            opts = job.args or {}
            if opts.get("step"):
                side_effect(job)
            ms = opts.get("first_ms", opts.get("ms", 0)) if job.attempt == 1 else opts.get("ms", 0)
            if job.attempt > 1 and "retry_ms" in opts:
                ms = opts["retry_ms"]
            if job.lease_token == 1 and "first_lease_ms" in opts:
                ms = opts["first_lease_ms"]  # a release does not move the attempt on
            sleep_ms(job, float(ms))
            return finish(job)

    @queue.handler("slow", timeout=1.0, retry_backoff=0.05)
    def slow(job: readyq.Job) -> dict[str, Any]:
        with active:
            recorder.job("start", job)
            opts = job.args or {}
            ms = opts.get("first_ms", 2500) if job.attempt == 1 else opts.get("ms", 10)
            # Not stopped by lease_lost on purpose: an abandoned attempt that runs on.
            time.sleep(float(ms) / 1000.0)
            return finish(job)

    @queue.handler("poison", retry_backoff=0.05)
    def poison(job: readyq.Job) -> None:
        recorder.job("start", job)
        os.kill(os.getpid(), signal.SIGKILL)

    store = queue.store
    if args.slow_claim > 0:
        marker = Path(args.marker_dir or ".") / f"inclaim-{wid}"
        wanted = Path(args.marker_dir or ".") / f"want-{wid}"
        gate = store.tables.gate
        rnd = random.Random()

        def hook(conn: sa.Connection) -> None:
            if wanted.exists():
                wanted.unlink(missing_ok=True)
            elif rnd.random() >= args.slow_claim:
                return
            conn.execute(sa.select(gate.c.seq).with_for_update())
            marker.write_text(str(os.getpid()))
            try:
                time.sleep(args.slow_claim_hold)
            finally:
                marker.unlink(missing_ok=True)

        store.on_claim_transaction = hook

    logging.getLogger("readyq.worker").addHandler(FencedRecorder(recorder))
    worker = queue.worker(
        concurrency=args.concurrency, lease_ttl=args.lease_ttl,
        heartbeat_interval=args.heartbeat, poll_interval=args.poll, worker_id=wid,
        max_running=args.max_running, shutdown_grace=args.shutdown_grace,
    )
    print(f"READY {os.getpid()}", flush=True)
    try:
        if _early_stop:
            worker.stop()
        # SIGINT: the worker stopped and raised it again; this script exits 0.
        with contextlib.suppress(KeyboardInterrupt):
            worker.run()
    finally:
        active.wait_idle(10.0)
        if args.stats_file:
            data = {**worker.stats.__dict__, "worker_id": wid, "pid": os.getpid(),
                    "skew": args.clock_skew, "skewed_now": time.time() - _real_time()}
            Path(args.stats_file).write_text(json.dumps(data))
        queue.close()
        recorder.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
