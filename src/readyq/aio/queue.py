"""AsyncQueue: the Queue API for asyncio, over an AsyncEngine.

Validation, the handler registry and every unit of SQL are the sync Queue's and Store's:
an AsyncQueue holds a Queue (on the async engine's ``sync_engine``) whose store runs its
transactions through an :class:`~readyq.aio.store.AsyncStore`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, create_async_engine

from readyq.aio.store import AsyncStore
from readyq.dialects import dialect_class
from readyq.model import Enqueued, GroupStats, JobInfo
from readyq.payload import DEFAULT_MAX_PAYLOAD_BYTES
from readyq.planning.limits import Limits
from readyq.queue import DEFAULT_MAX_ATTEMPTS, HandlerSpec, Queue, _duration
from readyq.rates import RateLimit
from readyq.schema import DEFAULT_PREFIX
from readyq.sessions import DEFAULT_IDLE_TRANSACTION_TIMEOUT, install_session_timeouts
from readyq.wakeup import install_notify
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
    ) -> None:
        idle_timeout = _duration(idle_transaction_timeout, "idle_transaction_timeout")
        if isinstance(url, AsyncEngine):
            engine, owned = url, False
        else:
            parsed = sa.make_url(url)
            options = dict(dialect_class(parsed.get_backend_name()).engine_options())
            options.update(engine_options or {})
            engine, owned = create_async_engine(parsed, **options), True
            install_session_timeouts(engine.sync_engine, idle_timeout)
        self.async_engine = engine
        self._owned = owned
        # Validation and handlers only: its store is replaced by the async one below.
        self._queue = Queue(
            engine.sync_engine,
            prefix=prefix,
            max_payload_bytes=max_payload_bytes,
            default_max_attempts=default_max_attempts,
            listen=listen,
            observers=observers,
        )
        self._astore = AsyncStore(engine, prefix, owned=owned)
        self._queue._store = self._astore.sync
        install_notify(self._astore.sync, listen)

    # -- plumbing -------------------------------------------------------------------------

    @property
    def queue(self) -> Queue:
        """The sync Queue behind this one (validation, handlers)."""
        return self._queue

    @property
    def prefix(self) -> str:
        return self._queue.prefix

    @property
    def listen(self) -> bool | None:
        return self._queue.listen

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        self._queue._check_open()
        return await self._astore.call(fn, *args, **kwargs)

    async def _in(self, connection: AsyncConnection | AsyncSession, fn: Callable[..., T],
                  *args: Any, **kwargs: Any) -> T:
        """Run ``fn(..., connection=<sync conn>)`` inside the caller's transaction."""
        self._queue._check_open()
        await self._astore.ensure()
        if isinstance(connection, AsyncConnection):
            aconn = connection
        else:
            aconn = await connection.connection()

        def unit(conn: Connection) -> T:
            return fn(*args, connection=conn, **kwargs)

        return await aconn.run_sync(unit)

    async def database(self) -> str:
        return (await self._astore.ensure()).name

    async def create_schema(self) -> None:
        await self._call(self._queue.create_schema)

    async def drop_schema(self) -> None:
        await self._call(self._queue.drop_schema)

    async def close(self) -> None:
        """Close the queue; dispose of its engine if it made it."""
        self._queue._closed = True
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
        return await self._call(self._queue.group_stats)

    # -- handlers -------------------------------------------------------------------------

    def handler(self, *args: Any, **kwargs: Any) -> Any:
        """Register a handler (``async def`` or plain); see :meth:`readyq.Queue.handler`."""
        return self._queue.handler(*args, **kwargs)

    @property
    def handlers(self) -> dict[str, HandlerSpec]:
        return self._queue.handlers

    def rate_limit(self, name: str, limit: int, *, per: float | timedelta) -> RateLimit:
        """Define a rate limit (no I/O); see :meth:`readyq.Queue.rate_limit`."""
        return self._queue.rate_limit(name, limit, per=per)

    @property
    def rate_limits(self) -> dict[str, RateLimit]:
        return self._queue.rate_limits

    # -- jobs -----------------------------------------------------------------------------

    async def enqueue(self, *args: Any, connection: AsyncConnection | AsyncSession | None = None,
                      **kwargs: Any) -> int:
        """See :meth:`readyq.Queue.enqueue`; ``connection`` takes an AsyncConnection or
        AsyncSession and enqueues inside its transaction."""
        if connection is not None:
            return await self._in(connection, self._queue.enqueue, *args, **kwargs)
        return await self._call(self._queue.enqueue, *args, **kwargs)

    async def enqueue_unique(
        self, *args: Any, connection: AsyncConnection | AsyncSession | None = None,
        **kwargs: Any,
    ) -> Enqueued:
        """See :meth:`readyq.Queue.enqueue_unique`."""
        if connection is not None:
            return await self._in(connection, self._queue.enqueue_unique, *args, **kwargs)
        return await self._call(self._queue.enqueue_unique, *args, **kwargs)

    async def enqueue_container(
        self, *args: Any, connection: AsyncConnection | AsyncSession | None = None, **kwargs: Any
    ) -> int:
        if connection is not None:
            return await self._in(connection, self._queue.enqueue_container, *args, **kwargs)
        return await self._call(self._queue.enqueue_container, *args, **kwargs)

    async def enqueue_many(
        self, *args: Any, connection: AsyncConnection | AsyncSession | None = None, **kwargs: Any
    ) -> list[int]:
        if connection is not None:
            return await self._in(connection, self._queue.enqueue_many, *args, **kwargs)
        return await self._call(self._queue.enqueue_many, *args, **kwargs)

    async def get(self, job_id: int) -> JobInfo:
        return await self._call(self._queue.get, job_id)

    async def cancel(self, job_id: int) -> bool:
        return await self._call(self._queue.cancel, job_id)

    async def counts(self) -> dict[str, int]:
        return await self._call(self._queue.counts)

    # -- workers --------------------------------------------------------------------------

    def worker(
        self,
        *,
        concurrency: Limits = 1,
        lease_ttl: float | timedelta = 30.0,
        heartbeat_interval: float | timedelta = 10.0,
        poll_interval: float | timedelta = 1.0,
        types: Sequence[str] | None = None,
        worker_id: str | None = None,
        max_running: int | None = None,
        shutdown_grace: float | timedelta = 0.0,
        freeze_gc: bool = True,
    ) -> Any:
        """Build an :class:`~readyq.aio.worker.AsyncWorker` (see :meth:`run_worker`)."""
        from readyq.aio.worker import AsyncWorker

        self._queue._check_open()
        return AsyncWorker(
            self,
            concurrency=concurrency,
            lease_ttl=lease_ttl,
            heartbeat_interval=heartbeat_interval,
            poll_interval=poll_interval,
            types=types,
            worker_id=worker_id,
            max_running=max_running,
            shutdown_grace=shutdown_grace,
            freeze_gc=freeze_gc,
        )

    async def run_worker(
        self,
        *,
        concurrency: Limits = 1,
        lease_ttl: float | timedelta = 30.0,
        heartbeat_interval: float | timedelta = 10.0,
        poll_interval: float | timedelta = 1.0,
        until_idle: bool = False,
        types: Sequence[str] | None = None,
        worker_id: str | None = None,
        max_running: int | None = None,
        shutdown_grace: float | timedelta = 0.0,
        freeze_gc: bool = True,
    ) -> WorkerStats:
        """Run jobs until stopped (or idle); same options as :meth:`readyq.Queue.run_worker`.

        ``async def`` handlers run as tasks on this event loop, plain ones in threads.
        """
        worker = self.worker(
            concurrency=concurrency,
            lease_ttl=lease_ttl,
            heartbeat_interval=heartbeat_interval,
            poll_interval=poll_interval,
            types=types,
            worker_id=worker_id,
            max_running=max_running,
            shutdown_grace=shutdown_grace,
            freeze_gc=freeze_gc,
        )
        return await worker.run(until_idle=until_idle)  # type: ignore[no-any-return]
