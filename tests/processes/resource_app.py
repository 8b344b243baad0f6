"""A worker process that defines a resource, for the multi-process resource tests.

    python tests/processes/resource_app.py --url URL --concurrency N --resource NAME=CAP
        --poll S [--max-running N] [--until-idle] [--stats-file PATH] [--worker-id ID]

Like ``app.py``, it registers one handler, ``work`` (which declares no costs: each job
brings its own ``uses``), records the handler's ``start`` and ``end`` in the history
table (see ``harness.py``) and writes the worker's stats as JSON on exit. The handler
sleeps ``args["sleep"]`` seconds. SIGTERM stops the worker gracefully.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import signal
import sys
import time
from typing import Any

import harness

import readyq


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--resource", action="append", default=[], metavar="NAME=CAP")
    p.add_argument("--poll", type=float, default=0.02)
    p.add_argument("--lease-ttl", type=float, default=10.0)
    p.add_argument("--heartbeat", type=float, default=2.0)
    p.add_argument("--max-running", type=int)
    p.add_argument("--until-idle", action="store_true")
    p.add_argument("--stats-file")
    p.add_argument("--worker-id")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    worker_id = args.worker_id or f"res-{os.getpid()}"
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format=f"%(asctime)s {worker_id} %(threadName)s %(name)s %(levelname)s %(message)s",
    )
    queue = readyq.Queue(args.url)
    for item in args.resource:
        name, _, cap = item.partition("=")
        queue.resource(name, capacity=int(cap))
    engine = harness.history_engine(args.url)

    def note(job: readyq.Job, event: str) -> None:
        harness.record(
            engine, job_id=job.id, attempt=job.attempt, worker=worker_id, grp=job.group,
            event=event,
        )

    @queue.handler(harness.JOB_TYPE)
    def work(job: readyq.Job) -> dict[str, Any]:
        note(job, "start")
        time.sleep(float((job.args or {}).get("sleep", 0.0)))
        note(job, "end")
        return {"worker": worker_id}

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
