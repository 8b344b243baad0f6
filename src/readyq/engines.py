"""The engines readyq creates from a URL: the dialect's options, and session timeouts.

Every claim locks one gate row for the length of its transaction. A worker process that
is frozen inside that transaction (SIGSTOP, a VM paused, a debugger, a process starved
of CPU) keeps the lock, and every other worker's claim waits behind it. The server can
end such a session: each dialect names the settings that do it
(``Dialect.session_statements``; PostgreSQL's ``idle_in_transaction_session_timeout``,
MariaDB's ``idle_transaction_timeout``), and they are applied to each new connection of
an engine readyq creates from a URL. The frozen worker finds its connection gone when
it resumes and runs its unit again (a rolled-back claim claimed nothing). An engine
passed in by the application is left as it is: set the same options there to get the
same protection.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

from readyq.dialects import dialect_class

# Seconds a session of readyq's own engine may sit idle inside a transaction.
DEFAULT_IDLE_TRANSACTION_TIMEOUT = 60.0


def engine_options(url: sa.URL, given: dict[str, Any] | None) -> dict[str, Any]:
    """The dialect's options for an engine on ``url``, updated with the caller's."""
    options = dict(dialect_class(url.get_backend_name()).engine_options())
    options.update(given or {})
    return options


def create_engine(
    url: str | sa.URL,
    *,
    options: dict[str, Any] | None = None,
    idle_transaction_timeout: float | None = DEFAULT_IDLE_TRANSACTION_TIMEOUT,
) -> Engine:
    """An engine on ``url`` as readyq makes its own: the dialect's options (updated with
    ``options``) and the session timeouts."""
    parsed = sa.make_url(url)
    engine = sa.create_engine(parsed, **engine_options(parsed, options))
    install_session_timeouts(engine, idle_transaction_timeout)
    return engine


def install_session_timeouts(engine: Engine, seconds: float | None) -> None:
    """Apply the idle-transaction timeout to every new connection of ``engine`` (the
    ``sync_engine`` of an AsyncEngine included)."""
    if not seconds:
        return
    cls = dialect_class(engine.dialect.name)

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        statements = cls.session_statements(engine.dialect, seconds)
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
