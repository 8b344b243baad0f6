"""Which failures a worker outlives, and how it says so.

A database that cannot be reached, a connection cut by the network or by the server, a
server restarting: none of these end a worker. It backs off and tries again, and it
starts working as soon as the database answers. Most such failures arrive as
SQLAlchemy's ``DBAPIError``; some do not. An async driver may raise the operating
system's ``ConnectionRefusedError`` while connecting, and a driver error raised where
SQLAlchemy does not wrap it (a ``creator`` function, a driver other than the engine's,
a pool callback) reaches readyq as the driver's own ``OperationalError`` or
``InterfaceError``. Those are recognised here too.

A database that answers but refuses a statement as such (an unknown column, a syntax
error) is not an outage: the worker asks its dialect (``Dialect.is_permanent``) and stops.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import sqlalchemy as sa

from readyq.untrusted import one_line

if TYPE_CHECKING:
    from readyq.dialects import Dialect

# PEP 249 names the errors about the connection and the server's operation these two.
DRIVER_CONNECTION_ERRORS = frozenset({"OperationalError", "InterfaceError"})

# Bounds of a worker's back-off while the database is unavailable, in seconds.
BACKOFF_MIN = 0.1
BACKOFF_MAX = 5.0


def is_raw_driver_error(exc: BaseException) -> bool:
    """True for a connection-level error that SQLAlchemy did not wrap: an ``OSError``
    (connection refused or reset, a timeout), or a database driver's own
    ``OperationalError`` / ``InterfaceError``."""
    if isinstance(exc, sa.exc.SQLAlchemyError):
        return False
    if isinstance(exc, OSError):
        return True
    return any(
        cls.__name__ in DRIVER_CONNECTION_ERRORS and not cls.__module__.startswith("sqlalchemy")
        for cls in type(exc).__mro__
    )


def is_transient(exc: BaseException) -> bool:
    """True for failures a worker waits out: any error from the database (wrapped by
    SQLAlchemy or not), and the pool's own time-outs and disconnections."""
    if isinstance(exc, (sa.exc.DBAPIError, sa.exc.TimeoutError, sa.exc.DisconnectionError)):
        return True
    return is_raw_driver_error(exc)


def waited_out(exc: BaseException, dialect: Dialect | None) -> bool:
    """Whether a worker waits ``exc`` out: a transient failure, unless the database
    refused the statement itself (``Dialect.is_permanent``: a schema this readyq does not
    match, a file that is no database) or a value it carried (``Dialect.is_refusal``).
    No wait cures those. ``dialect`` is None before the database first answered."""
    if not is_transient(exc):
        return False
    return dialect is None or not (dialect.is_permanent(exc) or dialect.is_refusal(exc))


def describe(exc: BaseException, limit: int = 200) -> str:
    """``ClassName: first line of the message``, short enough for one log line."""
    orig = exc.orig if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None else exc
    text = str(orig).strip().splitlines()
    first = text[0] if text else ""
    if len(first) > limit:
        first = first[: limit - 3] + "..."
    name = type(orig).__name__
    # A driver's message may quote the data it refused: kept to one printable line.
    return one_line(f"{name}: {first}") if first else name


def next_backoff(previous: float, ceiling: float = BACKOFF_MAX) -> float:
    """The next wait of a bounded exponential back-off, with +-20% jitter so that many
    workers that lost the database together do not all come back at the same instant."""
    base = min(max(previous * 2, BACKOFF_MIN), max(ceiling, BACKOFF_MIN))
    return base * (0.8 + 0.4 * random.random())
