"""AsyncWorker: the Worker's loop on an event loop.

The loop itself is :class:`readyq.worker.Worker`'s, unchanged (ticks, heartbeats,
reclaim, cap, grace, wake-up), run in a greenlet: its store runs on the async engine's
``sync_engine`` there, and its waits await an asyncio event. ``async def`` handlers run
as tasks on the loop; plain handlers run in the Worker's daemon handler threads (an
abandoned, hung handler must not keep the process or the event loop's executor from
exiting). Outcomes are decided by the same ``done_outcome``/``failed_outcome`` as in the
thread worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

from sqlalchemy.util.concurrency import await_only, greenlet_spawn

from readyq.attempt_outcomes import done_outcome
from readyq.checkpoints import AttemptMemory, StoreBackend
from readyq.errors import ConfigurationError
from readyq.heartbeats import run_logged
from readyq.model import Flag, Job
from readyq.store.memory import Holder
from readyq.tracing import attempt_span
from readyq.transient import describe
from readyq.worker import HandlerPool, Worker, prepare_job
from readyq.worker_state import RunningAttempt, WorkerStats

log = logging.getLogger("readyq.worker")


class _LoopEvent:
    """A threading.Event look-alike for the worker's loop greenlet: ``set`` is safe from
    any thread; ``wait`` suspends the greenlet on the event loop instead of blocking it.

    Made with the event loop it waits on, or without one and bound to it by ``bind``
    (the worker is built before the loop it runs on is known)."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop
        self._thread = threading.get_ident()
        self._event = asyncio.Event()
        self._flag = False

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait on ``loop`` from now on, called on it; unset, as a new event is (each
        ``run`` starts unstopped)."""
        self._loop = loop
        self._thread = threading.get_ident()
        self._event = asyncio.Event()
        self._flag = False

    def set(self) -> None:
        self._flag = True
        if threading.get_ident() == self._thread:
            self._event.set()
        elif self._loop is not None:
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
    """Where the Worker submits attempts: a task for ``async def`` (unless it runs in a
    child process, which a thread waits for), a thread otherwise."""

    def __init__(self, run_async: Callable[[RunningAttempt], Coroutine[Any, Any, None]]) -> None:
        self._run_async = run_async
        self._threads = HandlerPool()
        self.tasks: set[asyncio.Task[None]] = set()

    def submit(self, fn: Callable[[RunningAttempt], None], entry: RunningAttempt, /) -> None:
        if entry.spec.is_async and not entry.isolated:
            task = asyncio.get_running_loop().create_task(self._run_async(entry))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        else:
            self._threads.submit(fn, entry)

    def submit_many(
        self, fn: Callable[[RunningAttempt], None], entries: list[RunningAttempt], /
    ) -> None:
        threaded = []
        for entry in entries:
            if entry.spec.is_async and not entry.isolated:
                self.submit(fn, entry)
            else:
                threaded.append(entry)
        self._threads.submit_many(fn, threaded)

    def shutdown(self) -> None:
        self._threads.shutdown()


class AsyncWorker(Worker):
    """Runs an AsyncQueue's handlers; build it with ``AsyncQueue.worker()`` (it takes
    what :class:`readyq.Worker` takes)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The loop's events wait on the event loop ``run`` is awaited on (bound there);
        # async def handlers run as its tasks.
        self._stop_event = _LoopEvent()
        self._wake_event = _LoopEvent()
        self._launcher = _Launcher(self._aexecute)
        super().__init__(*args, stop_event=self._stop_event, wake_event=self._wake_event,
                         launcher=self._launcher, **kwargs)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None

    async def run(  # type: ignore[override]
        self, *, until_idle: bool = False, handle_signals: bool = True
    ) -> WorkerStats:
        """Loop until ``stop()`` (or idle, with ``until_idle``); see ``Worker.run``."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._stop_event.bind(self._loop)
        self._wake_event.bind(self._loop)
        return await greenlet_spawn(Worker.run, self, until_idle=until_idle,
                                    handle_signals=handle_signals)

    def _start_heartbeats(self) -> Callable[[], None]:
        """The heartbeat rounds as a task of the event loop, in a greenlet of their own
        (the store runs there on the async engine), beside the loop's greenlet."""
        loop = self._loop
        assert loop is not None
        beats = self.heartbeats
        beats.wake = _LoopEvent(loop)
        task = loop.create_task(greenlet_spawn(run_logged, beats))
        self._beats_inline = False

        def stop() -> None:
            beats.stop()
            await_only(task)  # called in the loop's greenlet
            self._beats_inline = True

        return stop

    async def prepare(self) -> None:  # type: ignore[override]
        """Connect, check the tables and build the loop's statements; see
        ``Worker.prepare``."""
        await greenlet_spawn(Worker.prepare, self)

    async def _aexecute(self, entry: RunningAttempt) -> None:
        """The async twin of ``Worker._execute``: same span, validation and outcomes."""
        began = time.monotonic()
        recorder = self._recorder
        if recorder.cannot_start(entry):
            return
        if entry.traced:
            with attempt_span(entry.claimed) as span:
                outcome = await self._aattempt(entry, began, span)
        else:  # no span to open, as in the thread worker
            outcome = await self._aattempt(entry, began, None)
        recorder.report(outcome)

    async def _aattempt(self, entry: RunningAttempt, began: float, span: Any) -> Any:
        c, job, spec = entry.claimed, entry.job, entry.spec
        try:
            prepare_job(job, spec)
            value = await spec.fn(job)
            await self._asettle(job)
            return done_outcome(c, value, self.max_payload_bytes, spec,
                                time.monotonic() - began, job.staged_spawns())
        except BaseException as exc:  # a handler's failure, whatever it is, fails it
            await self._asettle(job)
            return self._recorder.failed(entry, began, span, exc)

    async def _asettle(self, job: Job) -> None:
        """``Worker._settle`` on the event loop."""
        try:
            await job.asettle()
        except Exception as exc:
            log.warning("job %d: its last progress was not written (%s)", job.id,
                        describe(exc), extra={"event": "progress_lost", "job_id": job.id})

    def _memory_of(self, job: Job) -> AttemptMemory:
        """The attempt's memory, read and written on the event loop, where this worker's
        store runs: awaited by a coroutine, waited for by a plain handler's thread."""
        loop = self._loop
        assert loop is not None
        loop_thread = self._loop_thread

        def run(fn: Callable[[], Any]) -> Any:
            if threading.get_ident() == loop_thread:
                raise ConfigurationError(
                    "this call blocks: an async handler awaits its async twin on the "
                    "event loop (job.astate(), job.astep(), job.asave_state(), "
                    "job.aupstream_results())"
                )
            return asyncio.run_coroutine_threadsafe(greenlet_spawn(fn), loop).result()

        async def arun(fn: Callable[[], Any]) -> Any:
            return await greenlet_spawn(fn)

        holder = Holder(job.id, job.attempt, self.worker_id, job.lease_token,
                        self.options.lease_ttl)
        return AttemptMemory(StoreBackend(self.store, holder), job_id=job.id,
                             max_payload_bytes=self.max_payload_bytes, run=run, arun=arun)

    def _job_heartbeat(self, job: Job, *, lost: Flag, cancelled: Flag) -> bool:
        """``job.heartbeat()`` from a plain handler's thread. It waits for the heartbeats'
        round, which runs on the event loop: an ``async def`` handler cannot call it."""
        if threading.get_ident() == self._loop_thread:
            raise ConfigurationError(
                "job.heartbeat() blocks: an async handler cannot call it on the event loop "
                "(the worker heartbeats its running jobs every heartbeat_interval)"
            )
        return super()._job_heartbeat(job, lost=lost, cancelled=cancelled)
