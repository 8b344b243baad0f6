"""The database dialects, and picking one for an engine, once, from the connected server.

The dialect decides everything that differs between databases: see
:mod:`readyq.dialects.base` for the seam. Outside this package (and the DDL in
:mod:`readyq.schema`), no code tests which database it is on.
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy.engine import Connection, Engine

from readyq.dialects.base import (
    Dialect,
    Listener,
    Notifies,
    ReadyNotifier,
    RecordsProgressInClaim,
)
from readyq.dialects.lookalikes import lookalike_problem
from readyq.dialects.mysql import MySQLDialect
from readyq.dialects.postgresql import PostgresDialect
from readyq.dialects.records import (
    Capabilities,
    ClaimReceipt,
    ClaimRequest,
    Dependents,
    MarkedDone,
    Progress,
    ResourceFlight,
    ResourceState,
)
from readyq.dialects.sqlite import SQLiteDialect
from readyq.errors import UnsupportedDatabase

__all__ = [
    "Capabilities",
    "ClaimReceipt",
    "ClaimRequest",
    "Dependents",
    "Dialect",
    "Listener",
    "MarkedDone",
    "MySQLDialect",
    "Notifies",
    "PostgresDialect",
    "Progress",
    "ReadyNotifier",
    "RecordsProgressInClaim",
    "ResourceFlight",
    "ResourceState",
    "SQLiteDialect",
    "connect",
    "dialect_class",
    "dialect_for",
    "dialect_from_connection",
]


def dialect_class(name: str) -> type[Dialect]:
    """The dialect class for SQLAlchemy's dialect name, before any connection."""
    if name == "postgresql":
        return PostgresDialect
    if name in ("mysql", "mariadb"):
        return MySQLDialect
    if name == "sqlite":
        return SQLiteDialect
    problem = lookalike_problem(name)
    if problem is not None:
        raise UnsupportedDatabase(problem)
    if name == "postgres":
        raise UnsupportedDatabase(
            "postgres:// is not a SQLAlchemy URL scheme: use postgresql+psycopg://... "
            "(pip install 'readyq[postgresql]')"
        )
    raise UnsupportedDatabase(
        f"readyq runs on SQLite, PostgreSQL, MySQL and MariaDB; not on {name!r}"
    )


def connect(engine: Engine) -> Connection:
    """``engine.connect()``, for the first connection of a store.

    SQLAlchemy's PostgreSQL dialect reads the server's version at the first connection
    and fails with an AssertionError on a version string it cannot parse, such as
    CockroachDB's: a look-alike named there raises UnsupportedDatabase instead.
    """
    try:
        return engine.connect()
    except AssertionError as exc:
        problem = lookalike_problem(str(exc))
        if problem is None:
            raise
        raise UnsupportedDatabase(problem) from None


def dialect_for(engine: Engine) -> Dialect:
    """Connect once and return the dialect for this server, version checked.

    A MariaDB server is recognised from its version string after connecting, whether the
    URL says ``mysql+...`` or ``mariadb+...``.
    """
    with connect(engine) as conn:
        dialect = dialect_from_connection(conn)
        conn.rollback()
    return dialect


def dialect_from_connection(conn: Connection) -> Dialect:
    """The dialect for the server behind an open connection, version checked.

    Servers that speak the protocol of PostgreSQL or MySQL without their locking (see
    :mod:`readyq.dialects.lookalikes`) are refused by the version string they report,
    before the version number is judged.
    """
    cls = dialect_class(conn.dialect.name)
    version = cast(tuple[int, ...], tuple(conn.dialect.server_version_info or ()))
    dialect: Dialect
    if cls is MySQLDialect:
        dialect = MySQLDialect(version, is_mariadb=bool(cast(Any, conn.dialect).is_mariadb))
    else:
        dialect = cls(version)
    problem = lookalike_problem(dialect.server_text(conn))
    if problem is not None:
        raise UnsupportedDatabase(problem)
    dialect.check_server()
    return dialect
