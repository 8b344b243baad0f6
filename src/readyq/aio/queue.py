"""AsyncQueue: the Queue API for asyncio, over an AsyncEngine.

An AsyncQueue holds a :class:`readyq.Queue` on its engine's ``sync_engine`` and runs each
call of it in a greenlet (SQLAlchemy's ``greenlet_spawn``): every check, every unit of
SQL and the one retry loop are the Queue's own, and the driver's I/O is awaited on the
event loop underneath. Only the pauses between retries differ, and the store picks them
from the engine (see :mod:`readyq.store.transactions`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.util.concurrency import greenlet_spawn
from typing_extensions import Unpack

from readyq import engines
from readyq.aio.worker import AsyncWorker
from readyq.config import WorkerOptions, WorkerOptionsDict
from readyq.engines import DEFAULT_IDLE_TRANSACTION_TIMEOUT, DEFAULT_LOCK_TIMEOUT
from readyq.errors import ConfigurationError
from readyq.handlers import HandlerSpec
from readyq.listing import DEFAULT_LIMIT, JobFilter
from readyq.model import (
    Enqueued,
    GroupStats,
    JobInfo,
    JobSpec,
    JobState,
    Pause,
    ProgressStats,
    ResourceStats,
    ScheduleInfo,
)
from readyq.payload import DEFAULT_MAX_PAYLOAD_BYTES
from readyq.planning.backoff import DEFAULT_RETRY_BASE, DEFAULT_RETRY_MAX
from readyq.planning.caps import Limits
from readyq.planning.schedules import DEFAULT_CATCH_UP
from readyq.queue import (
    DEFAULT_GROUP,
    F,
    Queue,
    queue_duration,
)
from readyq.rate_limits import RateLimit
from readyq.reports import AttemptRecord, JobPage, StuckJob
from readyq.resources import Resource
from readyq.schedules import DEFAULT_TZ, JobFactory
from readyq.schema import DEFAULT_MAX_ATTEMPTS, DEFAULT_PREFIX
from readyq.worker import WorkerStats

T = TypeVar("T")


class AsyncQueue:
    """A readyq queue driven from asyncio; see :class:`readyq.Queue` for the semantics.

    ``url`` is an async URL (``sqlite+aiosqlite://``, ``postgresql+asyncpg://``,
    ``postgresql+psycopg://``, ``mysql+asyncmy://``, ``mysql+aiomysql://``) or an
    AsyncEngine. Close it with ``await queue.close()``.
    """

    def __init__(
        self,
        url: str | sa.URL | AsyncEngine,
        *,
        prefix: str = DEFAULT_PREFIX,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        default_max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        engine_options: dict[str, Any] | None = None,
        listen: bool | None = None,
        observers: Iterable[Any] = (),
        idle_transaction_timeout: float | timedelta | None = DEFAULT_IDLE_TRANSACTION_TIMEOUT,
        lock_timeout: float | timedelta | None = DEFAULT_LOCK_TIMEOUT,
    ) -> None:
        idle_timeout = queue_duration(idle_transaction_timeout, "idle_transaction_timeout")
        lock_wait = queue_duration(lock_timeout, "lock_timeout")
        if isinstance(url, AsyncEngine):
            engine, owned = url, False
        elif isinstance(url, sa.Engine):
            raise ConfigurationError(
                "readyq.AsyncQueue takes an AsyncEngine; use readyq.Queue with a "
                "synchronous Engine"
            )
        else:
            parsed = engines.checked_url(url, asynchronous=True)
            options = engines.engine_options(parsed, engine_options)
            try:
                engine, owned = create_async_engine(parsed, **options), True
            except ImportError as exc:
                raise engines.missing_driver(parsed, exc) from None
            engines.install_session_timeouts(engine.sync_engine, idle_timeout, lock_wait)
        self.async_engine = engine
        self._owned = owned
        self._queue = Queue(
            engine.sync_engine,
            prefix=prefix,
            max_payload_bytes=max_payload_bytes,
            default_max_attempts=default_max_attempts,
            listen=listen,
            observers=observers,
        )

    # -- plumbing -------------------------------------------------------------------------

    @property
    def queue(self) -> Queue:
        """The Queue behind this one; call it only from a greenlet (``greenlet_spawn``)."""
        return self._queue

    @property
    def prefix(self) -> str:
        return self._queue.prefix

    @property
    def listen(self) -> bool | None:
        return self._queue.listen

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a call of the Queue behind this one (or of its store) in a greenlet."""
        return await greenlet_spawn(fn, *args, **kwargs)

    async def _in(
        self,
        connection: AsyncConnection | AsyncSession | None,
        fn: Callable[..., T],
        *args: Any,
        **kwargs: Any,
    ) -> T:
        """``fn(...)``, or ``fn(..., connection=<its sync connection>)`` inside the caller's
        transaction."""
        if connection is None:
            return await greenlet_spawn(fn, *args, **kwargs)
        aconn = connection if isinstance(connection, AsyncConnection) else (
            await connection.connection()
        )

        def unit(conn: Connection) -> T:
            return fn(*args, connection=conn, **kwargs)

        return await aconn.run_sync(unit)

    async def database(self) -> str:
        """The database flavour: ``sqlite``, ``postgresql``, ``mysql`` or ``mariadb``."""
        return await greenlet_spawn(lambda: self._queue.database)

    async def create_schema(self) -> None:
        await greenlet_spawn(self._queue.create_schema)

    async def drop_schema(self) -> None:
        await greenlet_spawn(self._queue.drop_schema)

    async def close(self) -> None:
        """Close the queue; dispose of its engine if it made it."""
        await greenlet_spawn(self._queue.close)
        if self._owned:
            await self.async_engine.dispose()

    async def __aenter__(self) -> AsyncQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- observers ------------------------------------------------------------------------

    def add_observer(self, observer: Any) -> None:
        """Add a metrics observer; see :meth:`readyq.Queue.add_observer`."""
        self._queue.add_observer(observer)

    @property
    def observers(self) -> tuple[Any, ...]:
        return self._queue.observers

    async def group_stats(self) -> dict[str, GroupStats]:
        """See :meth:`readyq.Queue.group_stats`."""
        return await greenlet_spawn(self._queue.group_stats)

    async def progress_stats(self) -> dict[str, ProgressStats]:
        """See :meth:`readyq.Queue.progress_stats`."""
        return await greenlet_spawn(self._queue.progress_stats)

    # -- handlers -------------------------------------------------------------------------

    def handler(
        self,
        type: str,
        *,
        timeout: float | timedelta | None = None,
        max_attempts: int | None = None,
        retry_on_timeout: bool = True,
        retry_backoff: float | timedelta = DEFAULT_RETRY_BASE,
        retry_backoff_max: float | timedelta = DEFAULT_RETRY_MAX,
        args_model: type[Any] | None = None,
        result_model: type[Any] | None = None,
        rate_limit: str | RateLimit | None = None,
        isolation: str | None = None,
        on_cancel: str = "cooperative",
        uses: Mapping[str, int] | None = None,
    ) -> Callable[[F], F]:
        """Register a handler (``async def`` or plain); see :meth:`readyq.Queue.handler`
        (no I/O: nothing to await)."""
        return self._queue.handler(
            type, timeout=timeout, max_attempts=max_attempts,
            retry_on_timeout=retry_on_timeout, retry_backoff=retry_backoff,
            retry_backoff_max=retry_backoff_max, args_model=args_model,
            result_model=result_model, rate_limit=rate_limit, isolation=isolation,
            on_cancel=on_cancel, uses=uses,
        )

    @property
    def handlers(self) -> dict[str, HandlerSpec]:
        return self._queue.handlers

    def rate_limit(self, name: str, limit: int, *, per: float | timedelta) -> RateLimit:
        """Define a rate limit (no I/O); see :meth:`readyq.Queue.rate_limit`."""
        return self._queue.rate_limit(name, limit, per=per)

    @property
    def rate_limits(self) -> dict[str, RateLimit]:
        return self._queue.rate_limits

    def resource(self, name: str, *, capacity: Limits) -> Resource:
        """Define a resource (no I/O); see :meth:`readyq.Queue.resource`."""
        return self._queue.resource(name, capacity=capacity)

    @property
    def resources(self) -> dict[str, Resource]:
        return self._queue.resources

    async def resource_stats(self) -> dict[str, ResourceStats]:
        """See :meth:`readyq.Queue.resource_stats`."""
        return await greenlet_spawn(self._queue.resource_stats)

    # -- jobs -----------------------------------------------------------------------------

    async def enqueue(
        self,
        type: str,
        args: Any = None,
        *,
        group: str = DEFAULT_GROUP,
        weight: int = 1,
        priority: int = 0,
        depends_on: Iterable[int | JobInfo] = (),
        parent: int | JobInfo | None = None,
        run_after: datetime | timedelta | float | None = None,
        max_attempts: int | None = None,
        timeout: float | timedelta | None = None,
        unique_key: str | None = None,
        uses: Mapping[str, int] | None = None,
        connection: AsyncConnection | AsyncSession | None = None,
    ) -> int:
        """See :meth:`readyq.Queue.enqueue`; ``connection`` takes an AsyncConnection or
        AsyncSession and enqueues inside its transaction."""
        return await self._in(
            connection, self._queue.enqueue, type, args, group=group, weight=weight,
            priority=priority, depends_on=depends_on, parent=parent, run_after=run_after,
            max_attempts=max_attempts, timeout=timeout, unique_key=unique_key, uses=uses,
        )

    async def enqueue_unique(
        self,
        type: str,
        args: Any = None,
        *,
        unique_key: str,
        group: str = DEFAULT_GROUP,
        weight: int = 1,
        priority: int = 0,
        depends_on: Iterable[int | JobInfo] = (),
        parent: int | JobInfo | None = None,
        run_after: datetime | timedelta | float | None = None,
        max_attempts: int | None = None,
        timeout: float | timedelta | None = None,
        uses: Mapping[str, int] | None = None,
        connection: AsyncConnection | AsyncSession | None = None,
    ) -> Enqueued:
        """See :meth:`readyq.Queue.enqueue_unique`."""
        return await self._in(
            connection, self._queue.enqueue_unique, type, args, unique_key=unique_key,
            group=group, weight=weight, priority=priority, depends_on=depends_on,
            parent=parent, run_after=run_after, max_attempts=max_attempts, timeout=timeout,
            uses=uses,
        )

    async def enqueue_container(
        self,
        type: str,
        args: Any = None,
        *,
        group: str = DEFAULT_GROUP,
        weight: int = 1,
        depends_on: Iterable[int | JobInfo] = (),
        parent: int | JobInfo | None = None,
        connection: AsyncConnection | AsyncSession | None = None,
    ) -> int:
        """See :meth:`readyq.Queue.enqueue_container`."""
        return await self._in(
            connection, self._queue.enqueue_container, type, args, group=group,
            weight=weight, depends_on=depends_on, parent=parent,
        )

    async def enqueue_many(
        self,
        jobs: Iterable[JobSpec],
        *,
        connection: AsyncConnection | AsyncSession | None = None,
    ) -> list[int]:
        """See :meth:`readyq.Queue.enqueue_many`."""
        return await self._in(connection, self._queue.enqueue_many, jobs)

    async def get(self, job_id: int) -> JobInfo:
        """See :meth:`readyq.Queue.get`."""
        return await greenlet_spawn(self._queue.get, job_id)

    async def attempts(self, job_id: int) -> list[AttemptRecord]:
        """See :meth:`readyq.Queue.attempts`."""
        return await greenlet_spawn(self._queue.attempts, job_id)

    async def cancel(self, job_id: int) -> bool:
        """See :meth:`readyq.Queue.cancel`."""
        return await greenlet_spawn(self._queue.cancel, job_id)

    async def close_container(self, job_id: int) -> None:
        """See :meth:`readyq.Queue.close_container`."""
        await greenlet_spawn(self._queue.close_container, job_id)

    def schedule(
        self,
        name: str,
        *,
        job: JobFactory,
        cron: str | None = None,
        every: timedelta | float | None = None,
        tz: str = DEFAULT_TZ,
        catch_up: str = DEFAULT_CATCH_UP,
    ) -> None:
        """See :meth:`readyq.Queue.schedule` (a definition: nothing is written)."""
        self._queue.schedule(name, job=job, cron=cron, every=every, tz=tz, catch_up=catch_up)

    async def pause_schedule(self, name: str) -> None:
        """See :meth:`readyq.Queue.pause_schedule`."""
        await greenlet_spawn(self._queue.pause_schedule, name)

    async def resume_schedule(self, name: str) -> bool:
        """See :meth:`readyq.Queue.resume_schedule`."""
        return await greenlet_spawn(self._queue.resume_schedule, name)

    async def forget_schedule(self, name: str) -> bool:
        """See :meth:`readyq.Queue.forget_schedule`."""
        return await greenlet_spawn(self._queue.forget_schedule, name)

    async def schedules(self) -> list[ScheduleInfo]:
        """See :meth:`readyq.Queue.schedules`."""
        return await greenlet_spawn(self._queue.schedules)

    async def pause(
        self,
        *,
        group: str | None = None,
        type: str | None = None,
        until: datetime | timedelta | float | None = None,
    ) -> None:
        """See :meth:`readyq.Queue.pause`."""
        await greenlet_spawn(self._queue.pause, group=group, type=type, until=until)

    async def resume(self, *, group: str | None = None, type: str | None = None) -> bool:
        """See :meth:`readyq.Queue.resume`."""
        return await greenlet_spawn(self._queue.resume, group=group, type=type)

    async def pauses(self) -> list[Pause]:
        """See :meth:`readyq.Queue.pauses`."""
        return await greenlet_spawn(self._queue.pauses)

    async def stuck(
        self, *, empty_after: float | timedelta = 60.0, limit: int = 100
    ) -> list[StuckJob]:
        """See :meth:`readyq.Queue.stuck`."""
        return await greenlet_spawn(
            self._queue.stuck, empty_after=empty_after, limit=limit
        )

    async def counts(self) -> dict[str, int]:
        """See :meth:`readyq.Queue.counts`."""
        return await greenlet_spawn(self._queue.counts)

    async def jobs(
        self,
        filter: JobFilter | None = None,
        *,
        state: str | JobState | Iterable[str | JobState] | None = None,
        type: str | None = None,
        group: str | None = None,
        parent: int | None = None,
        created_after: datetime | timedelta | None = None,
        created_before: datetime | timedelta | None = None,
        started_after: datetime | timedelta | None = None,
        started_before: datetime | timedelta | None = None,
        finished_after: datetime | timedelta | None = None,
        finished_before: datetime | timedelta | None = None,
        unique_key: str | None = None,
        id: int | Iterable[int] | None = None,
        order: str = "newest",
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
    ) -> JobPage:
        """A page of the jobs that match a filter: see :meth:`readyq.Queue.jobs`."""
        return await greenlet_spawn(
            self._queue.jobs, filter, state=state, type=type, group=group, parent=parent,
            created_after=created_after, created_before=created_before,
            started_after=started_after, started_before=started_before,
            finished_after=finished_after, finished_before=finished_before,
            unique_key=unique_key, id=id, order=order, limit=limit, cursor=cursor,
        )

    async def wait(
        self,
        job_id: int,
        timeout: float | timedelta | None = None,
        *,
        poll_interval: float = 0.1,
    ) -> JobInfo:
        """Wait until the job reaches a terminal state; return it. See
        :meth:`readyq.Queue.wait` (the waits between polls are the event loop's)."""
        return await greenlet_spawn(
            self._queue.wait, job_id, timeout, poll_interval=poll_interval
        )

    # -- workers --------------------------------------------------------------------------

    def worker(self, **options: Unpack[WorkerOptionsDict]) -> AsyncWorker:
        """Build an :class:`~readyq.aio.worker.AsyncWorker`; the options are those of
        :class:`readyq.WorkerOptions` (see :meth:`readyq.Queue.run_worker`)."""
        q = self._queue
        q.check_open()
        return AsyncWorker(
            q.store,
            q.handlers,
            q.hooks,
            q.rate_limits,
            WorkerOptions(**options),
            max_payload_bytes=q.max_payload_bytes,
            listen=q.listen,
            default_max_attempts=q.default_max_attempts,
            resources=q.resources,
            spawner=q.spawn_of,
            schedules=q.defined_schedules,
            batch_of=q.batch_of,
        )

    async def run_worker(
        self, *, until_idle: bool = False, **options: Unpack[WorkerOptionsDict]
    ) -> WorkerStats:
        """Run jobs until stopped (or idle); the options of :meth:`readyq.Queue.run_worker`.

        ``async def`` handlers run as tasks on this event loop, plain ones in threads.
        """
        return await self.worker(**options).run(until_idle=until_idle)

