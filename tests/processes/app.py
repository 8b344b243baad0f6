"""A worker process for the multi-process tests.

    python tests/processes/app.py --url URL --concurrency N --lease-ttl S --heartbeat S
        --poll S [--until-idle] [--mode sleep|check-lease] [--stats-file PATH]
        [--worker-id ID]

It registers one handler, ``work``, runs ``queue.run_worker`` and writes the worker's
stats as JSON to ``--stats-file`` on exit. The handler records its events in the
``history`` table (see ``harness.py``): ``start`` first, ``end`` last, ``lease_lost`` if
it learned that its lease was gone. Outcomes the worker reports fenced out are recorded
as ``fenced``. SIGTERM stops the worker gracefully.

The job's args drive the handler: ``sleep`` seconds to run (0 by default) and, for the
first attempt only, ``first_sleep``. Sleeping stops early once ``job.lease_lost``.
Attempts up to ``fail_attempts`` (0 by default) then raise instead of returning.
``--mode check-lease`` also asks the database (``job.heartbeat()``) before returning.

The handlers of ``memory_handlers.py`` are registered too, under their names, with
``--isolation`` (``thread`` by default, or ``process``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

import harness
import memory_handlers

import readyq


class Active:
    """Counts handlers still running, so that an abandoned attempt can finish recording."""

    def __init__(self) -> None:
        self._n = 0
        self._cond = threading.Condition()

    def __enter__(self) -> None:
        with self._cond:
            self._n += 1

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._n -= 1
            self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._n == 0, timeout)


class FencedRecorder(logging.Handler):
    """Records the worker's "outcome ... fenced out" warnings as ``fenced`` events."""

    def __init__(self, engine: Any, worker: str) -> None:
        super().__init__(logging.WARNING)
        self.engine = engine
        self.worker = worker

    def emit(self, record: logging.LogRecord) -> None:
        if "fenced out" not in str(record.msg) or not isinstance(record.args, tuple):
            return
        job_id, attempt = record.args[0], record.args[1]
        assert isinstance(job_id, int) and isinstance(attempt, int), record.args
        harness.record(
            self.engine, job_id=job_id, attempt=attempt, worker=self.worker, grp=None,
            event="fenced",
        )


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--lease-ttl", type=float, required=True)
    p.add_argument("--heartbeat", type=float, required=True)
    p.add_argument("--poll", type=float, required=True)
    p.add_argument("--until-idle", action="store_true")
    p.add_argument("--mode", choices=("sleep", "check-lease"), default="sleep")
    p.add_argument("--stats-file")
    p.add_argument("--worker-id")
    p.add_argument("--max-running", type=int)
    p.add_argument("--isolation", choices=("thread", "process"), default="thread")
    p.add_argument("--resource", action="append", default=[], metavar="NAME=CAPACITY",
                   help="a resource this worker defines (the jobs carry their own uses)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    worker_id = args.worker_id or f"app-{os.getpid()}"
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format=f"%(asctime)s {worker_id} %(threadName)s %(name)s %(levelname)s %(message)s",
    )
    queue = readyq.Queue(args.url)
    for item in args.resource:
        name, _, capacity = item.partition("=")
        queue.resource(name, capacity=int(capacity))
    engine = harness.history_engine(args.url)
    active = Active()

    def note(job: readyq.Job, event: str) -> None:
        harness.record(
            engine, job_id=job.id, attempt=job.attempt, worker=worker_id, grp=job.group,
            event=event,
        )

    @queue.handler(harness.JOB_TYPE)
    def work(job: readyq.Job) -> dict[str, Any]:
        with active:
            note(job, "start")
            opts = job.args or {}
            seconds = float(opts.get("sleep", 0.0))
            if job.attempt == 1 and "first_sleep" in opts:
                seconds = float(opts["first_sleep"])
            deadline = time.monotonic() + seconds
            while not job.lease_lost:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                time.sleep(min(left, 0.05))
            if args.mode == "check-lease" and not job.lease_lost:
                with contextlib.suppress(readyq.LeaseLost):
                    job.heartbeat()  # sets job.lease_lost when the lease is gone
            if job.lease_lost:
                note(job, "lease_lost")
            note(job, "end")
            if job.attempt <= int(opts.get("fail_attempts", 0)):
                raise RuntimeError(f"attempt {job.attempt} fails on purpose")
            return {"worker": worker_id, "attempt": job.attempt}

    for name, fn in memory_handlers.HANDLERS.items():
        queue.handler(name, isolation=args.isolation)(fn)

    logging.getLogger("readyq.worker").addHandler(FencedRecorder(engine, worker_id))
    worker = queue.worker(
        concurrency=args.concurrency,
        lease_ttl=args.lease_ttl,
        heartbeat_interval=args.heartbeat,
        poll_interval=args.poll,
        worker_id=worker_id,
        max_running=args.max_running,
    )
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    try:
        worker.run(until_idle=args.until_idle)
    finally:
        # A handler whose lease was lost is abandoned by the worker but still running:
        # let it record its last events before the process ends.
        active.wait_idle(15.0)
        if args.stats_file:
            data = dataclasses.asdict(worker.stats)
            data["worker_id"] = worker_id
            data["pid"] = os.getpid()
            with open(args.stats_file, "w") as fh:
                json.dump(data, fh)
        queue.close()
        engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
