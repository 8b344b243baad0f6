"""The worker on the far side of a network cut (tests/chaos/test_partition.py).

    python partitioned_worker.py URL EVENTS_FILE WORKER_ID

It runs two handlers under a cap of 2 and notes what they see in EVENTS_FILE, one line
per event with this machine's monotonic clock (shared by every process on it):

* ``threaded``, a thread handler: times ``job.heartbeat()`` every 0.5 s, and notes when
  ``job.lease_lost`` first reads true, then times one more heartbeat;
* ``isolated``, run in a child process (tests/isolated/handlers.py,
  ``partition_child``): notes that it is alive every 20 ms, and times its heartbeats.

Lease 4 s, heartbeat every 1 s. SIGTERM stops it.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import readyq
from isolated import handlers

LEASE = 4.0
HEARTBEAT = 1.0


def main(url: str, events: str, worker_id: str) -> int:
    queue = readyq.Queue(url)

    @queue.handler("threaded", isolation="thread")
    def threaded(job: readyq.Job) -> str:
        handlers.note(events, "start", "thread", time.monotonic(), os.getpid())
        last_beat = time.monotonic()
        while True:
            if job.lease_lost:
                handlers.note(events, "lost", "thread", time.monotonic())
                handlers.heartbeat_timed(job, events, "after-lost")  # answers at once
                return "gave up"
            if time.monotonic() - last_beat >= 0.5:
                handlers.heartbeat_timed(job, events, "thread")
                last_beat = time.monotonic()
            time.sleep(0.02)

    queue.handler("isolated", isolation="process")(handlers.partition_child)
    worker = queue.worker(concurrency=2, lease_ttl=LEASE, heartbeat_interval=HEARTBEAT,
                          poll_interval=0.1, worker_id=worker_id)
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    worker.run()
    queue.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
