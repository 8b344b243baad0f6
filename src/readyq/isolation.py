"""Handlers in child processes: a hard stop at the timeout, and crash containment.

A handler registered with ``isolation="process"`` (or run by a worker whose default it
is) runs in a child process of a pool, while the worker keeps everything else: the
lease, heartbeats, fencing, cancellation and every database write. The child gets the
job over a pipe (its args as JSON), runs the handler and sends back the result as JSON,
or the error with its traceback; ``job.heartbeat()`` in the child asks the worker, which
answers with what it learned (lease lost, cancel asked, graceful stop begun). The job's
memory (``job.step``, ``job.state``, ``job.save_state``, ``job.progress``,
``job.upstream_results``) is read and written by the worker for the child, each call a
request across the pipe (see :mod:`readyq.memory_relay`); ``connection=`` is refused
there. No database connection crosses into the child: it never opens one of readyq's.

Children are forked by the worker's spawner (:mod:`readyq.spawner`), a fresh process
that imports readyq and the handlers' modules and nothing else: a child never runs the
worker's ``__main__``, so a worker script needs no ``if __name__ == "__main__":`` guard
for its children's sake. A child imports the handler's module anew: a handler must be
a module-level function of an importable module (found by its module and name), its
args and result JSON, and what it reads from module globals is whatever importing that
module sets up, not the worker's state. POSIX only: where ``os.fork`` does not exist
(Windows), ``isolation="process"`` is refused.

At the deadline the worker sends SIGTERM to the child, its process group and every
process below it, waits ``kill_grace`` seconds, then sends SIGKILL to all of them; the
slot is free at once. When the lease is lost the child gets SIGKILL at once, without a
grace: it must be gone before another worker can run the job again. A child killed by a
signal or exiting on its own fails its attempt, and the worker goes on. No child
outlives its worker: the spawner kills every process below it when the worker ends,
however it ends, and a child dies with the spawner (see :mod:`readyq.spawner` for what
each platform covers).

Messages from the child are data, never code: JSON, of a bounded length, each carrying
the token of the job it answers for. An answer for another job (a handler that wrote to
the pipe itself, a thread that outlived its job) is dropped, and the child is not
reused; one that is not readyq's at all fails the attempt and the child is killed.
"""

from __future__ import annotations

import contextlib
import functools
import json
import multiprocessing.connection
import os
import secrets
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from readyq.errors import ConfigurationError
from readyq.memory_relay import Answer, BadRequest, parse_request
from readyq.spawner import Spawner, kill_tree

# How often a waiting worker thread looks at its child's memory and at the job's flags,
# and, while the child waits for a heartbeat's answer, for that answer.
WATCH_INTERVAL = 0.1
ANSWER_POLL = 0.01
DEFAULT_KILL_GRACE = 5.0
ISOLATIONS = ("thread", "process")
# What each child runs (see :func:`child_main`).
CHILD_ENTRY = "readyq.isolation:child_main"
# What a child's message may hold besides a result (its error text, its framing).
MESSAGE_SLACK = 1 << 20


def check_isolation_possible(type: str) -> None:
    """Raise ConfigurationError where children cannot be forked (no ``os.fork``)."""
    if not hasattr(os, "fork"):
        raise ConfigurationError(
            f"the handler of {type!r} asks for isolation='process', which needs a POSIX "
            "system (its children are forked); run it with isolation='thread' here"
        )


def check_handler_shape(fn: Callable[..., Any], type: str) -> None:
    """At registration: raise ConfigurationError for a handler a child could never find
    by its module and name (a lambda, a nested function, a function of ``__main__``).

    Whether the module really holds the function is checked when a worker starts
    (:func:`check_importable`): under ``@queue.handler(...)`` the module has not bound
    the name yet.
    """
    check_isolation_possible(type)
    qualname = getattr(fn, "__qualname__", "<lambda>")
    module = getattr(fn, "__module__", None)
    if not module or module == "__main__" or "<" in qualname:
        raise ConfigurationError(_not_importable(type))


def check_importable(fn: Callable[..., Any], type: str) -> None:
    """Raise ConfigurationError unless a child process can find ``fn`` by its module and
    qualified name (a lambda, a closure or a function of ``__main__`` cannot be)."""
    check_handler_shape(fn, type)
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    target: Any = module
    for part in getattr(fn, "__qualname__", "<lambda>").split("."):
        target = getattr(target, part, None)
    if module is None or target is not fn:
        raise ConfigurationError(_not_importable(type))


def _not_importable(type: str) -> str:
    return (
        f"the handler of {type!r} runs in a child process, which imports it by its "
        "module and name: define it at the top level of an importable module (not a "
        "lambda, a nested function or a script's __main__)"
    )


# -- what crosses the pipe -----------------------------------------------------------------


@dataclass(frozen=True)
class JobRequest:
    """A job for a child: the handler (by reference) and what ``Job`` holds. ``token``
    is drawn for this run: the child's answers carry it."""

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
    token: str = field(default_factory=lambda: secrets.token_hex(8))


@dataclass(frozen=True)
class ChildEnd:
    """How the child's run of a job ended: ``result_json`` when the handler returned a
    storable result, else ``error`` (a traceback) and ``error_type``."""

    result_json: str | None = None
    error: str | None = None
    error_type: str | None = None


class BadMessage(Exception):
    """A child's message that is not one readyq's child sends."""


def parse_answer(data: bytes, max_payload_bytes: int) -> dict[str, Any]:
    """A child's message, checked: a JSON object with a string ``token`` and ``kind``
    (``end``, ``heartbeat`` or ``memory``), an end's fields strings or null, a memory
    request as :func:`readyq.memory_relay.parse_request` wants it. Raises BadMessage."""
    try:
        msg = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadMessage(f"not JSON ({exc})") from None
    if (
        not isinstance(msg, dict)
        or not isinstance(msg.get("token"), str)
        or msg.get("kind") not in ("end", "heartbeat", "memory")
    ):
        raise BadMessage("not an answer of a readyq child")
    if msg["kind"] == "memory":
        try:
            return parse_request(msg, max_payload_bytes)
        except BadRequest as exc:
            raise BadMessage(str(exc)) from None
    if msg["kind"] == "end":
        for key in ("result_json", "error", "error_type"):
            if not isinstance(msg.get(key), (str, type(None))):
                raise BadMessage(f"its {key} is not text")
        if msg.get("result_json") is None and msg.get("error") is None:
            raise BadMessage("an end with neither a result nor an error")
        if msg.get("result_json") is not None:
            try:
                json.loads(msg["result_json"])
            except ValueError:
                raise BadMessage("its result is not JSON") from None
    return msg


# -- the child -----------------------------------------------------------------------------


def child_main(conn: multiprocessing.connection.Connection) -> None:
    """A child's loop: run the jobs that arrive on ``conn`` until it closes.

    A reader thread owns the receiving side: it hands jobs to this thread, answers the
    handler's heartbeats and memory requests with the worker's replies and keeps the
    job's flags current. When
    the pipe closes (the worker is gone) it ends the process at once, whatever the
    handler is doing. Answers go back as JSON, with the job's token.
    """
    from readyq.checkpoints import AttemptMemory
    from readyq.memory_relay import PipeBackend
    from readyq.model import Flag, Job
    from readyq.payload import decode, encode
    from readyq.validation import dump_result, parse_args

    jobs: list[JobRequest] = []
    arrived = threading.Condition()
    replies: list[bool] = []
    memory_replies: list[Answer] = []
    flags = {"lost": Flag(), "cancelled": Flag(), "stopping": Flag()}
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
                    flags["stopping"] = Flag()
                    jobs.append(msg[1])
                    arrived.notify()
            elif kind in ("status", "heartbeat"):
                lost, cancelled = msg[1], msg[2]
                if lost:
                    flags["lost"].set()
                if cancelled:
                    flags["cancelled"].set()
                if kind == "status" and msg[3]:
                    flags["stopping"].set()
                if kind == "heartbeat":
                    with arrived:
                        replies.append(bool(msg[3]))
                        arrived.notify_all()
            elif kind == "memory":
                with arrived:
                    memory_replies.append((msg[1], msg[2], msg[3]))
                    arrived.notify_all()

    threading.Thread(target=read, name="readyq-child-reader", daemon=True).start()

    def send(token: str, kind: str, **fields: Any) -> None:
        with send_lock:
            conn.send_bytes(json.dumps({"token": token, "kind": kind, **fields}).encode())

    def heartbeat(job: Job, **_flags: Flag) -> bool:
        # The job's flags (``lost``, ``cancelled``) are set by the reader above, before
        # the answer arrives.
        from readyq.errors import LeaseLost

        with arrived:
            replies.clear()
            send(current["token"], "heartbeat")
            while not replies:
                arrived.wait()
            extended = replies.pop()
        if job.lease_lost:
            raise LeaseLost(f"job {job.id} attempt {job.attempt} lost its lease")
        return extended

    def ask(token: str, op: str, fields: dict[str, Any]) -> Answer:
        # One request at a time (PipeBackend's lock): the next reply is this one's.
        with arrived:
            memory_replies.clear()
            send(token, "memory", op=op, **fields)
            while not memory_replies:
                arrived.wait()
            return memory_replies.pop()

    def remember(pipe: PipeBackend, req: JobRequest) -> Callable[[Job], AttemptMemory]:
        def build(job: Job) -> AttemptMemory:
            return AttemptMemory(pipe, job_id=job.id,
                                 max_payload_bytes=req.max_payload_bytes, connections=False)
        return build

    current = {"token": ""}
    while True:
        with arrived:
            while not jobs:
                arrived.wait()
            req = jobs.pop(0)
            lost, cancelled, stopping = flags["lost"], flags["cancelled"], flags["stopping"]
        current["token"] = req.token
        pipe = PipeBackend(functools.partial(ask, req.token))
        job = Job(
            id=req.id, type=req.type, args=decode(req.args_json), attempt=req.attempt,
            max_attempts=req.max_attempts, group=req.group, parent_id=req.parent_id,
            lease_token=req.lease_token, worker_id=req.worker_id, _heartbeat=heartbeat,
            _lost=lost, _cancelled=cancelled, _remember=remember(pipe, req),
            _stopping=stopping, _stage=pipe.spawn,
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
        # Its last progress is written before its end is recorded, as in a thread.
        with contextlib.suppress(Exception):
            job.settle()
        # A message JSON can carry whatever the handler's error holds.
        error = None if end.error is None else end.error.encode(
            "utf-8", "backslashreplace").decode("utf-8")
        send(req.token, "end", result_json=end.result_json, error=error,
             error_type=end.error_type)


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
    """One child process, forked by the spawner, and the worker's end of its pipe."""

    def __init__(self, spawner: Spawner) -> None:
        ours, theirs = socket.socketpair()
        try:
            self.pid = spawner.fork(theirs.fileno())
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.spawner = spawner
        self.conn = multiprocessing.connection.Connection(ours.detach())
        self.jobs = 0
        # Whether it may run another job (False once it sent an answer for a job it is
        # not running: what it says can no longer be matched to a job).
        self.trusted = True
        self._ending = threading.Lock()  # a job's watcher and the shutdown may both kill

    @property
    def exitcode(self) -> int | None:
        return self.spawner.exit_code(self.pid)

    def alive(self) -> bool:
        return self.exitcode is None

    def wait(self, timeout: float) -> int | None:
        return self.spawner.wait(self.pid, timeout)

    def signal(self, sig: int) -> None:
        """``sig`` to the child, its process group and every process below it."""
        if self.alive():
            kill_tree(self.pid, sig)

    def kill(self, grace: float) -> None:
        """SIGTERM to the child's tree, ``grace`` seconds, then SIGKILL to what is left."""
        with self._ending:
            if grace > 0 and self.alive():
                self.signal(signal.SIGTERM)
                self.wait(grace)
            kill_tree(self.pid, signal.SIGKILL)
            self.wait(5.0)
            self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.close()

    def stop(self, grace: float) -> None:
        """End an idle child: close its pipe (it exits), then kill what is left."""
        self.close()
        with self._ending:
            self.wait(min(grace, 2.0))
        self.kill(grace)


class ChildPool:
    """Reusable child processes for one worker, forked by a spawner of its own.

    A child is taken for one job at a time and handed back; ``keep`` idle children are
    kept, the others stopped. A child that ran ``max_jobs`` jobs, was killed, or is no
    longer trusted is not reused.
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
        # Modules the spawner imports once, so that each new child starts with them
        # (readyq's child loop, the handlers' modules) instead of importing them.
        self._preload = ("readyq.isolation", *preload)
        self._spawner: Spawner | None = None
        self._idle: list[Child] = []
        self._busy: set[Child] = set()
        self._lock = threading.Lock()
        self._closed = False

    def _spawner_now(self) -> Spawner:
        with self._lock:
            if self._closed:
                raise RuntimeError("the worker's child pool is shut down")
            if self._spawner is None:
                self._spawner = Spawner(CHILD_ENTRY, self._preload)
            return self._spawner

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
        child = Child(self._spawner_now())
        with self._lock:
            self._busy.add(child)
        return child

    def release(self, child: Child, *, healthy: bool) -> None:
        """Hand a child back; one that is not ``healthy`` (killed, crashed, past its job
        limit, not trusted) is ended instead."""
        healthy = healthy and child.trusted
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
        worker) with SIGTERM and SIGKILL after the grace; then the spawner, which kills
        whatever is left below it."""
        with self._lock:
            self._closed = True
            idle, busy = self._idle, list(self._busy)
            self._idle, self._busy = [], set()
            spawner, self._spawner = self._spawner, None
        for child in idle:
            child.stop(self.kill_grace)
        for child in busy:
            child.kill(self.kill_grace)
        if spawner is not None:
            spawner.close()


@dataclass
class Watch:
    """What the worker's thread watches while a child runs a job."""

    deadline: float | None  # monotonic
    max_memory: int | None
    cancelled: Callable[[], bool]
    terminate_on_cancel: bool
    lost: Callable[[], bool]
    # Asks the worker's heartbeats for a round; returns the poll of its answer (None
    # while there is none, else whether the lease was extended). Never blocks, so the
    # deadline is kept whatever the database does.
    ask_heartbeat: Callable[[], Callable[[], bool | None]]
    # ``job.stopping``: whether the worker began a graceful stop.
    stopping: Callable[[], bool] = field(default=lambda: False)
    # Starts a checked memory request of the child (see readyq.memory_relay.start);
    # returns the poll of its answer. Never blocks, as ask_heartbeat. None: the job has
    # no memory here, and the child is told NotInAJob.
    memory: Callable[[dict[str, Any]], Callable[[], Answer | None]] | None = None


@dataclass(frozen=True)
class RunResult:
    """How a child's run of one job ended, from the worker's side."""

    end: ChildEnd | None = None  # the child's own report
    killed: str | None = None  # why the worker killed it: timeout, memory, cancel, lost
    crashed: str | None = None  # how it died on its own, or what it sent that was wrong
    healthy: bool = True


def _crashed(pool: ChildPool, child: Child, how: str | None = None) -> RunResult:
    if how is None:
        how = describe_exit(child.wait(1.0))
    pool.release(child, healthy=False)
    return RunResult(crashed=how, healthy=False)


def _no_memory() -> Answer:
    return (None, "NotInAJob", "this job has no memory in its child process")


def run_in_child(pool: ChildPool, req: JobRequest, watch: Watch) -> RunResult:
    """Run one job in a child of ``pool``; block this thread until it ends."""
    child = pool.acquire()
    child.jobs += 1
    try:
        child.conn.send(("job", req))
    except OSError:
        return _crashed(pool, child)
    # A result, state or step result is JSON text inside a JSON message: escaped there,
    # one UTF-8 byte of it can take up to three (é, two bytes, is sent as \u00e9).
    limit = req.max_payload_bytes * 3 + MESSAGE_SLACK
    told = (False, False, False)
    next_memory_check = 0.0
    answer: Callable[[], bool | None] | None = None  # of the child's heartbeat
    recall: Callable[[], Answer | None] | None = None  # of its memory request
    while True:
        now = time.monotonic()
        interval = WATCH_INTERVAL if answer is None and recall is None else ANSWER_POLL
        wait = interval if watch.deadline is None else max(
            0.0, min(interval, watch.deadline - now))
        try:
            data = child.conn.recv_bytes(limit) if child.conn.poll(wait) else None
        except (EOFError, OSError) as exc:
            # OSError also for a message over the limit: nothing of readyq's is that long.
            how = None if isinstance(exc, EOFError) else f"sent a message over {limit} bytes"
            return _crashed(pool, child, how and f"{how}: killed")
        if data is not None:
            try:
                msg = parse_answer(data, req.max_payload_bytes)
            except BadMessage as exc:
                child.kill(0.0)
                return _crashed(pool, child, f"sent a message readyq does not accept ({exc})"
                                ": killed")
            if msg["token"] != req.token:
                # An answer for another job: dropped, and the child retired after this one.
                child.trusted = False
                continue
            if msg["kind"] == "end":
                pool.release(child, healthy=True)
                return RunResult(end=ChildEnd(result_json=msg.get("result_json"),
                                              error=msg.get("error"),
                                              error_type=msg.get("error_type")))
            if msg["kind"] == "memory":
                if recall is not None:  # readyq's child waits for each answer
                    child.kill(0.0)
                    return _crashed(pool, child, "sent a memory request before the last "
                                    "was answered: killed")
                recall = (watch.memory(msg) if watch.memory is not None else _no_memory)
                continue
            if answer is None:
                answer = watch.ask_heartbeat()
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
            # A child whose lease is lost is killed without a grace: it must be gone
            # before another worker can start the job again.
            child.kill(0.0 if reason == "lost" else pool.kill_grace)
            pool.release(child, healthy=False)
            return RunResult(killed=reason, healthy=False)
        if recall is not None and (got := recall()) is not None:
            recall = None
            with contextlib.suppress(OSError):
                child.conn.send(("memory", *got))
        if answer is not None and (extended := answer()) is not None:
            answer = None
            told = (watch.lost(), watch.cancelled(), told[2])
            with contextlib.suppress(OSError):
                child.conn.send(("heartbeat", *told[:2], extended))
            continue
        state = (watch.lost(), watch.cancelled(), watch.stopping())
        if state != told:  # what the worker learned at its heartbeats, for job.cancelled
            with contextlib.suppress(OSError):
                child.conn.send(("status", *state))
            told = state
