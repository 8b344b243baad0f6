"""The engines readyq creates from a URL: the dialect's options, and session timeouts.

Every claim locks one gate row for the length of its transaction. A worker process that
is frozen inside that transaction (SIGSTOP, a VM paused, a debugger, a process starved
of CPU) keeps the lock, and every other worker's claim waits behind it. The server can
end such a session: each dialect names the settings that do it
(``Dialect.session_statements``; PostgreSQL's ``idle_in_transaction_session_timeout``,
MariaDB's ``idle_transaction_timeout``), and they are applied to each new connection of
an engine readyq creates from a URL. The frozen worker finds its connection gone when
it resumes and runs its unit again (a rolled-back claim claimed nothing). Every wait for
a lock is bounded too (PostgreSQL's ``lock_timeout``, InnoDB's
``innodb_lock_wait_timeout``; SQLite's busy timeout is the same 5 s), so that no
statement of readyq's waits behind a frozen lock holder for longer than that: it fails
and is run again. An engine passed in by the application is left as it is: set the same
options there to get the same protection.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

from readyq.dialects import dialect_class
from readyq.errors import ConfigurationError

# Seconds a session of readyq's own engine may sit idle inside a transaction, and wait
# for a lock. With the worker's defaults they nest: a lock wait (5 s) ends within a
# heartbeat interval (10 s), and a frozen session is ended (20 s) before a lease that
# it kept from being extended runs out (30 s). See docs/multi-host.md.
DEFAULT_IDLE_TRANSACTION_TIMEOUT = 20.0
DEFAULT_LOCK_TIMEOUT = 5.0


def checked_url(url: str | sa.URL, *, asynchronous: bool) -> sa.URL:
    """``url`` parsed, for a database readyq runs on and a driver of the right kind:
    raises UnsupportedDatabase or ConfigurationError naming the fix (the URL to use, the
    extra to install, the queue class to take)."""
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError as exc:
        raise ConfigurationError(f"not a database URL: {url!r} ({exc})") from None
    cls = dialect_class(parsed.get_backend_name())
    try:
        is_async = bool(parsed.get_dialect().is_async)
    except sa.exc.NoSuchModuleError:
        raise ConfigurationError(
            f"SQLAlchemy has no driver {parsed.drivername!r}: {cls.driver_hint}"
        ) from None
    if is_async and not asynchronous:
        raise ConfigurationError(
            f"{parsed.drivername} is an asyncio driver: use readyq.AsyncQueue with it, or a "
            f"synchronous URL with readyq.Queue ({cls.driver_hint})"
        )
    if asynchronous and not is_async:
        raise ConfigurationError(
            f"{parsed.drivername} is not an asyncio driver: use readyq.Queue with it, or an "
            f"asyncio URL with readyq.AsyncQueue ({cls.driver_hint})"
        )
    return parsed


def missing_driver(url: sa.URL, exc: ImportError) -> ConfigurationError:
    """The error for a driver that is not installed."""
    hint = dialect_class(url.get_backend_name()).driver_hint
    return ConfigurationError(f"the driver of {url.drivername} is not installed ({exc}): {hint}")


def engine_options(url: sa.URL, given: dict[str, Any] | None) -> dict[str, Any]:
    """The dialect's options for an engine on ``url``, updated with the caller's. A
    connection argument the caller sets, in ``connect_args`` or in the URL's query,
    wins over the dialect's."""
    options = dict(dialect_class(url.get_backend_name()).engine_options(url.get_driver_name()))
    given = dict(given or {})
    ours = dict(options.pop("connect_args", {}))
    theirs = dict(given.pop("connect_args", {}))
    options.update(given)
    connect_args = {k: v for k, v in ours.items() if k not in url.query} | theirs
    if connect_args:
        options["connect_args"] = connect_args
    return options


def create_engine(
    url: str | sa.URL,
    *,
    options: dict[str, Any] | None = None,
    idle_transaction_timeout: float | None = DEFAULT_IDLE_TRANSACTION_TIMEOUT,
    lock_timeout: float | None = DEFAULT_LOCK_TIMEOUT,
) -> Engine:
    """An engine on ``url`` as readyq makes its own: the dialect's options (updated with
    ``options``) and the session timeouts."""
    parsed = checked_url(url, asynchronous=False)
    try:
        engine = sa.create_engine(parsed, **engine_options(parsed, options))
    except ImportError as exc:
        raise missing_driver(parsed, exc) from None
    install_session_timeouts(engine, idle_transaction_timeout, lock_timeout)
    return engine


def install_session_timeouts(
    engine: Engine, idle_seconds: float | None, lock_seconds: float | None = None
) -> None:
    """Apply the idle-transaction and lock-wait timeouts to every new connection of
    ``engine`` (the ``sync_engine`` of an AsyncEngine included)."""
    if not idle_seconds and not lock_seconds:
        return
    cls = dialect_class(engine.dialect.name)

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        statements = cls.session_statements(engine.dialect, idle_seconds, lock_seconds)
        if not statements:
            return
        cursor = dbapi_connection.cursor()
        try:
            for stmt in statements:
                cursor.execute(stmt)
        finally:
            cursor.close()
        # A SET inside a transaction that rolls back is undone (PostgreSQL).
        dbapi_connection.commit()

    event.listen(engine, "connect", on_connect)
