"""The no-op jobs of the peers that find a job's code by its import path.

huey registers a task under its module and name, django-tasks and Chancy store the
function's import path in each job's row, and DBOS registers a workflow under its
qualified name: the benchmark's parent, which enqueues, and its worker processes, which
run the jobs, must import them from the same module, this one. Each body counts its
runs in ``EXECUTED`` (per process), so that a worker can report how many it ran.

The django-tasks task is in ``peer_django_task``: its decorator needs Django's
settings, which only a process that runs Django configures.
"""

from __future__ import annotations

import threading
from typing import Any

_lock = threading.Lock()
EXECUTED = 0
# The queue name the peers' jobs go to.
QUEUE = "bench"


def executed() -> None:
    """Count one run of a no-op body (thread-safe: DBOS runs workflows in threads)."""
    global EXECUTED
    with _lock:
        EXECUTED += 1


# -- huey ---------------------------------------------------------------------------------


def make_huey(path: str, **options: Any) -> tuple[Any, Any]:
    """A ``SqliteHuey`` on the file at ``path`` and its no-op task.

    ``store_none=True``: huey records a task's result only when the task returns
    something, and a task that ran leaves no other trace in its tables (its queue row is
    deleted when it is dequeued). Storing the no-op's ``None`` writes one result row per
    job, which the benchmark then checks, as readyq records each job's result.
    """
    from huey import SqliteHuey

    huey = SqliteHuey("bench", filename=path, store_none=True, **options)

    @huey.task(name="bench_noop")
    def bench_noop(i: int) -> None:
        executed()

    return huey, bench_noop


# -- Chancy -------------------------------------------------------------------------------


async def chancy_noop(i: int) -> None:
    """Chancy's no-op job, run by its AsyncExecutor (a coroutine, as that executor needs)."""
    executed()


# -- DBOS ---------------------------------------------------------------------------------


def register_dbos_workflow() -> Any:
    """Register the DBOS no-op workflow (after ``DBOS(config=...)``) and return it."""
    from dbos import DBOS

    @DBOS.workflow(name="bench_noop")
    def bench_noop(i: int) -> None:
        executed()

    return bench_noop
