"""A worker process whose handlers spawn: ``split`` spawns ``parts`` jobs joined to it,
after sleeping, so that a kill often lands between the spawn and the ``done``; ``part``
and ``merge`` sleep briefly. Run by tests/processes/test_spawn_sigkill.py."""

from __future__ import annotations

import argparse
import signal
import sys
import time

import readyq


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--worker-id", required=True)
    args = p.parse_args(argv)
    queue = readyq.Queue(args.url)

    @queue.handler("split", max_attempts=50)
    def split(job: readyq.Job) -> dict[str, int]:
        n = int(job.args["parts"])
        job.spawn([readyq.JobSpec("part", {"i": i}) for i in range(n)])
        # A first attempt lingers between its spawn and its done: where kills land.
        time.sleep(1.0 if job.attempt == 1 else 0.1)
        return {"parts": n}

    @queue.handler("part", max_attempts=50)
    def part(job: readyq.Job) -> None:
        time.sleep(0.03)

    @queue.handler("merge", max_attempts=50)
    def merge(job: readyq.Job) -> None:
        time.sleep(0.01)

    worker = queue.worker(concurrency=4, lease_ttl=1.5, heartbeat_interval=0.4,
                          poll_interval=0.05, worker_id=args.worker_id)
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    try:
        worker.run()
    finally:
        queue.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
