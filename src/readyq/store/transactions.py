"""Running units of work in transactions: the one retry loop.

A write unit runs in a transaction begun by the dialect (``BEGIN IMMEDIATE`` on SQLite)
and committed here. Units that may safely run again are retried after deadlocks,
serialization failures, SQLITE_BUSY and lost connections, with bounded, jittered
backoff. The same loop serves the synchronous API and the asyncio one: the asyncio API
runs the store in a greenlet over its engine's ``sync_engine``, so only the pause between
tries differs (:func:`pause_for`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.util.concurrency import await_only

from readyq.dialects import Dialect
from readyq.transient import is_raw_driver_error

log = logging.getLogger("readyq.store")

T = TypeVar("T")

DEFAULT_TX_RETRIES = 12


def retry_pause(
    dialect: Dialect,
    exc: BaseException,
    attempt: int,
    tx_retries: int,
    *,
    committing: bool = False,
    idempotent: bool = True,
    connected: bool = True,
) -> float | None:
    """Seconds to wait before running a failed unit again, or None to raise.

    A driver or OS error that SQLAlchemy did not wrap (see :mod:`readyq.transient`) counts
    as a lost connection once the unit had a connection (``connected``); failing to
    connect at all is raised at once, for the caller to wait out (a worker backs off).
    """
    retryable = connected if is_raw_driver_error(exc) else dialect.is_retryable(exc)
    if not retryable or attempt > tx_retries or (committing and not idempotent):
        return None
    return float(min(2.0, 0.005 * (2 ** min(attempt, 9))) * (0.5 + random.random()))


def is_database_error(exc: BaseException) -> bool:
    """An error from the database or its driver, wrapped by SQLAlchemy or not."""
    return isinstance(exc, sa.exc.DBAPIError) or is_raw_driver_error(exc)


def discard_if_broken(conn: Connection, exc: Exception) -> None:
    """After an error SQLAlchemy did not wrap, the connection's state is unknown:
    invalidate it so that the pool never hands it out again."""
    if is_raw_driver_error(exc):
        with contextlib.suppress(Exception):
            conn.invalidate(exc)


def _pause_on_event_loop(seconds: float) -> None:
    await_only(asyncio.sleep(seconds))


def pause_for(engine: Engine) -> Callable[[float], None]:
    """How the loop waits between tries on ``engine``: ``time.sleep``, or, for the
    ``sync_engine`` of an AsyncEngine (the store then runs in a greenlet), a sleep on
    the event loop that does not block it."""
    return _pause_on_event_loop if engine.dialect.is_async else time.sleep


class Transactions:
    """Runs units in transactions on one engine, retried when safe.

    ``resolve`` returns the engine and the dialect, connecting the first time it is
    called; ``translate`` turns a database error into readyq's own exception (or returns
    to let it through); ``pause`` waits between tries.
    """

    def __init__(
        self,
        resolve: Callable[[], tuple[Engine, Dialect]],
        *,
        translate: Callable[[BaseException], None],
        pause: Callable[[float], None],
        tx_retries: int = DEFAULT_TX_RETRIES,
    ) -> None:
        self._resolve = resolve
        self._translate = translate
        self._pause = pause
        self.tx_retries = tx_retries

    def write(
        self,
        unit: Callable[[Connection], T],
        *,
        connection: Connection | None = None,
        idempotent: bool = True,
        what: str = "write",
        after_commit: Callable[[T], T] | None = None,
        lost_commit: Callable[[T], None] | None = None,
        retries: int | None = None,
        single: bool = False,
    ) -> T:
        """Run ``unit`` in one write transaction, committed here, retried when safe.

        With ``connection`` the unit runs inside the caller's transaction: nothing is
        begun, committed or retried here. When ``idempotent`` is False a failure during
        COMMIT is raised rather than retried, since the first commit may have landed.
        ``after_commit`` maps the unit's result once committed, the connection still
        open (to read a result the unit left in the driver). ``lost_commit`` is given
        the unit's result when its COMMIT failed, before the unit runs again: that
        commit may have landed. ``retries`` caps the tries after the first (default:
        ``tx_retries``), for a unit whose caller has a schedule of its own.

        ``single`` says the unit runs one statement: where the dialect allows
        (``capabilities.cheap_autocommit``) that statement is then its own transaction,
        without the BEGIN and COMMIT round trips. Its end is its commit, so any failure
        of it counts as a failure during COMMIT (raised when not ``idempotent``).
        """
        if single and lost_commit is not None:
            raise TypeError("a single-statement unit has no result to give lost_commit")
        if connection is not None:
            try:
                out = unit(connection)
                return out if after_commit is None else after_commit(out)
            except sa.exc.DBAPIError as exc:
                self._translate(exc)
                raise
        return self._run(
            unit, write=True, single=single, idempotent=idempotent, what=what,
            after_commit=after_commit, lost_commit=lost_commit,
            retries=self.tx_retries if retries is None else retries,
        )

    def read(self, unit: Callable[[Connection], T], *, single: bool = False) -> T:
        """Run a read-only unit, retried like a write.

        ``single`` says the unit runs one statement, which needs no transaction around
        it: where the dialect allows (``capabilities.cheap_autocommit``) it then runs in
        autocommit, without the BEGIN and COMMIT round trips. An idle worker asks two
        such questions at every tick (is a job runnable, is a lease due for reclaim).
        Otherwise the read ends with a COMMIT, not a ROLLBACK: ending a read-only
        transaction costs the same, and psycopg drops its prepared statements on a
        ROLLBACK.
        """
        return self._run(
            unit, write=False, single=single, idempotent=True, what="read",
            retries=self.tx_retries,
        )

    def _run(
        self,
        unit: Callable[[Connection], T],
        *,
        write: bool,
        single: bool,
        idempotent: bool,
        what: str,
        after_commit: Callable[[T], T] | None = None,
        lost_commit: Callable[[T], None] | None = None,
        retries: int,
    ) -> T:
        engine, dialect = self._resolve()
        autocommit = single and dialect.capabilities.cheap_autocommit
        attempt = 0
        while True:
            committing = False
            connected = False
            try:
                with engine.connect() as conn:
                    connected = True
                    try:
                        if autocommit:
                            conn.execution_options(isolation_level="AUTOCOMMIT")
                            # The statement is its own commit: whatever fails it (a
                            # lost reply, a server shutting down) may come after it
                            # landed. A plain INSERT meets no conflict worth retrying.
                            committing = write
                            out = unit(conn)
                            committing = False
                            return out if after_commit is None else after_commit(out)
                        if write:
                            dialect.begin_write(conn)
                        out = unit(conn)
                        committing = True
                        conn.commit()
                        committing = False
                        return out if after_commit is None else after_commit(out)
                    except Exception as exc:
                        discard_if_broken(conn, exc)
                        raise
            except Exception as exc:
                if not is_database_error(exc):
                    raise
                self._translate(exc)
                attempt += 1
                delay = retry_pause(
                    dialect, exc, attempt, retries,
                    committing=committing, idempotent=idempotent, connected=connected,
                )
                if delay is None:
                    raise
                if committing and lost_commit is not None:
                    lost_commit(out)
                log.debug("%s: retrying after %s (attempt %d)", what, exc.__class__.__name__,
                          attempt)
                self._pause(delay)
