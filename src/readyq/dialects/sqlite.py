"""SQLite (3.35+): take the write lock first with BEGIN IMMEDIATE, then claim.

Deviations and limits:

* SQLite has no row locks and silently ignores ``FOR UPDATE``. Every readyq write
  transaction starts with ``BEGIN IMMEDIATE``, which takes the database's write lock
  before the first read, so claims are serialized and a read can never be upgraded to a
  write half-way (a deferred transaction that does that gets SQLITE_BUSY at once,
  ignoring the busy timeout).
* Python's sqlite3 module opens transactions on its own before DML. readyq issues the
  ``BEGIN IMMEDIATE`` itself as the first statement of the transaction, so the driver
  sees a transaction already open and adds nothing.
* WAL journal (readers never block the writer) and a busy timeout; SQLITE_BUSY that
  still escapes is retried by the store, never surfaced. A ``BEGIN IMMEDIATE`` that
  finds the write lock taken polls for it every millisecond or less instead of
  sleeping in SQLite's busy handler, so that one process cannot starve another.
* The claim is one ``UPDATE ... WHERE id IN (SELECT ... LIMIT n) RETURNING ...``: with
  the write lock held nothing else can touch the rows.
* The clock is ``julianday('now')``, millisecond precision. All processes must share one
  host (WAL needs shared memory), so they also share a clock.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.sql import operators

from readyq.dialects.base import (
    Dialect,
    driver_error,
)
from readyq.dialects.records import (
    Capabilities,
    ClaimRequest,
    Dependents,
    dependents_from,
)
from readyq.dialects.sqlite_direct import DirectPlan, DirectResult, plan
from readyq.errors import DatabaseFileUnusable, UnsupportedDatabase
from readyq.model import ClaimedJob
from readyq.schema import COSTED_READY, Tables, costed_index_name
from readyq.sql.claims import (
    GROUP,
    LIMIT,
    claim_columns,
    claim_head,
    claimed_rows,
    group_head_params,
    group_heads,
    lease_values,
)
from readyq.sql.leases import (
    done_values,
)

# The clock as one SQL term, constants and all: built from SQLAlchemy's functions and
# operators it carried four bound parameters wherever it appeared (five times in a
# claim), each compiled, bound and read at every execution.
_NOW: sa.ColumnElement[float] = sa.literal_column(
    "((julianday('now') - 2440587.5) * 86400.0)", sa.Double
)

BUSY_TIMEOUT_MS = 5000
# The pauses between tries of the write lock (see SQLiteDialect.begin_write), seconds.
LOCK_POLL_FIRST = 0.0001
LOCK_POLL_MAX = 0.001
# Plans kept per dialect: the loop's statements are built once each (``Dialect.cached``),
# a few dozen in all; a statement built anew at each call is planned but not kept.
MAX_PLANS = 512


def _pragmas(dbapi_conn: Any, _record: Any) -> None:
    """Every connection of an engine readyq uses: the busy timeout, foreign keys and the
    WAL journal. WAL is a property of the file; asking again is cheap, and covers files
    whose schema was made by other tools. (The one place readyq sets it.)

    The journal mode is the first thing that reads the file: a file that is not a
    database, or a corrupt one, is reported here as such (DatabaseFileUnusable)."""
    cur = dbapi_conn.cursor()
    try:
        cur.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.execute("PRAGMA journal_mode = WAL")
    except Exception as exc:
        what = _unusable(exc)
        if what is None:
            raise
        raise DatabaseFileUnusable(f"{_file_of(cur)} {what}") from exc
    finally:
        cur.close()


# What SQLite says of a file it cannot use as a database, and how readyq words it. Python
# 3.10's sqlite3 and the async driver give only the message.
_UNUSABLE = (
    ("SQLITE_NOTADB", "file is not a database",
     "is not a SQLite database (another kind of file, or an encrypted database)"),
    ("SQLITE_CORRUPT", "database disk image is malformed",
     "is a corrupt SQLite database (database disk image is malformed): restore it from "
     "a backup, or rebuild it with the sqlite3 shell's .recover"),
)


def _unusable(exc: BaseException) -> str | None:
    """What is wrong with the file, when ``exc`` says it is not a usable database."""
    err = driver_error(exc)
    name = str(getattr(err, "sqlite_errorname", "") or "")
    text = str(err).lower()
    for code, message, what in _UNUSABLE:
        if name.startswith(code) or message in text:
            return what
    return None


def _file_of(cursor: Any) -> str:
    """The file a connection has open, for an error message (it can be named even when
    its content is not a database)."""
    try:
        rows = cursor.execute("PRAGMA database_list").fetchall()
    except Exception:
        return "the database file"
    path = next((r[2] for r in rows if r[1] == "main"), "")
    return repr(path) if path else "the database file"


# What SQLite says, with the code SQLITE_ERROR, of a statement that does not fit the tables
# (Python 3.10's sqlite3 gives the message without the code's name).
_REFUSED_STATEMENT = (
    "no such table",
    "no such column",
    "no such function",
    "has no column named",
    "syntax error",
)


# What SQLite says of a value it refuses, by the code Python 3.11+ names (see
# SQLiteDialect.refusal_codes), for Python 3.10's sqlite3, which gives the message only.
_REFUSED_VALUE = (
    ("not null constraint failed", "SQLITE_CONSTRAINT_NOTNULL"),
    ("check constraint failed", "SQLITE_CONSTRAINT_CHECK"),
    ("string or blob too big", "SQLITE_TOOBIG"),
    ("datatype mismatch", "SQLITE_MISMATCH"),
)


def _locked(exc: BaseException) -> bool:
    """SQLITE_BUSY: another connection holds the lock."""
    text = str(getattr(exc, "orig", exc)).lower()
    return "database is locked" in text or "database table is locked" in text


class _IdList(sa.types.TypeDecorator[list[int]]):
    """A list of ids bound as one JSON array (read back by ``json_each``)."""

    impl = sa.Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> str:
        return json.dumps([int(v) for v in value])


def _in_json(column: sa.ColumnElement[Any], ids: sa.BindParameter[Any]) -> sa.ColumnElement[bool]:
    return column.in_(sa.select(sa.column("value")).select_from(sa.func.json_each(ids)))


# SQLite reads a JSON array's element with ``->>`` from 3.38 on.
ARROW_OPERATORS = (3, 38)


class SQLiteDialect(Dialect):
    name: ClassVar[str] = "sqlite"
    # No autocommit reads: Python's sqlite3 opens no transaction for a SELECT, so a read
    # already runs without BEGIN and COMMIT, and switching the connection to autocommit
    # costs SQLAlchemy's reset on its way back to the pool, ``PRAGMA read_uncommitted =
    # 0``, which expires every statement the driver has prepared on the connection: the
    # next claim would compile all its SQL in SQLite again.
    capabilities: ClassVar[Capabilities] = Capabilities(
        skip_locked=False, returning=True, partial_index=True, listen_notify=False,
        row_locks=False,
    )
    # SQLite's generic error: an unknown table, column or function, a syntax error. A
    # locked database, a full disk or a file that cannot be opened have codes of their own.
    # (Python 3.10's sqlite3 does not report the code: there such errors are waited out.)
    permanent_codes: ClassVar[frozenset[object]] = frozenset({"SQLITE_ERROR"})
    # A string or blob over SQLite's length limit; a value of the wrong type for the
    # column; a value a constraint refuses.
    refusal_codes: ClassVar[frozenset[object]] = frozenset(
        {"SQLITE_TOOBIG", "SQLITE_MISMATCH", "SQLITE_CONSTRAINT_CHECK",
         "SQLITE_CONSTRAINT_NOTNULL"}
    )
    driver_hint: ClassVar[str] = "use sqlite:///path (async: sqlite+aiosqlite:///path)"

    def same_database(self, ours: sa.URL, theirs: sa.URL) -> bool:
        """The same database file (by its real path); an in-memory database is only ever
        its own connection's."""
        def path(url: sa.URL) -> str | None:
            db = url.database
            if url.get_backend_name() != "sqlite" or not db or db == ":memory:":
                return None
            if db.startswith("file:"):
                db = db[5:].split("?", 1)[0]
            return os.path.realpath(db)
        mine = path(ours)
        return mine is not None and mine == path(theirs)

    @classmethod
    def engine_options(cls, driver: str = "") -> dict[str, Any]:
        return {"connect_args": {"timeout": BUSY_TIMEOUT_MS / 1000}}

    @classmethod
    def database_file(cls, url: sa.URL) -> str | None:
        """The file of a ``sqlite:///path`` URL (not ``:memory:`` nor a ``file:`` URI)."""
        path = url.database
        if not path or path == ":memory:" or path.startswith("file:"):
            return None
        return path

    def __init__(self, server_version: tuple[int, ...] = ()) -> None:
        super().__init__(server_version)
        # statement -> its plan, or None for a statement that runs through SQLAlchemy
        self._plans: dict[Any, DirectPlan | None] = {}

    def execute(
        self,
        conn: Connection,
        stmt: sa.Executable,
        params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    ) -> Any:
        """Run the statement on sqlite3's own cursor (see :mod:`readyq.dialects.sqlite_direct`)
        when nothing watches the connection's statements; else through SQLAlchemy.

        Whoever listens for the engine's statement events (``before_cursor_execute``,
        ``after_cursor_execute``, ``handle_error``; the dialect's ``do_execute``), logs
        them (``echo``) or maps schemas at execution sees every statement as before: the
        statements then go through SQLAlchemy. Errors are wrapped as SQLAlchemy wraps
        them, and a transaction is begun on the connection as its own execution would.
        """
        raw = self._direct_connection(conn)
        if raw is None:
            return super().execute(conn, stmt, params)
        try:
            found = self._plans[stmt]
        except KeyError:
            found = plan(stmt, conn.dialect)
            if len(self._plans) < MAX_PLANS:
                self._plans[stmt] = found
        if found is None:
            return super().execute(conn, stmt, params)
        many = params is not None and not isinstance(params, Mapping)
        try:
            args: Any = (
                [found.args(p) for p in params]
                if params is not None and not isinstance(params, Mapping)
                else found.args(params)
            )
        except KeyError:  # a required parameter is missing: SQLAlchemy says which
            return super().execute(conn, stmt, params)
        if not conn.in_transaction():
            conn.begin()
        cursor = raw.cursor()
        try:
            if many:
                cursor.executemany(found.sql, args)
            else:
                cursor.execute(found.sql, args)
            description = cursor.description
            rows = found.rows(cursor.fetchall(), description) if description is not None else []
            return DirectResult(rows, cursor.rowcount)
        except sqlite3.Error as exc:
            raise sa.exc.DBAPIError.instance(
                found.sql, args, exc, sqlite3.Error, dialect=conn.dialect, ismulti=many
            ) from exc
        finally:
            cursor.close()

    @staticmethod
    def _direct_connection(conn: Connection) -> sqlite3.Connection | None:
        """sqlite3's connection under ``conn``, when its statements may skip SQLAlchemy's
        execution layer; else None."""
        events, dialect_events = conn.dispatch, conn.dialect.dispatch
        if (
            events.before_cursor_execute
            or events.after_cursor_execute
            or dialect_events.handle_error
            or dialect_events.do_execute
            or dialect_events.do_executemany
            or conn.engine.logger.isEnabledFor(logging.INFO)
            or conn.get_execution_options().get("schema_translate_map")
        ):
            return None
        raw = conn.connection.driver_connection
        return raw if isinstance(raw, sqlite3.Connection) else None

    def prepare_connection(self, dbapi_connection: Any) -> None:
        _pragmas(dbapi_connection, None)

    def prepare_engine(self, engine: sa.Engine, *, owned: bool) -> sa.Engine:
        if not event.contains(engine, "connect", _pragmas):
            event.listen(engine, "connect", _pragmas)
        return engine

    def check_server(self) -> None:
        if sqlite3.sqlite_version_info < (3, 35):
            raise UnsupportedDatabase(
                f"readyq needs SQLite 3.35 or newer (RETURNING), found {sqlite3.sqlite_version}"
            )

    def server_text(self, conn: Connection) -> str:
        """``SQLite`` and the library's version: SQLite has no ``version()``."""
        return f"SQLite {conn.execute(sa.select(sa.func.sqlite_version())).scalar()}"

    def begin_write(self, conn: Connection) -> None:
        """``BEGIN IMMEDIATE``; while another connection holds the write lock, poll for it.

        SQLite's own busy handler sleeps 1, 2, 5, 10 ... up to 100 ms between tries, so a
        writer that misses the lock once tends to sleep through several short
        transactions of another process. On Python's sqlite3 driver the wait is done
        here instead: the busy timeout is off for the ``BEGIN`` alone and the lock is
        tried again after pauses of 0.1 ms growing to 1 ms, for at most the busy
        timeout, after which the error is raised as before (the store retries it).
        """
        raw = conn.connection.driver_connection
        if not isinstance(raw, sqlite3.Connection):  # aiosqlite: SQLite's busy handler
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            return
        raw.execute("PRAGMA busy_timeout = 0")
        try:
            try:
                conn.exec_driver_sql("BEGIN IMMEDIATE")
                return
            except sa.exc.OperationalError as exc:
                if not _locked(exc):
                    raise
                first = exc
            # The later tries go to the driver directly: they are many and cheap, and
            # the first one already went through the engine's events.
            deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
            pause = LOCK_POLL_FIRST
            while True:
                time.sleep(pause)
                try:
                    raw.execute("BEGIN IMMEDIATE")
                    return
                except sqlite3.OperationalError as exc:
                    if not _locked(exc):
                        raise
                    if time.monotonic() >= deadline:
                        raise first from exc
                pause = min(pause * 2, LOCK_POLL_MAX)
        finally:
            raw.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")

    def now(self) -> sa.ColumnElement[float]:
        return _NOW

    def error_code(self, exc: BaseException) -> object:
        err = driver_error(exc)
        name = getattr(err, "sqlite_errorname", None)
        if name is not None or err is None:
            return name
        # Python 3.10's sqlite3 gives no error names, only messages.
        text = str(err).lower()
        if isinstance(err, sqlite3.OperationalError) and any(
            m in text for m in _REFUSED_STATEMENT
        ):
            return "SQLITE_ERROR"
        return next((code for message, code in _REFUSED_VALUE if message in text), None)

    def is_retryable(self, exc: BaseException) -> bool:
        return super().is_retryable(exc) or _locked(exc)

    def is_permanent(self, exc: BaseException) -> bool:
        """Also a file that stopped being a usable database while the worker ran (it was
        overwritten, or became corrupt): waiting does not repair it."""
        return super().is_permanent(exc) or _unusable(exc) is not None

    def is_missing_table(self, exc: BaseException) -> bool:
        return "no such table" in str(getattr(exc, "orig", exc)).lower()

    def octets(self, column: sa.ColumnElement[Any]) -> sa.ColumnElement[int]:
        """``length(CAST(column AS BLOB))``: SQLite's length() of a text counts
        characters, of a blob bytes; octet_length() exists only from SQLite 3.43."""
        return sa.func.length(sa.cast(column, sa.LargeBinary), type_=sa.Integer)

    def match_ids(
        self, column: sa.ColumnElement[Any], ids: Sequence[int]
    ) -> sa.ColumnElement[bool]:
        """``column IN (SELECT value FROM json_each(:ids))``: one parameter, one SQL text
        whatever the number of ids."""
        return _in_json(column, sa.bindparam(None, list(ids), type_=_IdList))

    def pairs_match(
        self,
        id_column: sa.ColumnElement[Any],
        token_column: sa.ColumnElement[Any],
        pairs: Sequence[tuple[int, int]],
    ) -> sa.ColumnElement[bool]:
        """``id IN (SELECT value FROM json_each(:ids)) AND (id, token) IN (pairs)``.

        SQLite tests a row-value ``IN`` list against every row it reads and does not
        seek with it: alone, it made a fenced start read the whole table (89 ms with
        1,100,000 rows). The ids lead the planner to each row by its primary key; the
        pairs still fence each row by its own token.
        """
        return sa.and_(
            self.match_ids(id_column, [p[0] for p in pairs]),
            sa.tuple_(id_column, token_column).in_(list(pairs)),
        )

    def ids_in(self, column: sa.ColumnElement[Any], name: str) -> sa.ColumnElement[bool]:
        """``column IN (SELECT value FROM json_each(:name))``; the list is bound at
        execution."""
        return _in_json(column, sa.bindparam(name, type_=_IdList))

    def costed_probe(
        self, t: Tables, types: Sequence[str] | None
    ) -> sa.Select[Any] | sa.TextualSelect:
        """``INDEXED BY`` the index of ready jobs with costs of their own, as SQL text
        (SQLAlchemy renders no table hint for SQLite). Left to itself, without statistics,
        SQLite took the index of ready jobs by type for the type's equality and tested
        every ready job of the type for costs: 3 ms a claim with 20,000 of them ready."""
        j = t.jobs
        where = COSTED_READY
        params = {}
        if types is not None:
            names = [f"rq_ct{i}" for i in range(len(types))]
            where += f" AND type IN ({', '.join(':' + n for n in names)})"
            params = dict(zip(names, types, strict=True))
        text = (
            f"SELECT id FROM {j.name} INDEXED BY {costed_index_name(j.name)} "
            f"WHERE {where} LIMIT 1"
        )
        return sa.text(text).bindparams(**params).columns(j.c.id)

    def claim_statement(
        self, t: Tables, req: ClaimRequest, now: sa.ColumnElement[float]
    ) -> sa.Update:
        """``UPDATE ... WHERE id IN (SELECT ... LIMIT n) RETURNING ...``, built once per
        shape (group, limit, owner and lease length are bound)."""

        def build() -> sa.Update:
            j = t.jobs
            chosen = claim_head(t, now, GROUP, req.types, LIMIT, j.c.id)
            return (
                sa.update(j)
                .where(j.c.id.in_(chosen))
                .values(**lease_values(t, req, now))
                .returning(*claim_columns(t))
            )

        return self.cached(("claim", t.jobs.name, req.shape()), build)

    def claim_jobs(
        self,
        conn: Connection,
        t: Tables,
        requests: Sequence[ClaimRequest],
        now: sa.ColumnElement[float],
    ) -> list[ClaimedJob]:
        """One group: :meth:`claim_statement`. Several: every group's claim in one
        ``UPDATE ... WHERE id IN (SELECT ... LIMIT :n0 UNION ALL ...) RETURNING ...``.
        The transaction began with BEGIN IMMEDIATE (:meth:`begin_write`): nothing can
        take a row between the selects and the update."""
        if len(requests) == 1:
            req = requests[0]
            stmt = self.claim_statement(t, req, now)
            return claimed_rows(self.execute(conn, stmt, req.params()))
        first = requests[0]
        n = len(requests)

        def build() -> sa.Update:
            j = t.jobs
            parts = [
                sa.select(head.c.id)
                for head in (
                    select.subquery(f"head{i}")
                    for i, select in enumerate(group_heads(t, now, first.types, n, j.c.id))
                )
            ]
            return (
                sa.update(j)
                .where(j.c.id.in_(sa.union_all(*parts)))
                .values(**lease_values(t, first, now))
                .returning(*claim_columns(t))
            )

        stmt = self.cached(("claim_groups", t.jobs.name, first.shape(), n), build)
        rows = self.execute(conn, stmt, group_head_params(requests)).all()
        return claimed_rows(rows)

    def dependents_of(self, conn: Connection, t: Tables, ids: Sequence[int]) -> Dependents:
        """The dependents of ``ids`` (see :meth:`Dialect.dependents_of`), read as a join
        that starts from ``json_each(:ids)``: ``IN (SELECT value FROM json_each(...))``
        made SQLite build and search a temporary index of the ids at every read, about
        1,200 instructions per finished job more. A join counts an id given twice twice:
        the ids are made unique first."""
        d, j = t.deps, t.jobs

        def build() -> sa.Select[Any]:
            each = (
                sa.func.json_each(sa.bindparam("ids", type_=_IdList))
                .table_valued("value")
                .alias("finished")
            )
            return sa.select(d.c.job_id, j.c.is_container).select_from(
                each.join(d, d.c.depends_on_id == each.c.value).join(j, j.c.id == d.c.job_id)
            )

        stmt = self.cached(("dependents_join", d.name), build)
        return dependents_from(self.execute(conn, stmt, {"ids": list(dict.fromkeys(ids))}))

    def done_update(
        self,
        t: Tables,
        owner: str,
        rows: Sequence[tuple[int, int, str | None]],
        now: sa.ColumnElement[float],
    ) -> tuple[sa.Update, dict[str, Any]]:
        """``UPDATE ... FROM json_each(:ids)``: the batch travels as three JSON arrays in
        step, the ids, their lease tokens and their results, each row's token and result
        read at its id's position (SQLite 3.33+ has UPDATE ... FROM; json_each is built
        in). Flat arrays, because SQLite parses a nested array's elements again for each
        value taken from them: one array of [id, token, result] cost about 5,500
        instructions more per job (docs/benchmarks.md)."""
        arrow = self.server_version >= ARROW_OPERATORS

        def build() -> sa.Update:
            j = t.jobs
            each = (
                sa.func.json_each(sa.bindparam("d_ids", type_=sa.Text))
                .table_valued("key", "value")
                .alias("batch")
            )

            def at_position(name: str, type_: Any) -> sa.ColumnElement[Any]:
                array = sa.bindparam(name, type_=sa.Text)
                if arrow:  # ``->>`` with an integer: that element, as an SQL value
                    return array.op("->>", return_type=type_)(each.c.key)
                path = "$[" + sa.cast(each.c.key, sa.Text) + "]"
                return sa.func.json_extract(array, path, type_=type_)

            # ``+state``: SQLite's way to keep a term off the index, so that the planner
            # drives the join from the batch by primary key instead of walking every
            # running job and re-reading the JSON for each. (A leading WITH would do it
            # too, but Python's sqlite3 reports no rowcount for a statement that does
            # not start with UPDATE.)
            state: sa.UnaryExpression[str] = sa.UnaryExpression(
                j.c.state, operator=operators.custom_op("+")
            )
            return (
                sa.update(j)
                .where(
                    j.c.id == each.c.value,
                    j.c.lease_token == at_position("d_tokens", sa.BigInteger),
                    j.c.lease_owner == sa.bindparam("d_owner", type_=sa.String),
                    state == "running",
                )
                .values(done_values(now, at_position("d_results", sa.Text)))
            )

        ids, tokens, results = zip(*rows, strict=True) if rows else ((), (), ())
        params = {
            "d_ids": json.dumps(ids),
            "d_tokens": json.dumps(tokens),
            "d_results": json.dumps(results),
            "d_owner": owner,
        }
        return self.cached(("done", t.jobs.name, arrow), build), params
