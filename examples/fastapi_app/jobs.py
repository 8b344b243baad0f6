"""The workers' side: the handlers of the report jobs, on a plain readyq.Queue.

Workers run in processes of their own, not inside the web server's::

    READYQ_URL=postgresql+psycopg://app@db/app \\
        readyq worker --app examples.fastapi_app.jobs:make_queue --concurrency 8
"""

from __future__ import annotations

import os

import readyq


def make_queue(url: str | None = None) -> readyq.Queue:
    """The queue with the report handlers (``READYQ_URL`` by default)."""
    queue = readyq.Queue(url or os.environ.get("READYQ_URL", "sqlite:///reports.db"))

    @queue.handler("report.part", timeout=600, max_attempts=3)
    def build_part(job: readyq.Job) -> dict[str, object]:
        # The real work of one part: here, a small sum that the test can check.
        part = int(job.args["part"])
        return {"part": part, "rows": (part + 1) * 100}

    return queue
