"""A worker process that fires one schedule while its database clock jumps.

    python tests/processes/schedule_app.py URL WORKER_ID SECONDS STATS_PATH

It defines the schedule ``every2`` (every 2 s, catch_up="all"; each occurrence a job and
a job that depends on it) and a no-op handler, runs a worker for SECONDS, and moves its
store's clock forward twice meanwhile (by 31 s, then by 601 s), at moments that differ
per process: the processes disagree about the time for a while, as hosts whose clocks
jump would. The firer looks at the row every 0.05 s whatever it remembers. The worker's
stats are written as JSON to STATS_PATH.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import asdict
from datetime import datetime
from typing import Any

import readyq


def occurrence(at: datetime) -> list[readyq.JobSpec]:
    stamp = int(at.timestamp())
    return [
        readyq.JobSpec("tick", {"at": stamp}, key="first"),
        readyq.JobSpec("tick", {"after": stamp}, depends_on=["first"]),
    ]


def main() -> None:
    url, worker_id, seconds, stats_path = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    queue = readyq.Queue(url)

    @queue.handler("tick")
    def tick(job: Any) -> None:
        return None

    queue.schedule("every2", every=2, catch_up="all", job=occurrence)
    worker = queue.worker(concurrency=4, poll_interval=0.02, worker_id=worker_id)
    assert worker.firer is not None
    worker.firer.recheck = 0.05
    runner = threading.Thread(target=worker.run, kwargs={"handle_signals": False})
    runner.start()
    start = time.monotonic()
    jitter = (sum(map(ord, worker_id)) % 7) / 10.0
    jumps = [(seconds * 0.3 + jitter, 31.0), (seconds * 0.6 + jitter, 601.0)]
    while time.monotonic() - start < seconds:
        elapsed = time.monotonic() - start
        while jumps and elapsed >= jumps[0][0]:
            queue.store.clock_offset += jumps.pop(0)[1]
        time.sleep(0.01)
    worker.stop(grace=2.0)
    runner.join(30)
    with open(stats_path, "w") as f:
        json.dump(asdict(worker.stats), f)
    queue.close()


if __name__ == "__main__":
    main()
