"""Handlers in child processes: a hard stop at the timeout, and crash containment.

A handler registered with ``isolation="process"`` (or run by a worker whose default it
is) runs in a child process of a pool, while the worker keeps everything else: the
lease, heartbeats, fencing, cancellation and every database write. The child gets the
job over a pipe (its args as JSON), runs the handler and sends back the result as JSON,
or the error with its traceback; ``job.heartbeat()`` in the child asks the worker, which
answers with what it learned (lease lost, cancel asked). No database connection crosses
into the child: it never opens one of readyq's.

Children start with ``forkserver`` on Linux and ``spawn`` elsewhere: never a ``fork`` of
the worker, whose threads and pooled connections a forked copy would share. So a child
imports the handler's module anew: a handler must be a module-level function (found by
its module and name), its args and result JSON, and what it reads from module globals
is whatever importing that module sets up, not the worker's state.

At the deadline the worker sends SIGTERM to the child's process group (the child leads
its own), waits ``kill_grace`` seconds, then sends SIGKILL; the slot is free at once. A
child killed by a signal or exiting on its own fails its attempt, and the worker goes on.
A child dies with its worker: it watches its pipe, and on Linux also asks the kernel to
kill it when the process that started it ends.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from readyq.errors import ConfigurationError

# How often a waiting worker thread looks at its child's memory and at the job's flags.
WATCH_INTERVAL = 0.1
DEFAULT_KILL_GRACE = 5.0
ISOLATIONS = ("thread", "process")


def start_method() -> str:
    """``forkserver`` where it exists (a fresh, single-threaded parent for every child),
    else ``spawn``."""
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


def check_importable(fn: Callable[..., Any], type: str) -> None:
    """Raise ConfigurationError unless a child process can find ``fn`` by its module and
    qualified name (a lambda, a closure or a function of ``__main__`` run as a script
    cannot be)."""
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    target: Any = module
    for part in getattr(fn, "__qualname__", "<lambda>").split("."):
        target = getattr(target, part, None)
    if module is None or target is not fn or module.__name__ == "__main__":
        raise ConfigurationError(
            f"the handler of {type!r} runs in a child process, which imports it by its "
            "module and name: define it at the top level of an importable module (not a "
            "lambda, a nested function or a script's __main__)"
        )


# -- what crosses the pipe -----------------------------------------------------------------


@dataclass(frozen=True)
class JobRequest:
    """A job for a child: the handler (by reference) and what ``Job`` holds."""

    fn: Callable[..., Any]
    is_async: bool
    args_model: Any
    result_model: Any
    max_payload_bytes: int
    id: int
    type: str
    args_json: str
    attempt: int
    max_attempts: int
    group: str
    parent_id: int | None
    lease_token: int
    worker_id: str


@dataclass(frozen=True)
class ChildEnd:
    """How the child's run of a job ended: ``result_json`` when the handler returned a
    storable result, else ``error`` (a traceback) and ``error_type``."""

    result_json: str | None = None
    error: str | None = None
    error_type: str | None = None


# -- the child -----------------------------------------------------------------------------


def _die_with_parent() -> None:
    """On Linux, ask the kernel for SIGKILL when the process that started this one ends
    (``prctl(PR_SET_PDEATHSIG)``); elsewhere the pipe watch alone does it."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(Exception):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def child_main(conn: multiprocessing.connection.Connection) -> None:
    """A child's loop: run the jobs that arrive on ``conn`` until it closes.

    A reader thread owns the receiving side: it hands jobs to this thread, answers the
    handler's heartbeats with the worker's replies and keeps the job's flags current. When
    the pipe closes (the worker is gone) it ends the process at once, whatever the
    handler is doing.
    """
    os.setsid()  # its own process group: the worker signals the handler's children too
    _die_with_parent()
    from readyq.model import Flag, Job
    from readyq.payload import decode, encode
    from readyq.validation import dump_result, parse_args

    jobs: list[JobRequest] = []
    arrived = threading.Condition()
    replies: list[tuple[bool, bool]] = []
    flags = {"lost": Flag(), "cancelled": Flag()}
    send_lock = threading.Lock()

    def read() -> None:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                os._exit(0)  # the worker is gone: no job outlives it
            kind = msg[0]
            if kind == "job":
                with arrived:
                    flags["lost"], flags["cancelled"] = Flag(), Flag()
                    jobs.append(msg[1])
                    arrived.notify()
            elif kind in ("status", "heartbeat"):
                lost, cancelled = msg[1], msg[2]
                if lost:
                    flags["lost"].set()
                if cancelled:
                    flags["cancelled"].set()
                if kind == "heartbeat":
                    with arrived:
                        replies.append((lost, cancelled))
                        arrived.notify_all()

    threading.Thread(target=read, name="readyq-child-reader", daemon=True).start()

    def send(msg: tuple[Any, ...]) -> None:
        with send_lock:
            conn.send(msg)

    def heartbeat(job: Job, **_flags: Flag) -> None:
        # The job's flags (``lost``, ``cancelled``) are set by the reader above.
        from readyq.errors import LeaseLost

        with arrived:
            replies.clear()
            send(("heartbeat",))
            while not replies:
                arrived.wait()
            lost, _ = replies.pop()
        if lost:
            raise LeaseLost(f"job {job.id} attempt {job.attempt} lost its lease")

    while True:
        with arrived:
            while not jobs:
                arrived.wait()
            req = jobs.pop(0)
            lost, cancelled = flags["lost"], flags["cancelled"]
        job = Job(
            id=req.id, type=req.type, args=decode(req.args_json), attempt=req.attempt,
            max_attempts=req.max_attempts, group=req.group, parent_id=req.parent_id,
            lease_token=req.lease_token, worker_id=req.worker_id, _heartbeat=heartbeat,
            _lost=lost, _cancelled=cancelled,
        )
        try:
            if req.args_model is not None:
                job.args = parse_args(req.args_model, job.type, job.args)
            if req.is_async:
                import asyncio

                value = asyncio.run(req.fn(job))
            else:
                value = req.fn(job)
            try:
                value = dump_result(req.result_model, job.type, value)
                end = ChildEnd(result_json=encode(value, max_bytes=req.max_payload_bytes,
                                                  what="result"))
            except Exception as exc:
                end = ChildEnd(
                    error=f"the handler of job type {job.type!r} returned a result that "
                    f"cannot be stored: the {exc}",
                    error_type="InvalidJobResult",
                )
        except BaseException as exc:  # a handler's failure, whatever it is, fails it
            end = ChildEnd(
                error="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
                error_type=type(exc).__name__,
            )
        send(("end", end))


# -- the worker's side -------------------------------------------------------------------------


def describe_exit(code: int | None) -> str:
    """A child's end in words: the signal that killed it, or its exit status."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with status {code}"


def rss_bytes(pid: int) -> int | None:
    """The resident memory of process ``pid`` (Linux's /proc), or None where unknown."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class Child:
    """One child process and the worker's end of its pipe."""

    def __init__(self, context: Any) -> None:
        ours, theirs = context.Pipe(duplex=True)
        # Not a daemon, so that a handler may start processes of its own; the worker ends
        # every child itself (ChildPool.shutdown).
        self.process = context.Process(target=child_main, args=(theirs,), daemon=False,
                                       name="readyq-child")
        self.process.start()
        theirs.close()
        self.conn: multiprocessing.connection.Connection = ours
        self.jobs = 0
        self._ending = threading.Lock()  # a job's watcher and the shutdown may both kill
        self.pid = int(self.process.pid or 0)

    def alive(self) -> bool:
        try:
            return bool(self.process.is_alive())
        except ValueError:  # closed: it was reaped
            return False

    def signal(self, sig: int) -> None:
        """``sig`` to the child's process group, or to the child alone if it has not made
        its group yet."""
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self, grace: float) -> None:
        """SIGTERM to the child's process group, ``grace`` seconds, then SIGKILL; reaped."""
        with self._ending:
            if self.alive():
                self.signal(signal.SIGTERM)
                self.process.join(grace)
            if self.alive():
                self.signal(signal.SIGKILL)
                self.process.join(5.0)
            self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.close()
        with contextlib.suppress(ValueError):  # closed already
            if not self.process.is_alive():
                self.process.join(0)
                self.process.close()

    def stop(self, grace: float) -> None:
        """End an idle child: close its pipe (it exits), then kill what is left."""
        with contextlib.suppress(OSError):
            self.conn.close()
        with self._ending:
            self.process.join(min(grace, 2.0))
        self.kill(grace)


class ChildPool:
    """Reusable child processes for one worker.

    A child is taken for one job at a time and handed back; ``keep`` idle children are
    kept, the others stopped. A child that ran ``max_jobs`` jobs, or was killed, is not
    reused.
    """

    def __init__(
        self,
        *,
        keep: int,
        max_jobs: int | None,
        kill_grace: float,
        preload: tuple[str, ...] = (),
    ) -> None:
        self.keep = max(1, keep)
        self.max_jobs = max_jobs
        self.kill_grace = kill_grace
        self._context = multiprocessing.get_context(start_method())
        if start_method() == "forkserver":
            # Modules the fork server imports once, so that each new child starts with
            # them (readyq's child loop, the handlers' modules) instead of importing them.
            self._context.set_forkserver_preload(["readyq.isolation", *preload])
        self._idle: list[Child] = []
        self._busy: set[Child] = set()
        self._lock = threading.Lock()
        self._closed = False

    def acquire(self) -> Child:
        with self._lock:
            if self._closed:
                raise RuntimeError("the worker's child pool is shut down")
            while self._idle:
                child = self._idle.pop()
                if child.alive():
                    self._busy.add(child)
                    return child
                child.close()
        child = Child(self._context)
        with self._lock:
            self._busy.add(child)
        return child

    def release(self, child: Child, *, healthy: bool) -> None:
        """Hand a child back; one that is not ``healthy`` (killed, crashed, past its job
        limit) is ended instead."""
        with self._lock:
            self._busy.discard(child)
            spent = self.max_jobs is not None and child.jobs >= self.max_jobs
            if healthy and not spent and not self._closed and len(self._idle) < self.keep:
                self._idle.append(child)
                return
        if healthy:
            child.stop(self.kill_grace)
        else:
            child.kill(self.kill_grace)

    def shutdown(self) -> None:
        """End every child: idle ones now, busy ones (their jobs handed back by the
        worker) with SIGTERM and SIGKILL after the grace; all of them reaped."""
        with self._lock:
            self._closed = True
            idle, busy = self._idle, list(self._busy)
            self._idle, self._busy = [], set()
        for child in idle:
            child.stop(self.kill_grace)
        for child in busy:
            child.kill(self.kill_grace)


@dataclass
class Watch:
    """What the worker's thread watches while a child runs a job."""

    deadline: float | None  # monotonic
    max_memory: int | None
    cancelled: Callable[[], bool]
    terminate_on_cancel: bool
    lost: Callable[[], bool]
    heartbeat: Callable[[], tuple[bool, bool]]  # -> (lost, cancelled)


@dataclass(frozen=True)
class RunResult:
    """How a child's run of one job ended, from the worker's side."""

    end: ChildEnd | None = None  # the child's own report
    killed: str | None = None  # why the worker killed it: timeout, memory, cancel, lost
    crashed: str | None = None  # how it died on its own
    healthy: bool = True


def run_in_child(pool: ChildPool, req: JobRequest, watch: Watch) -> RunResult:
    """Run one job in a child of ``pool``; block this thread until it ends."""
    child = pool.acquire()
    child.jobs += 1
    try:
        child.conn.send(("job", req))
    except OSError:
        child.process.join(1.0)
        result = RunResult(crashed=describe_exit(child.process.exitcode), healthy=False)
        pool.release(child, healthy=False)
        return result
    told = (False, False)
    next_memory_check = 0.0
    while True:
        now = time.monotonic()
        wait = WATCH_INTERVAL if watch.deadline is None else max(
            0.0, min(WATCH_INTERVAL, watch.deadline - now))
        try:
            ready = child.conn.poll(wait)
            msg = child.conn.recv() if ready else None
        except (EOFError, OSError):
            child.process.join(1.0)
            result = RunResult(crashed=describe_exit(child.process.exitcode), healthy=False)
            pool.release(child, healthy=False)
            return result
        if msg is not None:
            if msg[0] == "end":
                pool.release(child, healthy=True)
                return RunResult(end=msg[1])
            if msg[0] == "heartbeat":
                lost, cancelled = watch.heartbeat()
                with contextlib.suppress(OSError):
                    child.conn.send(("heartbeat", lost, cancelled))
                told = (lost, cancelled)
            continue
        reason: str | None = None
        if watch.deadline is not None and time.monotonic() >= watch.deadline:
            reason = "timeout"
        elif watch.lost():
            reason = "lost"
        elif watch.terminate_on_cancel and watch.cancelled():
            reason = "cancel"
        elif watch.max_memory is not None and time.monotonic() >= next_memory_check:
            next_memory_check = time.monotonic() + 0.5
            rss = rss_bytes(child.pid)
            if rss is not None and rss > watch.max_memory:
                reason = f"memory:{rss}"
        if reason is not None:
            child.kill(pool.kill_grace)
            pool.release(child, healthy=False)
            return RunResult(killed=reason, healthy=False)
        state = (watch.lost(), watch.cancelled())
        if state != told:  # what the worker learned at its heartbeats, for job.cancelled
            with contextlib.suppress(OSError):
                child.conn.send(("status", *state))
            told = state
