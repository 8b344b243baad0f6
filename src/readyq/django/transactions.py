"""Enqueue inside Django's transaction: the job commits, or rolls back, with the rows
the block wrote.

readyq runs its statements on Django's own DBAPI connection, through a SQLAlchemy engine
made for that connection (its dialect, Django's driver: psycopg, psycopg2, mysqlclient
or sqlite3). Django owns the connection and its transaction: the engine commits, rolls
back and closes nothing. An engine lasts as long as Django's connection: a new one
(Django reconnects, by CONN_MAX_AGE) gets a new engine, in each thread.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from django.db import connections

# Django's DB-API module -> SQLAlchemy's dialect and driver for it.
_DRIVERS = {
    "psycopg": "postgresql+psycopg",
    "psycopg2": "postgresql+psycopg2",
    "MySQLdb": "mysql+mysqldb",
    "sqlite3": "sqlite+pysqlite",
}


class Borrowed:
    """Django's DB-API connection, lent to SQLAlchemy: every call goes to it, except the
    ends of the transaction and of the connection, which stay Django's."""

    __slots__ = ("raw",)

    def __init__(self, raw: Any) -> None:
        object.__setattr__(self, "raw", raw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.raw, name, value)

    def commit(self) -> None:
        """Django commits."""

    def rollback(self) -> None:
        """Django rolls back."""

    def close(self) -> None:
        """Django closes."""


_engines = threading.local()


def in_transaction(alias: str) -> bool:
    """Whether a ``transaction.atomic()`` block is open on Django's database ``alias``
    in this thread."""
    return bool(connections[alias].in_atomic_block)


def driver_of(alias: str) -> str | None:
    """The SQLAlchemy driver of Django's connection ``alias`` (None: not one readyq
    can join)."""
    return _DRIVERS.get(_module_of(connections[alias]))


def _module_of(django_connection: Any) -> str:
    # Django's sqlite3 backend uses sqlite3.dbapi2: the package names the driver.
    return str(django_connection.Database.__name__).split(".")[0]


@contextmanager
def joined(alias: str) -> Iterator[sa.Connection]:
    """A SQLAlchemy connection on Django's connection ``alias``, inside its transaction."""
    django_connection = connections[alias]
    django_connection.ensure_connection()
    raw = django_connection.connection
    engines: dict[str, tuple[Any, sa.Engine]] = getattr(_engines, "by_alias", None) or {}
    _engines.by_alias = engines
    known = engines.get(alias)
    if known is None or known[0] is not raw:
        if known is not None:
            known[1].dispose()
        driver = _DRIVERS[_module_of(django_connection)]
        borrowed = Borrowed(raw)
        # psycopg's type look-ups insist on its own Connection class; readyq uses no
        # hstore.
        extra = {"use_native_hstore": False} if driver.startswith("postgresql") else {}
        engine = sa.create_engine(
            f"{driver}://", creator=lambda: borrowed, poolclass=sa.pool.StaticPool,
            pool_reset_on_return=None, **extra,
        )
        engines[alias] = (raw, engine)
    else:
        engine = known[1]
    with engine.connect() as connection:
        yield connection
