"""Session settings on the engines readyq creates: no transaction may stall the others.

Every claim locks one gate row for the length of its transaction. A worker process that
is frozen inside that transaction (SIGSTOP, a VM paused, a debugger, a process starved
of CPU) keeps the lock, and every other worker's claim waits behind it for as long as
the freeze lasts. The server can end such a session for us:

* PostgreSQL: ``idle_in_transaction_session_timeout`` ends a session that sits idle
  inside a transaction for longer than the timeout; its transaction rolls back and its
  locks are released. The frozen worker finds its connection gone when it resumes and
  runs its unit again (a rolled-back claim claimed nothing).
* MariaDB: ``idle_transaction_timeout`` (10.3+) does the same. ``innodb_lock_wait_timeout``
  is also lowered to the same number of seconds (never raised above the server's), so a
  lock wait fails and is retried rather than hanging.
* MySQL 8 has no idle-transaction timeout: only the lock wait is bounded there, and a
  frozen claim still holds the gate until the process resumes or its connection dies.
* SQLite: nothing to set (a frozen writer holds the database's write lock; waiters
  retry on SQLITE_BUSY).

The settings are applied to each new connection of an engine readyq creates from a URL,
so they also bound transactions an application runs itself on ``Queue.engine``. An
engine passed in by the application is left as it is: set the same options there
(PostgreSQL: ``connect_args={"options": "-c idle_in_transaction_session_timeout=60000"}``
with psycopg; MariaDB: ``SET SESSION idle_transaction_timeout = 60`` in a ``connect``
event) to get the same protection.
"""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

# Seconds a session of readyq's own engine may sit idle inside a transaction.
DEFAULT_IDLE_TRANSACTION_TIMEOUT = 60.0


def session_statements(dialect: Any, seconds: float) -> list[str]:
    """The SET statements for one new connection of a SQLAlchemy ``dialect``."""
    if dialect.name == "postgresql":
        ms = max(1, round(seconds * 1000))
        return [f"SET idle_in_transaction_session_timeout = {ms}"]
    if dialect.name in ("mysql", "mariadb"):
        whole = max(1, math.ceil(seconds))
        statements = [
            "SET SESSION innodb_lock_wait_timeout = "
            f"LEAST(@@GLOBAL.innodb_lock_wait_timeout, {whole})"
        ]
        if getattr(dialect, "is_mariadb", False):
            statements.append(f"SET SESSION idle_transaction_timeout = {whole}")
        return statements
    return []


def install_session_timeouts(engine: Engine, seconds: float | None) -> None:
    """Apply the idle-transaction timeout to every new connection of ``engine``."""
    if not seconds:
        return

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        statements = session_statements(engine.dialect, seconds)
        if not statements:
            return
        cursor = dbapi_connection.cursor()
        try:
            for stmt in statements:
                cursor.execute(stmt)
        finally:
            cursor.close()
        # PostgreSQL: a SET inside a transaction that rolls back is undone.
        dbapi_connection.commit()

    event.listen(engine, "connect", on_connect)
