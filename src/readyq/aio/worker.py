"""AsyncWorker: the Worker's loop on an event loop.

The loop itself is :class:`readyq.worker.Worker`'s, unchanged (ticks, heartbeats,
reclaim, cap, grace, wake-up), run in a greenlet: its store awaits the AsyncStore and its
waits await an asyncio event. ``async def`` handlers run as tasks on the loop; plain
handlers run in the Worker's daemon handler threads (an abandoned, hung handler must not
keep the process or the event loop's executor from exiting). Outcomes are decided by the
same ``done_outcome``/``failed_outcome`` as in the thread worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import TYPE_CHECKING, Any

from sqlalchemy.util.concurrency import await_only, greenlet_spawn

from readyq.errors import ConfigurationError
from readyq.model import Job
from readyq.tracing import attempt_span
from readyq.worker import (
    Worker,
    WorkerStats,
    _HandlerPool,
    _Running,
    done_outcome,
    prepare_job,
)

if TYPE_CHECKING:
    from readyq.aio.queue import AsyncQueue


class _LoopEvent:
    """A threading.Event look-alike for the worker's loop greenlet: ``set`` is safe from
    any thread; ``wait`` suspends the greenlet on the event loop instead of blocking it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.get_ident()
        self._event = asyncio.Event()
        self._flag = False

    def set(self) -> None:
        self._flag = True
        if threading.get_ident() == self._thread:
            self._event.set()
        else:
            # A closed loop raises RuntimeError: nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._event.set)

    def clear(self) -> None:
        self._flag = False
        self._event.clear()

    def is_set(self) -> bool:
        return self._flag

    def wait(self, timeout: float | None = None) -> bool:
        if not self._flag:
            with contextlib.suppress(asyncio.TimeoutError):
                await_only(asyncio.wait_for(self._event.wait(), timeout))
        return self._flag


class _Launcher:
    """Where the Worker submits attempts: a task for ``async def``, a thread otherwise."""

    def __init__(self, worker: AsyncWorker) -> None:
        self._worker = worker
        self._threads = _HandlerPool()
        self.tasks: set[asyncio.Task[None]] = set()

    def submit(self, fn: Any, entry: _Running) -> None:
        if entry.spec.is_async:
            task = asyncio.get_running_loop().create_task(self._worker._aexecute(entry))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        else:
            self._threads.submit(fn, entry)

    def submit_many(self, fn: Any, entries: list[_Running]) -> None:
        threaded = []
        for entry in entries:
            if entry.spec.is_async:
                self.submit(fn, entry)
            else:
                threaded.append(entry)
        self._threads.submit_many(fn, threaded)

    def shutdown(self) -> None:
        self._threads.shutdown()


class AsyncWorker(Worker):
    """Runs an AsyncQueue's handlers; build it with ``AsyncQueue.worker()``."""

    def __init__(self, queue: AsyncQueue, **options: Any) -> None:
        super().__init__(queue.queue, **options)
        self.async_queue = queue
        self._loop: asyncio.AbstractEventLoop | None = None

    async def run(  # type: ignore[override]
        self, *, until_idle: bool = False, handle_signals: bool = True
    ) -> WorkerStats:
        """Loop until ``stop()`` (or idle, with ``until_idle``); see ``Worker.run``."""
        self._loop = asyncio.get_running_loop()
        self._stop = _LoopEvent(self._loop)  # type: ignore[assignment]
        self._inbox.wake = _LoopEvent(self._loop)  # type: ignore[assignment]
        self._pool = _Launcher(self)  # type: ignore[assignment]
        return await greenlet_spawn(Worker.run, self, until_idle=until_idle,
                                    handle_signals=handle_signals)

    async def prepare(self) -> None:  # type: ignore[override]
        """Connect, check the tables and build the loop's statements; see
        ``Worker.prepare``."""
        await greenlet_spawn(Worker.prepare, self)

    def _connect(self) -> None:
        """Reach the database (in the loop's greenlet): the async store detects the
        dialect; until then the loop backs off like after any other outage."""
        await_only(self.async_queue._astore.ensure())
        super()._connect()

    async def _aexecute(self, entry: _Running) -> None:
        """The async twin of ``Worker._execute``: same span, validation and outcomes."""
        c, job, spec = entry.claimed, entry.job, entry.spec
        began = time.monotonic()
        if self._too_late(entry, began):
            return
        with attempt_span(c) as span:
            try:
                prepare_job(job, spec)
                value = await spec.fn(job)
                outcome = done_outcome(c, value, self.queue.max_payload_bytes, spec,
                                       duration=time.monotonic() - began)
            except BaseException as exc:  # a handler's failure, whatever it is, fails it
                outcome = self._failed(entry, began, span, exc)
        self._report(outcome)

    def _job_heartbeat(self, job: Job) -> None:
        """``job.heartbeat()`` from a plain handler's thread: run it on the loop."""
        loop = self._loop
        if loop is None or threading.get_ident() == getattr(self._inbox.wake, "_thread", None):
            raise ConfigurationError(
                "job.heartbeat() blocks: an async handler cannot call it on the event loop "
                "(the worker heartbeats its running jobs every heartbeat_interval)"
            )
        future = asyncio.run_coroutine_threadsafe(
            greenlet_spawn(Worker._job_heartbeat, self, job), loop
        )
        future.result()
