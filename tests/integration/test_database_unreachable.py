"""Workers outlive a database they cannot reach: at start-up, and in the middle of a run.

Faults go through real engines: the first connections of an engine are sent to an
address where nothing listens (a closed port, a SQLite file in a missing directory), so
they fail with the driver's own error (SQLAlchemy wraps most; asyncpg raises the OS's
``ConnectionRefusedError`` as is); or a statement fails as a connection reset would.
No database is mocked.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pymysql
import pytest
import sqlalchemy as sa
from sqlalchemy import event

import readyq
from async_support import async_engine
from readyq.dialects import MySQLDialect, PostgresDialect, SQLiteDialect
from readyq.store.transactions import retry_pause
from readyq.transient import is_raw_driver_error, is_transient
from readyq_test_support import cut_connection

OPTIONS: dict[str, Any] = {
    "concurrency": 4, "poll_interval": 0.05, "lease_ttl": 10.0, "heartbeat_interval": 2.0,
}


def closed_port() -> int:
    """A local TCP port where nothing listens (connections to it are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FirstConnectionsFail:
    """Send an engine's first ``n`` connection attempts (after ``skip`` that succeed)
    where nothing answers."""

    def __init__(self, engine: sa.Engine, n: int, tmp_path: Path, *, skip: int = 0) -> None:
        self.skip = skip
        self.left = n
        self.failed = 0
        self.port = closed_port()
        self.path = str(tmp_path / "not-there-yet" / "readyq.db")
        # The engine's own port and file, read at the first attempt.
        self._real: tuple[Any, Any] | None = None
        self._lock = threading.Lock()
        event.listen(engine, "do_connect", self)

    def __call__(self, dialect: Any, rec: Any, cargs: list[Any], cparams: dict[str, Any]) -> None:
        # Some SQLAlchemy versions (2.0.45) hand every connection the engine's own lists:
        # what a failing attempt changes there is put back for the next one.
        with self._lock:
            if self._real is None:
                self._real = (cparams.get("port"), cargs[0] if cargs else None)
            fail = self.skip <= 0 and self.left > 0
            if self.skip > 0:
                self.skip -= 1
            elif fail:
                self.left -= 1
                self.failed += 1
        port, path = (self.port, self.path) if fail else self._real
        if "port" in cparams:
            cparams["port"] = port
        elif cargs:
            cargs[0] = path


def prepare(db: str, n: int) -> list[int]:
    q = readyq.Queue(db)
    try:
        q.create_schema()
        return [q.enqueue("t", {"n": i}) for i in range(n)]
    finally:
        q.close()


def check_done(db: str, ids: list[int]) -> None:
    q = readyq.Queue(db)
    try:
        for i in ids:
            info = q.get(i)
            assert info.state is readyq.JobState.DONE and info.attempts == 1, info
    finally:
        q.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_worker_started_while_the_database_is_unreachable_waits_and_then_works(
    db: str, mode: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ids = prepare(db, 6)
    runs: dict[int, int] = {}

    def handler(job: readyq.Job) -> None:
        runs[job.args["n"]] = runs.get(job.args["n"], 0) + 1

    caplog.set_level(logging.INFO, logger="readyq.worker")
    if mode == "sync":
        engine = sa.create_engine(db, poolclass=sa.NullPool)
        fault = FirstConnectionsFail(engine, 3, tmp_path)
        q = readyq.Queue(engine)
        q.handler("t")(handler)
        stats = q.worker(**OPTIONS).run(until_idle=True, handle_signals=False)
        engine.dispose()
    else:
        aengine = async_engine(db)
        fault = FirstConnectionsFail(aengine.sync_engine, 3, tmp_path)
        aq = readyq.AsyncQueue(aengine)
        aq.handler("t")(handler)

        async def main() -> readyq.WorkerStats:
            try:
                return await aq.worker(**OPTIONS).run(  # type: ignore[no-any-return]
                    until_idle=True, handle_signals=False)
            finally:
                await aengine.dispose()

        stats = asyncio.run(main())
    assert fault.failed == 3
    assert stats.db_errors >= 1 and stats.done == 6
    assert runs == dict.fromkeys(range(6), 1)
    assert "cannot reach the database yet" in caplog.text
    assert "database available again" in caplog.text
    check_done(db, ids)


@pytest.mark.parametrize("kind", ["driver", "os"])
def test_connections_lost_under_statements_are_retried_and_no_job_runs_twice(
    db: str, kind: str
) -> None:
    ids = prepare(db, 8)
    engine = sa.create_engine(db, poolclass=sa.NullPool)
    seen = {"n": 0, "raised": 0}

    @event.listens_for(engine, "before_cursor_execute")
    def cut(conn: Any, *args: Any) -> None:
        seen["n"] += 1
        if seen["n"] % 6 == 3 and seen["raised"] < 6:
            seen["raised"] += 1
            cut_connection(conn, kind)

    runs: dict[int, int] = {}
    q = readyq.Queue(engine)

    @q.handler("t")
    def t(job: readyq.Job) -> None:
        runs[job.args["n"]] = runs.get(job.args["n"], 0) + 1

    stats = q.worker(**OPTIONS).run(until_idle=True, handle_signals=False)
    engine.dispose()
    assert seen["raised"] >= 3
    assert stats.done == 8 and stats.fenced_out == 0 and stats.reclaimed == 0
    assert runs == dict.fromkeys(range(8), 1)
    check_done(db, ids)


def test_a_listener_that_cannot_connect_leaves_the_worker_polling(
    db: str, dialect_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    if dialect_name != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    ids = prepare(db, 3)
    # The URL (which the listener connects to) names a closed port; the store's own
    # connections are sent to the real server.
    real_port = sa.make_url(db).port
    engine = sa.create_engine(sa.make_url(db).set(port=closed_port()), poolclass=sa.NullPool)

    @event.listens_for(engine, "do_connect")
    def redirect(dialect: Any, rec: Any, cargs: Any, cparams: dict[str, Any]) -> None:
        cparams["port"] = real_port

    q = readyq.Queue(engine)
    q.handler("t")(lambda job: None)
    caplog.set_level(logging.WARNING, logger="readyq.wakeup")
    w = q.worker(**OPTIONS)
    stats = w.run(until_idle=True, handle_signals=False)
    engine.dispose()
    assert stats.done == 3
    assert w.listener is not None and w.listener.connections == 0
    assert "polling, reconnecting" in caplog.text
    check_done(db, ids)


def test_a_failed_listen_set_up_leaves_the_worker_polling_and_is_tried_again(
    db: str, dialect_name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    if dialect_name != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    ids = prepare(db, 3)
    engine = sa.create_engine(db, poolclass=sa.NullPool)
    # The first connection detects the server; the next two (the LISTEN set-up reads
    # its channel's name) fail.
    fault = FirstConnectionsFail(engine, 2, tmp_path, skip=1)
    q = readyq.Queue(engine)
    q.handler("t")(lambda job: None)
    caplog.set_level(logging.WARNING, logger="readyq.worker")
    w = q.worker(**OPTIONS)
    thread = threading.Thread(target=w.run, kwargs={"handle_signals": False})
    thread.start()
    try:
        listener = None
        for _ in range(200):
            listener = w.listener
            if listener is not None and listener.listening.wait(0.05):
                break
            time.sleep(0.05)
        assert listener is not None and listener.listening.is_set()
        assert fault.failed == 2
        assert "LISTEN set-up failed" in caplog.text and "retrying in" in caplog.text
        # The listener can be up before the jobs are: the worker keeps working meanwhile.
        deadline = time.monotonic() + 10
        while w.stats.done < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        w.stop()
        thread.join(10)
        engine.dispose()
    assert w.stats.done == 3
    check_done(db, ids)


def test_unwrapped_driver_errors_are_classified_like_wrapped_ones() -> None:
    mysql = MySQLDialect((10, 11), is_mariadb=True)
    deadlock = pymysql.err.OperationalError(1213, "Deadlock found")
    lost = pymysql.err.OperationalError(2013, "Lost connection")
    refused = pymysql.err.OperationalError(2003, "Can't connect")
    syntax = pymysql.err.ProgrammingError(1064, "You have an error in your SQL syntax")
    for raw in (deadlock, lost, refused):
        assert is_raw_driver_error(raw) and is_transient(raw)
    assert not is_raw_driver_error(syntax) and not is_transient(syntax)
    assert mysql.error_code(deadlock) == 1213 and mysql.is_retryable(deadlock)
    wrapped = sa.exc.OperationalError("SELECT 1", {}, deadlock)
    assert mysql.error_code(wrapped) == 1213
    assert not is_raw_driver_error(wrapped) and is_transient(wrapped)
    # Lost under a unit: run it again (unless a non-idempotent unit was committing).
    assert retry_pause(mysql, lost, 1, 12) is not None
    assert retry_pause(mysql, lost, 1, 12, committing=True, idempotent=False) is None
    # Never connected: raised at once, for the worker to back off from.
    assert retry_pause(mysql, refused, 1, 12, connected=False) is None
    reset = ConnectionResetError(104, "Connection reset by peer")
    assert is_transient(reset) and retry_pause(SQLiteDialect(), reset, 1, 12) is not None
    import psycopg

    shutdown = psycopg.errors.AdminShutdown("terminating connection")
    assert is_raw_driver_error(shutdown) and PostgresDialect().is_retryable(shutdown)


def test_the_cli_worker_waits_for_the_database_instead_of_failing(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from readyq.cli import main

    ids = prepare(db, 3)
    name = f"readyq_down_app_{abs(hash(str(tmp_path))) % 10**8}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(f"""
        import sqlalchemy as sa
        import readyq
        from test_database_unreachable import FirstConnectionsFail

        engine = sa.create_engine({db!r}, poolclass=sa.NullPool)
        fault = FirstConnectionsFail(engine, 2, __import__("pathlib").Path({str(tmp_path)!r}))
        queue = readyq.Queue(engine)
        queue.handler("t")(lambda job: None)
    """))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    code = main(["worker", "--app", f"{name}:queue", "--until-idle", "--poll-interval", "0.05",
                 "--heartbeat-interval", "1", "--lease-ttl", "5", "--json"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "the database is not reachable yet" in err and "keeps trying" in err
    check_done(db, ids)
