"""A running attempt's memory: durable steps, saved state, progress, upstream results.

:class:`AttemptMemory` is what ``Job.step``, ``Job.state``, ``Job.save_state``,
``Job.progress`` and ``Job.upstream_results`` call. It checks and encodes what the
handler gives, keeps what the attempt already read, throttles progress, and hands each
read or write to a :class:`MemoryBackend`: :class:`StoreBackend` where the worker's store
is at hand (thread and async handlers), the pipe to the worker in a child process
(:mod:`readyq.isolation`). Where the call runs is the worker's choice too: ``run`` for a
plain handler's thread, ``arun`` for a coroutine (see the workers).

The rules a handler can rely on:

* A step whose result was stored is never run again by a later attempt of the job: that
  attempt gets the stored result back (decoded from its JSON, so a tuple comes back a
  list on every attempt alike). A step that was running when its worker died, or whose
  result could not be stored, runs again.
* ``state`` is what the latest ``save_state`` of any attempt stored. Every write is fenced
  by the attempt's lease and extends it; an attempt whose lease is gone stores nothing
  and gets :class:`readyq.LeaseLost`.
* Progress is written at most once a second per attempt; the last value reported is
  written by the time the attempt's end is recorded.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from sqlalchemy.engine import Connection

from readyq.errors import (
    InvalidArgument,
    InvalidJob,
    InvalidJobResult,
    InvalidProgress,
    InvalidState,
    InvalidStep,
    LeaseLost,
    NotInAJob,
)
from readyq.payload import decode, encode
from readyq.schema import key_problem
from readyq.store.memory import Holder, Progress, Upstream

log = logging.getLogger("readyq.worker")

T = TypeVar("T")
# At most one progress write per attempt in this many seconds.
PROGRESS_INTERVAL = 1.0
MAX_PROGRESS_MESSAGE = 500
BY = ("id", "key")


class MemoryBackend(Protocol):
    """Where an attempt's memory is read and written."""

    def load(self) -> tuple[str | None, dict[str, str]]:
        """The saved state and the stored steps, as JSON texts."""

    def save_state(self, state_json: str, connection: Any) -> None: ...

    def store_step(self, name: str, result_json: str, connection: Any) -> None: ...

    def save_progress(self, progress: Progress) -> None: ...

    def upstream(self, include_children: bool) -> list[Upstream]: ...


class StoreBackend:
    """The memory of one attempt, read and written through the worker's store."""

    def __init__(self, store: Any, holder: Holder) -> None:
        self.store = store
        self.holder = holder

    def load(self) -> tuple[str | None, dict[str, str]]:
        return self.store.memory_of(self.holder.job_id)  # type: ignore[no-any-return]

    def save_state(self, state_json: str, connection: Connection | None) -> None:
        self.store.save_state(self.holder, state_json, connection=connection)

    def store_step(self, name: str, result_json: str, connection: Connection | None) -> None:
        self.store.store_step(self.holder, name, result_json, connection=connection)

    def save_progress(self, progress: Progress) -> None:
        self.store.save_progress(self.holder, progress)

    def upstream(self, include_children: bool) -> list[Upstream]:
        return self.store.upstream(  # type: ignore[no-any-return]
            self.holder.job_id, include_children=include_children)

    def check_connection(self, connection: Connection) -> None:
        if not self.store.same_database(connection):
            raise InvalidState(
                "connection reaches another database than the queue's: the checkpoint "
                "could not commit with readyq's tables"
            )


def _direct(fn: Callable[[], T]) -> T:
    return fn()


async def _in_thread(fn: Callable[[], T]) -> T:
    return await asyncio.to_thread(fn)


def check_step_name(name: object) -> str:
    if not isinstance(name, str):
        raise InvalidStep(f"a step name must be a string, not {type(name).__name__}")
    problem = key_problem(name)
    if problem is not None:
        raise InvalidStep(f"step name {name[:60]!r} {problem}")
    return name


def check_progress(current: Any, total: Any, message: Any) -> Progress:
    def number(value: Any, what: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(
            value
        ):
            raise InvalidProgress(f"progress {what} must be a finite number, not {value!r}")
        return float(value)

    cur = number(current, "current")
    tot = None if total is None else number(total, "total")
    if tot is not None and tot <= 0:
        raise InvalidProgress(f"progress total must be positive, not {total!r}")
    if message is not None:
        if not isinstance(message, str):
            raise InvalidProgress(f"a progress message must be text, not {type(message).__name__}")
        # What a database refuses (NUL, a lone surrogate) is replaced; the rest is kept.
        message = message.replace("\x00", "\ufffd").encode(
            "utf-8", "replace").decode("utf-8")[:MAX_PROGRESS_MESSAGE]
    return Progress(cur, tot, message)


class AttemptMemory:
    """The memory of one running attempt (see the module's docstring)."""

    def __init__(
        self,
        backend: MemoryBackend,
        *,
        job_id: int,
        max_payload_bytes: int,
        run: Callable[[Callable[[], Any]], Any] = _direct,
        arun: Callable[[Callable[[], Any]], Coroutine[Any, Any, Any]] = _in_thread,
        connections: bool = True,
    ) -> None:
        self.backend = backend
        self.job_id = job_id
        self.max_payload_bytes = max_payload_bytes
        self.run = run
        self.arun = arun
        # Whether writes may go in the caller's connection (not across a pipe).
        self.connections = connections
        self.over = False
        self.loaded = False
        self.saved = False
        self.state_json: str | None = None
        self.steps: dict[str, str] = {}
        self.names: set[str] = set()
        self.pending: Progress | None = None
        self.written_at = -math.inf
        self.tasks: set[asyncio.Task[Any]] = set()

    # -- checks ---------------------------------------------------------------------------

    def live(self) -> None:
        if self.over:
            raise NotInAJob(f"job {self.job_id}'s attempt has ended: its memory is closed")

    def _connection(self, connection: Any) -> Any:
        if connection is None:
            return None
        if not self.connections:
            raise InvalidState(
                "a handler in a child process cannot write in its own connection: "
                "the worker writes for it (call without connection=)"
            )
        from sqlalchemy.orm import Session

        if isinstance(connection, Session):
            connection = connection.connection()
        if not isinstance(connection, Connection):
            raise InvalidState(
                f"connection must be a SQLAlchemy Connection or Session, not {connection!r}"
            )
        check = getattr(self.backend, "check_connection", None)
        if check is not None:
            check(connection)
        return connection

    def _encode_state(self, value: Any) -> str:
        try:
            return encode(value, max_bytes=self.max_payload_bytes, what="state")
        except InvalidJob as exc:
            raise InvalidState(f"job {self.job_id}: the {exc}") from None

    def _encode_step(self, name: str, value: Any) -> str:
        try:
            return encode(value, max_bytes=self.max_payload_bytes, what="result")
        except InvalidJob as exc:
            raise InvalidJobResult(
                f"step {name!r} of job {self.job_id} returned a result that cannot be "
                f"stored: the {exc}"
            ) from None

    def _claim_name(self, name: object) -> str:
        name = check_step_name(name)
        if name in self.names:
            raise InvalidStep(f"step {name!r} was already run in this attempt")
        self.names.add(name)
        return name

    def _adopt(self, loaded: tuple[str | None, dict[str, str]]) -> None:
        if not self.loaded:
            # What this attempt saved or stored meanwhile is newer than what was read.
            if not self.saved:
                self.state_json = loaded[0]
            self.steps = {**loaded[1], **self.steps}
            self.loaded = True

    # -- state ----------------------------------------------------------------------------

    def state(self) -> Any:
        self.live()
        if not self.loaded:
            self._adopt(self.run(self.backend.load))
        return decode(self.state_json)

    async def astate(self) -> Any:
        self.live()
        if not self.loaded:
            self._adopt(await self.arun(self.backend.load))
        return decode(self.state_json)

    def save_state(self, value: Any, connection: Any = None) -> None:
        self.live()
        text = self._encode_state(value)
        conn = self._connection(connection)
        if conn is not None:
            self.backend.save_state(text, conn)
        else:
            self.run(lambda: self.backend.save_state(text, None))
        self.state_json, self.saved = text, True

    async def asave_state(self, value: Any, connection: Any = None) -> None:
        self.live()
        text = self._encode_state(value)
        if connection is not None:
            await _in_user_connection(
                connection, lambda c: self.backend.save_state(text, self._connection(c)))
        else:
            await self.arun(lambda: self.backend.save_state(text, None))
        self.state_json, self.saved = text, True

    # -- steps ----------------------------------------------------------------------------

    def step(self, name: Any, fn: Callable[..., Any], args: tuple[Any, ...],
             kwargs: dict[str, Any], connection: Any = None) -> Any:
        self.live()
        name = self._claim_name(name)
        if not self.loaded:
            self._adopt(self.run(self.backend.load))
        if name in self.steps:
            return decode(self.steps[name])
        text = self._encode_step(name, fn(*args, **kwargs))
        self.live()
        conn = self._connection(connection)
        if conn is not None:
            self.backend.store_step(name, text, conn)
        else:
            self.run(lambda: self.backend.store_step(name, text, None))
        self.steps[name] = text
        return decode(text)

    async def astep(self, name: Any, fn: Callable[..., Any], args: tuple[Any, ...],
                    kwargs: dict[str, Any], connection: Any = None) -> Any:
        self.live()
        name = self._claim_name(name)
        if not self.loaded:
            self._adopt(await self.arun(self.backend.load))
        if name in self.steps:
            return decode(self.steps[name])
        value = fn(*args, **kwargs)
        if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
            value = await value
        text = self._encode_step(name, value)
        self.live()
        if connection is not None:
            await _in_user_connection(
                connection, lambda c: self.backend.store_step(name, text, self._connection(c)))
        else:
            await self.arun(lambda: self.backend.store_step(name, text, None))
        self.steps[name] = text
        return decode(text)

    # -- progress -------------------------------------------------------------------------

    def progress(self, current: Any, total: Any, message: Any) -> None:
        self.live()
        self.pending = check_progress(current, total, message)
        if time.monotonic() - self.written_at < PROGRESS_INTERVAL:
            return
        self.written_at = time.monotonic()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None:
            self.run(self._write_progress)
        else:  # a coroutine's call: the write must not block its event loop
            task: asyncio.Task[Any] = loop.create_task(self.arun(self._write_progress))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    def _write_progress(self) -> None:
        p, self.pending = self.pending, None
        if p is None:
            return
        try:
            self.backend.save_progress(p)
        except LeaseLost:
            pass  # the worker learns it at its heartbeat; the handler reads job.lease_lost
        except Exception as exc:  # best effort: the next report or the end writes it
            if self.pending is None:
                self.pending = p
            log.debug("job %d: progress not written (%s)", self.job_id, exc)

    def settle(self) -> None:
        """Write the last progress reported, if it is not written yet (the attempt ends)."""
        if self.pending is not None:
            self.run(self._write_progress)
        self.over = True

    async def asettle(self) -> None:
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.pending is not None:
            await self.arun(self._write_progress)
        self.over = True

    # -- upstream results -----------------------------------------------------------------

    def upstream_results(self, by: str, include_children: bool) -> dict[Any, Any]:
        self.live()
        _check_by(by)
        return _results(self.run(lambda: self.backend.upstream(include_children)), by)

    async def aupstream_results(self, by: str, include_children: bool) -> dict[Any, Any]:
        self.live()
        _check_by(by)
        return _results(await self.arun(lambda: self.backend.upstream(include_children)), by)


def _check_by(by: object) -> None:
    if by not in BY:
        raise InvalidArgument(f"by must be 'id' or 'key', not {by!r}")


def _results(rows: list[Upstream], by: str) -> dict[Any, Any]:
    """Results by id, or by batch key where the job had one (its id otherwise)."""
    out: dict[Any, Any] = {}
    for u in rows:
        name: Any = u.id if by == "id" or u.key is None else u.key
        if name in out:
            raise InvalidArgument(
                f"two upstream jobs have the key {name!r}: read them by='id'"
            )
        out[name] = decode(u.result)
    return out


async def _in_user_connection(connection: Any, write: Callable[[Any], None]) -> None:
    """Run ``write`` with the caller's connection: an AsyncConnection (or AsyncSession)
    lends its sync connection, in the caller's transaction; a sync one is used as is."""
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    if isinstance(connection, AsyncSession):
        connection = await connection.connection()
    if isinstance(connection, AsyncConnection):
        await connection.run_sync(write)
    else:
        write(connection)
