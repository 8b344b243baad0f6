"""The worker: claims jobs under the cap, runs handlers in threads, heartbeats, finalizes.

One loop thread talks to the database: each tick it records finished attempts (one
transaction for all of them), extends the leases of running jobs (one statement),
sweeps expired leases and passed deadlines, and claims what the cap and fair share
allow (one transaction). Handlers run in their own threads and never hold a connection.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import secrets
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from readyq.attempt_outcomes import done_outcome
from readyq.checkpoints import AttemptMemory, StoreBackend
from readyq.child_attempts import ChildAttempts
from readyq.claim_order import ClaimOrder, StartPolicy
from readyq.config import WorkerOptions
from readyq.errors import ConfigurationError, LeaseLost
from readyq.firing import BatchBuilder, ScheduleFirer
from readyq.handlers import HandlerSpec
from readyq.heartbeats import Heartbeats, start_thread
from readyq.metrics import Observers
from readyq.model import ClaimedJob, Flag, Job, LeaseFlag
from readyq.payload import decode, decode_stored
from readyq.planning.caps import current_cap
from readyq.process_signals import frozen_heap, install_stop_signals, restore_signals
from readyq.rate_limits import RateLimit
from readyq.recording import Recorder
from readyq.resources import Resource, handler_texts
from readyq.schedules import Schedule
from readyq.schema import DEFAULT_MAX_ATTEMPTS
from readyq.store import Outcome, OutcomeKind, ResourceView, Store
from readyq.store.memory import Holder
from readyq.store.records import Spawn
from readyq.tracing import attempt_span, spans_enabled
from readyq.transient import BACKOFF_MAX, describe, is_transient, next_backoff, waited_out
from readyq.untrusted import one_line
from readyq.validation import parse_args
from readyq.wakeup import start_listener
from readyq.worker_state import (
    Inbox,
    LoopEvent,
    RunningAttempt,
    WorkerStats,
    claimed_fields,
)

__all__ = ["HandlerPool", "Launcher", "TickResult", "Worker", "WorkerStats", "prepare_job"]

log = logging.getLogger("readyq.worker")

FLUSH_LINGER = 0.01


@dataclass(frozen=True)
class TickResult:
    """What one ``run_once`` did."""

    finished: int = 0
    claimed: int = 0
    reclaimed: int = 0
    heartbeats: int = 0
    requested: int = 0


class Launcher(Protocol):
    """Where the worker submits its attempts to run (``fn(entry)`` each): a
    :class:`HandlerPool`, or the asyncio worker's, which runs ``async def`` handlers on
    its event loop."""

    def submit(
        self, fn: Callable[[RunningAttempt], None], entry: RunningAttempt, /
    ) -> None: ...

    def submit_many(
        self, fn: Callable[[RunningAttempt], None], entries: list[RunningAttempt], /
    ) -> None: ...

    def shutdown(self) -> None: ...


class HandlerPool:
    """Daemon threads that run handlers, reused when idle, added when all are busy.

    Waking a thread costs far more than a short handler, so a batch of tasks does not
    wake one thread per task: threads wake in a chain. A thread that takes a task while
    others are still queued wakes (or starts) one more thread first, and a thread that
    finishes its task takes the next queued one itself. Short handlers are then run by
    a few threads; long ones still each get their own thread at once, one wake-up
    after another. Invariant: while tasks are queued, at least one thread is seeking
    (woken, just started, or just finished and about to look at the queue).

    Daemon threads, because a handler that hangs past its timeout is abandoned (its
    writes are fenced out) and must not keep the process from exiting.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._tasks: deque[tuple[Callable[[Any], None], Any]] = deque()
        self._seeking = 0
        self._idle = 0
        self._closed = False

    def submit(self, fn: Callable[[Any], None], arg: Any) -> None:
        with self._lock:
            self._tasks.append((fn, arg))
            if self._seeking == 0:
                self._wake_one()

    def submit_many(self, fn: Callable[[Any], None], args: list[Any]) -> None:
        """Queue ``fn(arg)`` for each arg under one lock; the chain of wake-ups starts
        with one thread, as for a single task."""
        if not args:
            return
        with self._lock:
            self._tasks.extend(zip(itertools.repeat(fn), args))
            if self._seeking == 0:
                self._wake_one()

    def _wake_one(self) -> None:
        """Make one more thread seek (the lock is held)."""
        self._seeking += 1
        if self._idle:
            self._idle -= 1
            self._wake.notify()
        else:
            threading.Thread(target=self._loop, name="readyq-handler", daemon=True).start()

    def _loop(self) -> None:
        with self._lock:
            while True:
                if self._tasks:
                    fn, arg = self._tasks.popleft()
                    self._seeking -= 1
                    if self._tasks and self._seeking == 0:
                        self._wake_one()
                    self._lock.release()
                    try:
                        fn(arg)
                    except BaseException:
                        # SystemExit and the like from a handler end its attempt (already
                        # recorded as failed), never this thread: a thread that died here
                        # while counted as seeking would leave later tasks unrun.
                        log.debug("a handler task raised past its own handling", exc_info=True)
                    finally:
                        # An idle thread keeps nothing of its last task: the attempt, its
                        # job's arguments and result, the worker.
                        del fn, arg
                        self._lock.acquire()
                        self._seeking += 1
                elif self._closed:
                    self._seeking -= 1
                    return
                else:
                    self._seeking -= 1
                    self._idle += 1
                    self._wake.wait()  # whoever notifies has counted this thread seeking

    def shutdown(self) -> None:
        """Let idle threads exit; busy ones exit after their current handler."""
        with self._lock:
            self._closed = True
            self._seeking += self._idle
            self._idle = 0
            self._wake.notify_all()


def prepare_job(job: Job, spec: HandlerSpec) -> None:
    """Turn ``job.args`` into the handler's ``args_model`` instance, if it has one.

    Runs where the handler runs, inside its span: a failure fails the attempt.
    """
    if spec.args_model is not None:
        job.args = parse_args(spec.args_model, job.type, job.args)


def default_worker_id() -> str:
    """A fresh id per worker: host, pid and random bits, so a restarted process that
    reuses a pid or a host name never looks like its predecessor."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class Worker:
    """Runs handlers: claims jobs under the cap, heartbeats, records their outcomes.

    Build it with ``Queue.worker()``. It works with exactly what it is given: the store,
    the handlers by job type, the observers (shared with the queue, so one added later is
    seen), the rate limits by name, and its :class:`readyq.WorkerOptions`, which are
    its only copy of them (``worker.options``).

    A subclass that runs the loop elsewhere (:class:`readyq.aio.worker.AsyncWorker`)
    supplies what differs there: ``stop_event`` (set by ``stop``), ``wake_event`` (wakes
    the loop when an attempt finishes) and ``launcher`` (where attempts run). By
    default they are ``threading.Event`` objects and a :class:`HandlerPool`.
    """

    def __init__(
        self,
        store: Store,
        handlers: Mapping[str, HandlerSpec],
        observers: Observers,
        rate_limits: Mapping[str, RateLimit],
        options: WorkerOptions,
        *,
        max_payload_bytes: int,
        listen: bool | None = None,
        default_max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        resources: Mapping[str, Resource] | None = None,
        spawner: Callable[..., Spawn] | None = None,
        schedules: Mapping[str, Schedule] | None = None,
        batch_of: BatchBuilder | None = None,
        stop_event: LoopEvent | None = None,
        wake_event: LoopEvent | None = None,
        launcher: Launcher | None = None,
    ) -> None:
        self.store = store
        # Checks and builds what a handler spawns (``Job.spawn``); None: cannot spawn.
        self.spawner = spawner
        self.options = options
        self.max_payload_bytes = max_payload_bytes
        self.listen = listen
        # Attempts of a job enqueued without max_attempts whose handler sets none.
        self.default_max_attempts = default_max_attempts
        self._grace_until: float | None = None
        if not handlers:
            raise ConfigurationError("register at least one handler before starting a worker")
        types = sorted(handlers) if options.types is None else list(options.types)
        unknown = [t for t in types if t not in handlers]
        if unknown:
            raise ConfigurationError(f"no handler registered for type(s): {', '.join(unknown)}")
        self.types: list[str] = types
        self.handlers = dict(handlers)
        self.observers = observers
        # Job type -> the rate limit on its starts, shared through the database.
        self.rate_limits = {
            t: rate_limits[name]
            for t in self.types
            if (name := self.handlers[t].rate_limit) is not None
        }
        # The named resources this worker keeps the capacity of (re-read every tick),
        # and the costs of its types' handlers.
        self.resources = dict(resources or {})
        self.handler_uses = {
            t: dict(self.handlers[t].uses) for t in self.types if self.handlers[t].uses
        }
        self.handler_text = handler_texts(self.handler_uses)
        # Per job type: its handler's timeout, timeout policy and attempts, applied at
        # start to jobs enqueued without their own.
        self.start_policies = {
            t: StartPolicy(
                self.handlers[t].timeout,
                self.handlers[t].retry_on_timeout,
                self.handlers[t].max_attempts or self.default_max_attempts,
            )
            for t in self.types
        }
        self.worker_id = options.worker_id or default_worker_id()
        # Fires the queue's schedules from the loop (None: the queue defines none, or
        # this worker leaves them to others).
        self.firer: ScheduleFirer | None = None
        if schedules and options.fire_schedules:
            if batch_of is None:
                raise ConfigurationError("a worker that fires schedules needs batch_of")
            self.firer = ScheduleFirer(
                store, schedules, batch_of, self.worker_id, enqueued=observers.enqueued
            )
        self.stats = WorkerStats()
        self._running: dict[int, RunningAttempt] = {}
        self._inbox = Inbox() if wake_event is None else Inbox(wake=wake_event)
        self._stop: LoopEvent = threading.Event() if stop_event is None else stop_event
        # ``job.stopping`` of every job this worker runs: set when it begins a graceful
        # stop. One flag for all, so that a job costs no object more.
        self._stopping = Flag()
        # Builds an attempt's memory at its first use (``Job._remember``); bound once.
        self._remember = self._memory_of
        # Whether the run was ended by Ctrl-C (SIGINT), which ``run`` raises again once
        # the worker has stopped.
        self._interrupted = False
        self._last_reclaim = 0.0
        # The leases of running attempts are extended apart from the loop (see
        # readyq.heartbeats); attempts lost or given up there wait here for the loop.
        self._gone: deque[RunningAttempt] = deque()
        self.heartbeats = Heartbeats(
            store, self.worker_id, options.lease_ttl, options.heartbeat_interval,
            wake=threading.Event(), on_lost=self._on_lost,
        )
        # Whether ``run_once`` runs the heartbeat rounds itself: when nothing else does
        # (a worker driven tick by tick, not by ``run``).
        self._beats_inline = True
        self._pool: Launcher = HandlerPool() if launcher is None else launcher
        # Database reachability: connected once (dialect known), and the outage under way.
        self._connected = False
        self._outage_since: float | None = None
        self._outage_failures = 0
        self._backoff = 0.0
        self._listener: Any = None
        # How long finished attempts may wait for others to finish, so that they are
        # recorded together in one transaction.
        self.linger = min(FLUSH_LINGER, options.poll_interval)
        # The attempts whose handlers run in child processes, and their pool.
        self._children = ChildAttempts(
            options, self.handlers, self.types, worker_id=self.worker_id,
            max_payload_bytes=max_payload_bytes, heartbeats=self.heartbeats,
            stopping=self._stopping, backend_of=self._backend_of,
        )
        # Job types whose handlers run in child processes.
        self.isolated_types = self._children.types
        self._recorder = Recorder(
            store, self.worker_id, stats=self.stats, observers=observers,
            heartbeats=self.heartbeats, running=self._running, inbox=self._inbox,
            job_of=self._job_of,
        )
        # When the tracing API is to be imported by readyq (readyq.tracing), import it
        # now rather than at the first claim, where it would hold the first jobs back
        # for several milliseconds.
        spans_enabled()

    @property
    def heartbeat_interval(self) -> float:
        """Seconds between two heartbeat rounds (see :mod:`readyq.heartbeats`)."""
        return self.heartbeats.interval

    @heartbeat_interval.setter
    def heartbeat_interval(self, seconds: float) -> None:
        self.heartbeats.interval = seconds

    @property
    def listener(self) -> Any:
        """The connection listening for wake-ups, while one runs (see
        :mod:`readyq.wakeup`); None while the worker polls only."""
        return self._listener

    # -- the loop -----------------------------------------------------------------------

    def prepare(self) -> None:
        """Get ready to claim: connect, check the tables, build the loop's statements.

        Connects (detecting the dialect), asks the loop's lock-free questions (is a job
        runnable, is any unfinished, is a lease due for reclaim) and rehearses one
        tick's transaction, a claim of as many jobs as this worker would take and their
        finish, rolled back (``Store.rehearse``): nothing in the database changes. A
        database that cannot be reached, and tables that are missing or do not match
        this readyq, raise here; ``run`` then starts with its SQL built and compiled
        instead of spending its first claim on that (tens of milliseconds per process).
        Optional: ``run`` works without it, and waits out an unreachable database where
        this raises.
        """
        self._connect()
        self.store.runnable_exists(self.types, costed=bool(self.resources))
        self.store.has_unfinished(self.types)
        self.store.reclaim_due()
        cap = current_cap(self.options.concurrency)
        self.store.dry_run_cycle(self._claim_order(cap, self._local_cap(cap)))

    def _claim_order(self, cap: int, limit: int) -> ClaimOrder:
        """This tick's claim: ``cap`` is the global cap read now, ``limit`` the free slots
        of this worker. Claimed jobs start at once (``start``): each is handed to its
        handler in the same tick."""
        return ClaimOrder(
            owner=self.worker_id,
            cap=cap,
            limit=limit,
            lease_ttl=self.options.lease_ttl,
            types=self.types,
            start=self.start_policies,
            rate_limits=self.rate_limits,
            resources=self._resource_view(),
        )

    def _resource_view(self) -> ResourceView | None:
        """Each resource's capacity now and the handlers' costs; None without
        resources (the claim then leaves every job that takes resources alone)."""
        if not self.resources:
            return None
        return ResourceView(
            capacity={name: r.capacity() for name, r in self.resources.items()},
            handler_uses=self.handler_uses,
            handler_text=self.handler_text,
        )

    def _local_cap(self, cap: int) -> int:
        """The most jobs this process may run at once under a global cap of ``cap``."""
        max_running = self.options.max_running
        return cap if max_running is None else min(cap, max_running)

    def stop(self, grace: float = 0.0) -> None:
        """Stop claiming; running jobs get ``grace`` seconds to finish and be recorded.

        The loop keeps heartbeating and recording outcomes meanwhile. Jobs still running
        when the grace period is over are handed back at once: ready again, no attempt
        charged, no lease to wait for (their handlers see ``job.lease_lost``). Calling
        it again can only shorten the grace period.
        """
        until = time.monotonic() + max(0.0, float(grace))
        if self._grace_until is None or until < self._grace_until:
            self._grace_until = until
        self._stop.set()
        self._stopping.set()
        self._inbox.wake.set()

    @property
    def running(self) -> int:
        """Attempts this worker holds a lease for."""
        return len(self._running)

    def run(self, *, until_idle: bool = False, handle_signals: bool = True) -> WorkerStats:
        """Loop until ``stop()`` (or idle, with ``until_idle``); return the counters.

        With ``handle_signals`` and in the main thread, SIGTERM and SIGINT call
        ``stop(shutdown_grace)`` (a second signal ends the grace period at once); the
        previous handlers are restored on return. After SIGTERM it returns; after
        SIGINT (Ctrl-C) it raises KeyboardInterrupt once the worker has stopped, as
        Ctrl-C does everywhere else. With ``freeze_gc`` (the default), the
        objects that exist when it starts are left out of the garbage collector's passes
        until it returns (see ``frozen_heap``).
        """
        log.info("worker %s started (types: %s)", self.worker_id, ", ".join(self.types),
                 extra={"event": "worker_started", "worker_id": self.worker_id,
                        "job_types": list(self.types)})
        previous = install_stop_signals(self._on_stop_signal) if handle_signals else {}
        stop_heartbeats = self._start_heartbeats()
        try:
            with frozen_heap(self.options.freeze_gc):
                self._run_ticks(until_idle)
                self._drain()
        except KeyboardInterrupt:
            log.info("worker %s interrupted", self.worker_id,
                     extra={"event": "worker_interrupted", "worker_id": self.worker_id})
            self._interrupted = True
            self._stop.set()
        finally:
            listener = self._listener
            if listener is not None:
                listener.stop()
            try:
                self._shutdown()
            finally:
                stop_heartbeats()
                restore_signals(previous)
        log.info("worker %s stopped: %s", self.worker_id, self.stats,
                 extra={"event": "worker_stopped", "worker_id": self.worker_id,
                        "stats": asdict(self.stats)})
        if self._interrupted:
            # Ctrl-C stops the worker gracefully, then goes on as Ctrl-C does: the
            # caller's script does not carry on as if the worker had finished.
            raise KeyboardInterrupt
        return self.stats

    def _start_heartbeats(self) -> Callable[[], None]:
        """Start the heartbeat rounds beside the loop; return what stops them."""
        stop = start_thread(self.heartbeats)
        self._beats_inline = False

        def stopped() -> None:
            stop()
            self._beats_inline = True

        return stopped

    def _on_lost(self, entry: Any) -> None:
        """From the heartbeats: ``entry``'s lease is gone or given up."""
        self._gone.append(entry)
        self._inbox.wake.set()

    def _run_ticks(self, until_idle: bool) -> None:
        """Tick until stopped. The database may be unreachable at any moment, start-up
        included: the loop then backs off and tries again (see ``_outage``)."""
        self._listener = None
        listen_at: float | None = 0.0  # when to (re)try setting up LISTEN; None: done
        listen_backoff = 0.0
        while not self._stop.is_set():
            try:
                if not self._connected:
                    self._connect()
                if listen_at is not None and time.monotonic() >= listen_at:
                    # After connecting: the listener needs the dialect and reads its
                    # channel's name from the database. Once started, its connection
                    # reconnects by itself. Until then, and if it cannot be set up at
                    # all, polling does the work.
                    try:
                        self._listener = start_listener(
                            self.store, self.listen, self._inbox.notify
                        )
                        listen_at = None
                    except Exception as exc:
                        if is_transient(exc):
                            listen_backoff = next_backoff(listen_backoff)
                            listen_at = time.monotonic() + listen_backoff
                            retry = f"retrying in {listen_backoff:.1f}s"
                        else:
                            listen_at = None
                            retry = "polling only"
                        log.warning("worker %s: LISTEN set-up failed (%s); %s",
                                    self.worker_id, describe(exc), retry)
                tick = self.run_once()
                idle = until_idle and self._idle(tick)
            except Exception as exc:
                if not self._outlives(exc):
                    raise
                self._stop.wait(self._outage(exc))
                continue
            self._recovered()
            if idle:
                break
            self._sleep(tick)

    def _connect(self) -> None:
        """Reach the database once: detect its dialect and check its version."""
        self.store.dialect  # noqa: B018 - connects on first use
        self._connected = True
        log.info("worker %s connected to %s", self.worker_id, self.store.dialect.database)
        self._warn_of_foreign_types()

    def _warn_of_foreign_types(self) -> None:
        """Warn once of ready jobs of types this queue has no handler for: under a table
        prefix that two applications share, each one's workers would leave the other's
        jobs to it, and run those whose type names match their own handlers'."""
        try:
            foreign = [t for t in self.store.ready_types() if t not in self.handlers]
        except Exception as exc:  # a diagnostic: the loop meets a real problem itself
            log.debug("worker %s: ready types not read (%s)", self.worker_id, describe(exc))
            return
        if foreign:
            log.warning(
                "worker %s: ready jobs of %d type(s) no handler of this queue runs (%s) "
                "under the table prefix %s; if another application uses this prefix, give "
                "each application its own (Queue(url, prefix=...))",
                self.worker_id, len(foreign), one_line(", ".join(foreign[:5])),
                self.store.tables.prefix,
                extra={"event": "foreign_types", "worker_id": self.worker_id,
                       "job_types": foreign},
            )

    def _outlives(self, exc: BaseException) -> bool:
        """Whether a failed tick is waited out (:func:`readyq.transient.waited_out`);
        what is not ends the worker like any other error. (A refused outcome never gets
        here: it fails alone.)"""
        return waited_out(exc, self.store.connected_dialect)

    def _outage(self, exc: BaseException) -> float:
        """Count and log a failed tick; return how long to wait before the next try.

        The wait doubles from 0.1 s up to 5 s, but never exceeds the heartbeat interval
        while jobs run here, so that their leases are extended as soon as the database
        answers again.
        """
        self.stats.db_errors += 1
        if self._outage_since is None:
            self._outage_since = time.monotonic()
            self._outage_failures = 0
        self._outage_failures += 1
        ceiling = BACKOFF_MAX
        if self._running:
            ceiling = min(ceiling, self.heartbeat_interval)
        self._backoff = next_backoff(self._backoff, ceiling)
        if not self._connected:
            what = "cannot reach the database yet"
        elif self._outage_failures == 1:
            what = "database unavailable"
        else:
            what = "database still unavailable"
        log.warning(
            "worker %s: %s (%s); retrying in %.1fs",
            self.worker_id, what, describe(exc), self._backoff,
            extra={"event": "database_error", "worker_id": self.worker_id,
                   "error_type": exc.__class__.__name__, "retry_in": self._backoff},
        )
        return self._backoff

    def _recovered(self) -> None:
        if self._outage_since is None:
            return
        log.warning(
            "worker %s: database available again after %.1fs (%d failed attempt(s))",
            self.worker_id, time.monotonic() - self._outage_since, self._outage_failures,
        )
        self._outage_since = None
        self._outage_failures = 0
        self._backoff = 0.0

    def _on_stop_signal(self, interrupted: bool) -> None:
        """SIGTERM or SIGINT (``interrupted``): stop with the shutdown grace; a second
        signal ends the grace period at once."""
        if interrupted:
            self._interrupted = True
        self.stop(0.0 if self._stop.is_set() else self.options.shutdown_grace)

    def _drain(self) -> None:
        """After ``stop(grace)``: claim nothing, keep heartbeating and recording outcomes
        until every running attempt is recorded or the grace period is over."""
        if self._grace_until is None:
            return
        if self._running:
            log.info("worker %s stopping: %d running job(s) get %.1fs to finish",
                     self.worker_id, len(self._running),
                     max(0.0, self._grace_until - time.monotonic()),
                     extra={"event": "worker_stopping", "worker_id": self.worker_id})
        while self._running or self._inbox.outcomes:
            left = self._grace_until - time.monotonic()
            if left <= 0:
                return
            try:
                self.run_once()
            except Exception as exc:
                if not self._outlives(exc):
                    raise
                self.store.pause(min(self._outage(exc), left))
                continue
            self._recovered()
            if self._running and not self._inbox.outcomes:
                self._inbox.wake.wait(min(self._wait_time(), left))
                self._inbox.wake.clear()

    def _idle(self, tick: TickResult) -> bool:
        if self._running or self._inbox.outcomes or tick.claimed:
            return False
        return not self.store.has_unfinished(self.types)

    def _sleep(self, tick: TickResult) -> None:
        """Wait for finished attempts, the next poll or the next heartbeat.

        Once one attempt has finished, wait up to ``linger`` for the others so that they
        are recorded in one transaction.
        """
        inbox = self._inbox
        if not inbox.outcomes:
            inbox.wake.wait(self._wait_time())
            inbox.wake.clear()
        if inbox.outcomes:
            end = time.monotonic() + self.linger
            while len(inbox.outcomes) < len(self._running) and not self._stop.is_set():
                left = end - time.monotonic()
                if left <= 0:
                    break
                inbox.wake.wait(left)
                inbox.wake.clear()

    def _wait_time(self) -> float:
        firer = self.firer
        if firer is None:
            return self.options.poll_interval
        due = firer.next_due()
        if due is None:
            return self.options.poll_interval
        return max(0.0, min(self.options.poll_interval, due - time.monotonic()))

    def run_once(self) -> TickResult:
        """One tick: heartbeat and reclaim if due, then record outcomes and claim.

        Outcomes and the next claim share one transaction; the jobs claimed are then
        marked running (fenced) and handed to handler threads.
        """
        self.stats.ticks += 1
        beats = 0
        now = time.monotonic()
        if self._beats_inline and self._running and self.heartbeats.due(now):
            beats = self.heartbeats.run_once()
        while self._gone:
            self._lose(self._gone.popleft())
        reclaimed = 0
        if now - self._last_reclaim >= self.options.poll_interval:
            self._last_reclaim = now
            result = self.store.reclaim_expired()
            reclaimed = result.total
            self.stats.reclaimed += reclaimed
            self.stats.timed_out += result.timed_out
            if reclaimed:
                self.observers.emit("on_reclaimed", reclaimed)
        if self.firer is not None and not self._stop.is_set():
            # Before the claim, so that this tick may already claim what fired.
            self.stats.fired += self.firer.run_once(now)
        outcomes: list[Outcome] = []
        while self._inbox.outcomes:
            outcomes.append(self._inbox.outcomes.popleft())
        cap = 0 if self._stop.is_set() else current_cap(self.options.concurrency)
        local = self._local_cap(cap)
        finishing = 0
        running = self._running
        for o in outcomes:
            c = o.job
            e = running.get(c.id)
            if e is not None and e.claimed.lease_token == c.lease_token:
                finishing += 1
        free = max(0, local - (len(self._running) - finishing))
        began = time.perf_counter()
        lease_from = time.monotonic()
        try:
            applied, claimed = self.store.finish_and_claim(
                outcomes, self._claim_order(cap, free), notified=self._inbox.take_notified()
            )
        except BaseException as exc:
            if not outcomes or not self._recorder.is_refusal(exc):
                self._inbox.outcomes.extendleft(reversed(outcomes))
                raise
            # A value one outcome carries was refused: recorded apart, that one alone
            # fails, and the claim waits for the next tick.
            outcomes, applied = self._recorder.record_apart(outcomes)
            claimed = []
        if cap > 0 and free > 0:
            self.observers.emit("on_claim", time.perf_counter() - began, len(claimed))
        self._recorder.record(outcomes, applied)
        if claimed:
            self._launch(claimed, lease_from + self.options.lease_ttl)
        return TickResult(
            finished=len(outcomes),
            claimed=len(claimed),
            reclaimed=reclaimed,
            heartbeats=beats,
            requested=free,
        )

    # -- steps --------------------------------------------------------------------------

    def _launch(self, claimed: list[ClaimedJob], lease_until: float) -> None:
        self.stats.claimed += len(claimed)
        traced = spans_enabled()
        # Asked once per claim, not once per job.
        logged = log.isEnabledFor(logging.INFO)
        observed = bool(self.observers)
        entries = [self._entry(c, traced, logged, observed) for c in claimed]
        self.heartbeats.hold(entries, lease_until)
        self._pool.submit_many(self._execute, entries)

    def _entry(
        self, c: ClaimedJob, traced: bool, logged: bool, observed: bool
    ) -> RunningAttempt:
        """Register a claimed attempt as running here (its handler not yet started, its
        lease not yet held)."""
        # Unpacked once: each field read by name from the NamedTuple is a descriptor
        # call that Python 3.11 does not specialize.
        id_, type_, args_json, attempt, max_attempts, token, group, parent, _ = c
        spec = self.handlers[type_]
        lost, cancelled = LeaseFlag(), Flag()
        unreadable = None
        try:
            args = decode(args_json)
        except (ValueError, TypeError, RecursionError) as exc:
            args, unreadable = None, f"its stored args are not JSON ({one_line(str(exc))})"
        # Positional, in the order of Job's fields: fifteen keywords cost the call more
        # than the dataclass's whole body.
        job = Job(
            id_, type_, args, attempt, max_attempts, group, parent, token, self.worker_id,
            self._job_heartbeat, lost, cancelled, self.spawner, None, None, self._remember,
            None, self._stopping,
        )
        # Positional for the same reason (claimed, job, spec, lost, cancelled,
        # cancel_seen, traced, isolated, unreadable).
        entry = RunningAttempt(c, job, spec, lost, cancelled, False, traced,
                               type_ in self.isolated_types, unreadable)
        running = self._running
        stale = running.get(id_)
        if stale is not None:  # an earlier attempt of this job that timed out here
            self._lose(stale)
        running[id_] = entry
        if logged:  # spare the hot path the extra dict
            log.info("job %d (%s) attempt %d started", c.id, one_line(c.type), c.attempt,
                     extra={**claimed_fields(c), "event": "job_started",
                            "worker_id": self.worker_id})
        if observed:
            self.observers.emit("on_started", job)
        return entry

    def _execute(self, entry: RunningAttempt) -> None:
        began = time.monotonic()
        recorder = self._recorder
        if recorder.cannot_start(entry):
            return
        if entry.traced:
            with attempt_span(entry.claimed) as span:
                outcome = self._attempt(entry, began, span)
        else:  # no span to open: spare every attempt the context manager
            outcome = self._attempt(entry, began, None)
        recorder.report(outcome)

    def _attempt(self, entry: RunningAttempt, began: float, span: Any) -> Outcome:
        """Run the handler; the attempt's outcome, whatever the handler did."""
        job, spec = entry.job, entry.spec
        if entry.isolated:
            return self._children.run(entry, began)
        try:
            prepare_job(job, spec)
            value = asyncio.run(spec.fn(job)) if spec.is_async else spec.fn(job)
            self._settle(job)
            return done_outcome(entry.claimed, value, self.max_payload_bytes, spec,
                                time.monotonic() - began, job.staged_spawns())
        except BaseException as exc:  # a handler's failure, whatever it is, fails it
            self._settle(job)
            return self._recorder.failed(entry, began, span, exc)

    def _settle(self, job: Job) -> None:
        """Close the attempt's memory (its last progress written); never fails it."""
        try:
            job.settle()
        except Exception as exc:
            log.warning("job %d: its last progress was not written (%s)", job.id,
                        describe(exc), extra={"event": "progress_lost", "job_id": job.id})

    def _memory_of(self, job: Job) -> AttemptMemory:
        """The memory of ``job``'s attempt (built at its first use)."""
        return AttemptMemory(self._backend_of(job), job_id=job.id,
                             max_payload_bytes=self.max_payload_bytes)

    def _backend_of(self, job: Job) -> StoreBackend:
        """Where ``job``'s attempt reads and writes its memory: the store, fenced by its
        lease."""
        holder = Holder(job.id, job.attempt, self.worker_id, job.lease_token,
                        self.options.lease_ttl)
        return StoreBackend(self.store, holder)

    def _job_of(self, c: ClaimedJob) -> Job:
        """A Job for the hooks when the attempt's own object is gone."""
        lost, cancelled = Flag(), Flag()
        return Job(
            id=c.id, type=c.type, args=decode_stored(c.args_json), attempt=c.attempt,
            max_attempts=c.max_attempts, group=c.group, parent_id=c.parent_id,
            lease_token=c.lease_token, worker_id=self.worker_id,
            _heartbeat=self._job_heartbeat,
            _lost=lost, _cancelled=cancelled,
        )

    def _lose(self, e: RunningAttempt) -> None:
        if self._running.get(e.claimed.id) is not e:
            return
        del self._running[e.claimed.id]
        self.heartbeats.release((e,))
        self.stats.leases_lost += 1
        e.lost.set()
        log.warning("job %d attempt %d: lease lost; the attempt is abandoned",
                    e.claimed.id, e.claimed.attempt,
                    extra={**claimed_fields(e.claimed), "event": "lease_lost",
                           "worker_id": self.worker_id})

    def _job_heartbeat(self, job: Job, *, lost: Flag, cancelled: Flag) -> bool:
        """``job.heartbeat()``: extend its lease now (see ``Heartbeats.beat``); ``lost``
        and ``cancelled`` are the job's flags."""
        entry = self._running.get(job.id)
        if entry is None or entry.job is not job:  # the attempt is over here
            lost.set()
            raise LeaseLost(f"job {job.id} attempt {job.attempt} lost its lease")
        return self.heartbeats.beat(entry)

    def _shutdown(self) -> None:
        """Record finished attempts and hand back the rest at once, uncharged."""
        self._pool.shutdown()
        try:
            outcomes = list(self._inbox.outcomes)
            self._inbox.outcomes.clear()
            if outcomes:
                try:
                    applied = self.store.record_outcomes(self.worker_id, outcomes)
                except Exception as exc:
                    if not self._recorder.is_refusal(exc):
                        raise
                    outcomes, applied = self._recorder.record_apart(outcomes)
                self._recorder.record(outcomes, applied)
            if self._running:
                releases = [
                    Outcome(job=e.claimed, kind=OutcomeKind.RELEASE)
                    for e in self._running.values()
                ]
                for e in self._running.values():
                    e.lost.set()
                handed = sorted(e.claimed.id for e in self._running.values())
                # Recorded like any outcome: a hand-back the fence refuses (the lease was
                # reclaimed meanwhile) is reported as fenced out, not passed over.
                self._recorder.record(
                    releases, self.store.record_outcomes(self.worker_id, releases)
                )
                log.info("worker %s handed back %d running job(s)", self.worker_id,
                         len(releases),
                         extra={"event": "jobs_handed_back", "worker_id": self.worker_id,
                                "job_ids": handed})
                self._running.clear()
        except Exception as exc:
            if not is_transient(exc):
                raise
            log.warning("worker %s could not hand back its jobs (%s); their leases will "
                        "expire", self.worker_id, describe(exc),
                        extra={"event": "database_error", "worker_id": self.worker_id,
                               "error_type": exc.__class__.__name__})
        finally:
            # Every child ends with the worker: the ones still running a job were handed
            # back above (their leases marked lost), and are killed here if their
            # watcher has not done it yet.
            self._children.shutdown()
