"""Attempts whose handlers run in child processes: which handlers do, the pool of
children (made at first use), and the outcome each child's end becomes.

:mod:`readyq.isolation` runs the children; this module is the worker's side of it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping

from readyq.attempt_outcomes import CHILD_DIED, error_outcome
from readyq.checkpoints import StoreBackend
from readyq.config import WorkerOptions
from readyq.handlers import HandlerSpec
from readyq.heartbeats import Heartbeats
from readyq.isolation import ChildPool, JobRequest, RunResult, Watch, check_importable, run_in_child
from readyq.memory_relay import start as start_memory
from readyq.model import ClaimedJob, Flag, Job
from readyq.planning.attempts import Ended
from readyq.planning.caps import current_cap
from readyq.store import Outcome, OutcomeKind
from readyq.store.records import TIMED_OUT, TIMEOUT
from readyq.worker_state import RunningAttempt


def runs_in_child(spec: HandlerSpec, isolation: str) -> bool:
    """Whether ``spec``'s handler runs in a child process: its own choice, else the
    worker's ``isolation`` for plain functions (``async def`` handlers stay on the event
    loop unless they ask)."""
    if spec.isolation is not None:
        return spec.isolation == "process"
    return isolation == "process" and not spec.is_async


def child_outcome(
    c: ClaimedJob,
    job: Job,
    spec: HandlerSpec,
    result: RunResult,
    *,
    timeout: float | None,
    max_memory: int | None,
    duration: float,
) -> Outcome:
    """The outcome of an attempt whose child process ended with ``result``: what the
    handler returned or raised, or why the child was killed or died."""
    if result.end is not None:
        if result.end.result_json is not None:
            return Outcome(job=c, kind=OutcomeKind.DONE, result_json=result.end.result_json,
                           duration=duration, spawns=job.staged_spawns())
        return error_outcome(c, job, spec, result.end.error or "", result.end.error_type
                             or "Exception", duration=duration)
    if result.killed == "cancel":
        return error_outcome(c, job, spec, "cancelled: its child process was terminated",
                             "Cancelled", duration=duration, ended=Ended.TERMINATED)
    if result.killed == "timeout":
        return error_outcome(
            c, job, spec,
            f"{TIMED_OUT} after {timeout:g}s (attempt {c.attempt}): its child process "
            "was terminated", TIMEOUT, duration=duration, ended=Ended.TIMED_OUT,
        )
    if result.killed is not None and result.killed.startswith("memory:"):
        used = int(result.killed.split(":", 1)[1])
        limit = max_memory or 0
        error = (f"its child process used {used / 2**20:.0f} MiB, over max_memory_per_child "
                 f"({limit / 2**20:.0f} MiB): killed")
        return error_outcome(c, job, spec, error, "MemoryLimit", duration=duration,
                             ended=Ended.CHILD_DIED)
    if result.killed == "lost":
        return error_outcome(c, job, spec, "lease lost: its child process was terminated",
                             "LeaseLost", duration=duration, ended=Ended.LEASE_LOST)
    return error_outcome(
        c, job, spec, f"the child process running the handler {result.crashed}",
        CHILD_DIED, duration=duration, ended=Ended.CHILD_DIED,
    )


class ChildAttempts:
    """Runs one worker's isolated attempts in its pool of child processes.

    It works with what the worker gives it: its options, its handlers and job types,
    its id, the payload limit, its heartbeats, the flag its jobs see as
    ``job.stopping``, and ``backend_of``, where an attempt's memory is read and written.
    The handlers that run in children are checked importable here, at once.
    """

    def __init__(
        self,
        options: WorkerOptions,
        handlers: Mapping[str, HandlerSpec],
        types: Iterable[str],
        *,
        worker_id: str,
        max_payload_bytes: int,
        heartbeats: Heartbeats,
        stopping: Flag,
        backend_of: Callable[[Job], StoreBackend],
    ) -> None:
        self.options = options
        self.handlers = handlers
        self.worker_id = worker_id
        self.max_payload_bytes = max_payload_bytes
        self.heartbeats = heartbeats
        self.stopping = stopping
        self.backend_of = backend_of
        # Job types whose handlers run in child processes.
        self.types = {t for t in types if runs_in_child(handlers[t], options.isolation)}
        for t in self.types:
            check_importable(handlers[t].fn, t)
        self._pool: ChildPool | None = None
        self._lock = threading.Lock()

    def _children(self) -> ChildPool:
        with self._lock:
            if self._pool is None:
                opts = self.options
                slots = opts.max_running or max(1, current_cap(opts.concurrency))
                self._pool = ChildPool(
                    keep=slots,
                    max_jobs=opts.max_jobs_per_child,
                    kill_grace=opts.kill_grace,
                    preload=tuple(sorted({
                        self.handlers[t].fn.__module__ for t in self.types
                    })),
                )
            return self._pool

    def run(self, entry: RunningAttempt, began: float) -> Outcome:
        """Run the handler in a child process; the worker keeps the lease, and kills the
        child at the timeout, on a terminating cancel, past its memory limit, or when the
        lease is lost."""
        c, job, spec = entry.claimed, entry.job, entry.spec
        timeout = c.timeout if c.timeout is not None else spec.timeout
        backend = self.backend_of(job)
        request = JobRequest(
            fn=spec.fn, is_async=spec.is_async, args_model=spec.args_model,
            result_model=spec.result_model, max_payload_bytes=self.max_payload_bytes,
            id=c.id, type=c.type, args_json=c.args_json, attempt=c.attempt,
            max_attempts=c.max_attempts, group=c.group, parent_id=c.parent_id,
            lease_token=c.lease_token, worker_id=self.worker_id,
        )
        max_memory = self.options.max_memory_per_child
        heartbeats = self.heartbeats
        watch = Watch(
            deadline=None if timeout is None else began + timeout,
            max_memory=max_memory,
            cancelled=entry.cancelled.is_set,
            terminate_on_cancel=spec.on_cancel == "terminate",
            lost=entry.lost.is_set,
            ask_heartbeat=lambda: heartbeats.ask(entry),
            stopping=self.stopping.is_set,
            memory=lambda msg: start_memory(backend, msg, job.spawn),
        )
        result = run_in_child(self._children(), request, watch)
        return child_outcome(c, job, spec, result, timeout=timeout, max_memory=max_memory,
                             duration=time.monotonic() - began)

    def shutdown(self) -> None:
        """End every child (the pool's ``shutdown``), if any was made."""
        if self._pool is not None:
            self._pool.shutdown()
