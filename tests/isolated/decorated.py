"""A handler module written the way the docs show it: a queue at module level and
``@queue.handler(..., isolation="process")`` above a module-level function. The queue's
URL comes from READYQ_DECORATED_URL (set by the test before importing this module)."""

from __future__ import annotations

import os

import readyq

queue = readyq.Queue(os.environ.get("READYQ_DECORATED_URL", "sqlite://"))


@queue.handler("decorated", isolation="process")
def decorated(job: readyq.Job) -> dict[str, int]:
    return {"pid": os.getpid()}
