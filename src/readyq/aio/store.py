"""AsyncStore: the Store's unit functions, run on an AsyncEngine with ``run_sync``.

Nothing here builds SQL or decides anything. Each transaction is one
``await aconn.run_sync(unit)`` of the very unit the sync Store runs; retries follow the
same ``retry_pause`` rule, awaiting instead of sleeping. The Store's public methods (which
compose units, e.g. a reclaim's read then write) run unchanged in a greenlet whose
``write``/``read`` await this class.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.util.concurrency import await_only, greenlet_spawn

from readyq.dialects import Dialect, dialect_from_connection
from readyq.store import DEFAULT_TX_RETRIES, Store, _database_error, retry_pause
from readyq.transient import is_raw_driver_error

log = logging.getLogger("readyq.store")

T = TypeVar("T")


async def _discard_if_broken(aconn: AsyncConnection, exc: Exception) -> None:
    """Invalidate a connection after an error SQLAlchemy did not wrap (its state is
    unknown), so that the pool never hands it out again."""
    if is_raw_driver_error(exc):
        with contextlib.suppress(Exception):
            await aconn.invalidate(exc)


class _BoundStore(Store):
    """A Store whose transactions are run by an AsyncStore (call it in a greenlet)."""

    def __init__(self, outer: AsyncStore, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._outer = outer

    def _ensure(self) -> Any:
        if self._dialect is None:
            raise RuntimeError("the async store is not connected yet: await its ensure() first")
        return super()._ensure()

    def write(
        self,
        unit: Callable[[Connection], T],
        *,
        connection: Connection | None = None,
        idempotent: bool = True,
        what: str = "write",
        after_commit: Callable[[T], T] | None = None,
        lost_commit: Callable[[T], None] | None = None,
    ) -> T:
        if after_commit is not None:  # applied inside the transaction here, before COMMIT
            inner, then = unit, after_commit

            def unit(conn: Connection) -> T:
                return then(inner(conn))

        if connection is not None:  # the caller's transaction, already inside run_sync
            return super().write(unit, connection=connection, idempotent=idempotent, what=what)
        return await_only(
            self._outer.write(unit, idempotent=idempotent, what=what, lost_commit=lost_commit)
        )

    def read(self, unit: Callable[[Connection], T], *, single: bool = False) -> T:
        return await_only(self._outer.read(unit, single=single))


class AsyncStore:
    """Transactions over the readyq tables of one prefix, on an AsyncEngine."""

    def __init__(
        self,
        engine: AsyncEngine,
        prefix: str,
        *,
        owned: bool,
        tx_retries: int = DEFAULT_TX_RETRIES,
    ) -> None:
        self.async_engine = engine
        self._owned = owned
        self._engine: AsyncEngine | None = None
        self.sync = _BoundStore(self, engine.sync_engine, prefix, owned=owned,
                                tx_retries=tx_retries)

    async def ensure(self) -> Dialect:
        """Detect the dialect from a connection (inside run_sync) and prepare the engine."""
        if self._engine is None or self.sync._dialect is None:
            async with self.async_engine.connect() as aconn:
                dialect = await aconn.run_sync(dialect_from_connection)
                await aconn.rollback()
            sync_engine = self.async_engine.sync_engine
            prepared = dialect.prepare_engine(sync_engine, owned=self._owned)
            self._engine = self.async_engine if prepared is sync_engine else AsyncEngine(prepared)
            self.sync._engine = prepared
            self.sync._dialect = dialect
        return self.sync._dialect

    @property
    def dialect(self) -> Dialect:
        return self.sync.dialect

    async def write(
        self,
        unit: Callable[[Connection], T],
        *,
        idempotent: bool = True,
        what: str = "write",
        lost_commit: Callable[[T], None] | None = None,
    ) -> T:
        """Run ``unit`` in one write transaction (BEGIN IMMEDIATE on SQLite), retried;
        ``lost_commit`` as for ``Store.write``."""
        dialect = await self.ensure()
        assert self._engine is not None
        attempt = 0
        while True:
            committing = False
            connected = False
            try:
                async with self._engine.connect() as aconn:
                    connected = True
                    try:
                        await aconn.run_sync(dialect.begin_write)
                        out = await aconn.run_sync(unit)
                        committing = True
                        await aconn.commit()
                        return out
                    except Exception as exc:
                        await _discard_if_broken(aconn, exc)
                        raise
            except Exception as exc:
                if not _database_error(exc):
                    raise
                self.sync._translate(exc)
                attempt += 1
                delay = retry_pause(dialect, exc, attempt, self.sync.tx_retries,
                                    committing=committing, idempotent=idempotent,
                                    connected=connected)
                if delay is None:
                    raise
                if committing and lost_commit is not None:
                    lost_commit(out)
                log.debug("%s: retrying after %s (attempt %d)", what,
                          exc.__class__.__name__, attempt)
                await asyncio.sleep(delay)

    async def read(self, unit: Callable[[Connection], T], *, single: bool = False) -> T:
        """Run a read-only unit (retried like writes); one of a single statement in
        autocommit where the dialect allows (see ``Store.read``)."""
        dialect = await self.ensure()
        assert self._engine is not None
        autocommit = single and dialect.autocommit_reads
        attempt = 0
        while True:
            connected = False
            try:
                async with self._engine.connect() as aconn:
                    connected = True
                    try:
                        if autocommit:
                            await aconn.execution_options(isolation_level="AUTOCOMMIT")
                            return await aconn.run_sync(unit)
                        out = await aconn.run_sync(unit)
                        await aconn.rollback()
                        return out
                    except Exception as exc:
                        await _discard_if_broken(aconn, exc)
                        raise
            except Exception as exc:
                if not _database_error(exc):
                    raise
                self.sync._translate(exc)
                attempt += 1
                delay = retry_pause(dialect, exc, attempt, self.sync.tx_retries,
                                    connected=connected)
                if delay is None:
                    raise
                await asyncio.sleep(delay)

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a sync Store/Queue method whose transactions go through this store."""
        await self.ensure()
        return await greenlet_spawn(fn, *args, **kwargs)
