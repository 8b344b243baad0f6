"""Waking workers at once on PostgreSQL with LISTEN/NOTIFY; polling stays the floor.

A transaction that makes jobs ready (an enqueue, or a completion that releases
dependents) runs ``NOTIFY <prefix>wake`` inside that transaction: PostgreSQL delivers it
at commit and drops it on rollback, and the payload is empty (no job data travels this
way). A listening worker keeps one dedicated connection in a thread; each notification
sets the worker's wake event, so many notifications coalesce into one tick.

Every worker still polls at ``poll_interval``: a lost notification only costs latency.
The listener falls back to polling (and says so in the log) when the database has no
LISTEN (SQLite, MySQL/MariaDB), when the driver is missing, when LISTEN does not hold
(``pg_listening_channels()`` lacks the channel, e.g. behind a transaction-pooling proxy),
and while its connection is down; it reconnects with backoff, LISTENs again and then
triggers one re-scan, for whatever was enqueued while it was away.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

if TYPE_CHECKING:
    from readyq.store import Store
    from readyq.worker import Worker

log = logging.getLogger("readyq.wakeup")

RECONNECT_MIN = 0.1
RECONNECT_MAX = 5.0


def channel_for(prefix: str) -> str:
    """The base of a prefix's notification channel (prefixes are plain identifiers).

    Notifications are database-wide, so the channel also carries a hash of the schema
    the tables live in (``SCHEMA_SUFFIX``, evaluated by the server): queues with the same
    prefix in two schemas of one database do not wake each other.
    """
    return f"{prefix}wake"


# Appended in SQL to the base name, on both the NOTIFY and the LISTEN side.
SCHEMA_SUFFIX = "'_' || left(md5(current_schema()), 8)"


def _wants(store: Store, listen: bool | None) -> bool:
    return listen is not False and store.dialect.capabilities.listen_notify


def install_notify(store: Store, listen: bool | None) -> None:
    """Make ``store`` NOTIFY its channel from transactions that make jobs ready."""
    if listen is False:
        store.on_ready = None
        store.ready_notice = None
        return
    channel = channel_for(store.tables.jobs.name[: -len("jobs")])
    # text(): pg_notify and current_schema() exist on PostgreSQL only, the one database
    # whose capabilities enable this.
    stmt = sa.text(f"SELECT pg_notify(:channel || {SCHEMA_SUFFIX}, '')").bindparams(channel=channel)

    def notify(conn: Connection) -> None:
        if _wants(store, listen):
            conn.execute(stmt)

    store.on_ready = notify
    # The same NOTIFY as a column of an INSERT's RETURNING (``concat`` spells the same
    # name as SCHEMA_SUFFIX).
    notice = sa.func.pg_notify(
        sa.func.concat(
            sa.literal(channel, sa.Text), "_",
            sa.func.left(sa.func.md5(sa.func.current_schema()), 8),
        ),
        "",
    ).label("notified")
    store.ready_notice = lambda: notice if _wants(store, listen) else None


def conninfo_for(url: sa.URL) -> str:
    """A libpq URI for a SQLAlchemy PostgreSQL URL, whatever its driver."""
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


class Listener:
    """LISTEN on one channel from a dedicated connection in a daemon thread.

    ``on_wake`` is called (from the thread) once for each batch of notifications read
    together, and once after each reconnection. ``pid`` is the backend pid of the live
    connection (None while down).

    The thread sleeps on the connection's socket and on a socket pair of its own:
    ``stop()`` writes to the pair, so a stopping worker does not wait for a timeout to
    expire, and an idle listener does not wake up to look at a flag.
    """

    def __init__(
        self,
        conninfo: str,
        channel: str,
        on_wake: Callable[[], None],
        *,
        connect: Callable[[str], Any] | None = None,
    ) -> None:
        self.conninfo = conninfo
        self.channel = channel
        self.on_wake = on_wake
        self._connect = connect
        self.pid: int | None = None
        self.connections = 0
        self.unavailable: str | None = None
        self.listening = threading.Event()
        self._stop = threading.Event()
        self._conn: Any = None
        self._interrupt_r, self._interrupt_w = socket.socketpair()
        self._interrupt_r.setblocking(False)
        self._interrupt_w.setblocking(False)
        self._thread = threading.Thread(target=self._run, name="readyq-listen", daemon=True)

    def start(self) -> Listener:
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):  # the pair is full: a wake-up is pending
            self._interrupt_w.send(b"\0")
        self._thread.join(timeout)

    def _selector(self, conn: Any) -> selectors.BaseSelector:
        """What the thread sleeps on while ``conn`` lives: its socket and the stop
        signal. Built once per connection, not at every wait. (A selector, not
        ``select()``, which refuses descriptors past 1024 in a process with many files
        open.)"""
        sel = selectors.DefaultSelector()
        try:
            sel.register(conn.fileno(), selectors.EVENT_READ)
            sel.register(self._interrupt_r, selectors.EVENT_READ)
        except BaseException:
            sel.close()
            raise
        return sel

    def _open(self) -> Any:
        if self._connect is not None:
            return self._connect(self.conninfo)
        import psycopg

        return psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5)

    def _run(self) -> None:
        try:
            self._listen()
        finally:
            # The thread's own sockets: closed by the thread, which may outlive a
            # ``stop()`` that timed out (a later write to them fails harmlessly).
            self._interrupt_r.close()
            self._interrupt_w.close()

    def _listen(self) -> None:
        backoff = RECONNECT_MIN
        while not self._stop.is_set():
            conn = None
            sel = None
            try:
                conn = self._open()
                # The channel is a validated prefix plus hex digits: a safe identifier.
                conn.execute(f'LISTEN "{self.channel}"')
                channels = [r[0] for r in conn.execute("SELECT pg_listening_channels()")]
                if self.channel not in channels:
                    self.unavailable = "LISTEN did not hold (a transaction-pooling proxy?)"
                    log.warning(
                        "LISTEN on %r is unavailable: pg_listening_channels() does not list "
                        "it (a transaction-pooling proxy?); polling only",
                        self.channel,
                    )
                    return
                sel = self._selector(conn)
                self.pid = int(conn.info.backend_pid)
                self.connections += 1
                backoff = RECONNECT_MIN
                self.listening.set()
                if self.connections > 1:
                    log.info("listener on %r is back; re-scanning", self.channel)
                    self.on_wake()
                while not self._stop.is_set():
                    # What the socket holds now, and what psycopg read while running the
                    # statements above; never blocks.
                    if list(conn.notifies(timeout=0)):
                        self.on_wake()
                    if not self._stop.is_set():
                        sel.select()  # until the server sends something, or stop()
            except Exception as exc:
                self.listening.clear()
                self.pid = None
                if self._stop.is_set():
                    return
                log.warning(
                    "listener on %r lost its connection (%s); polling, reconnecting in %.1fs",
                    self.channel,
                    exc.__class__.__name__,
                    backoff,
                )
                self._stop.wait(backoff)
                backoff = min(backoff * 2, RECONNECT_MAX)
            finally:
                self.listening.clear()
                self.pid = None
                if sel is not None:
                    sel.close()
                if conn is not None:
                    with contextlib.suppress(Exception):  # closing a dead connection
                        conn.close()


def start_listener(worker: Worker) -> Listener | None:
    """Start the listener a worker wants, or None to poll only."""
    store = worker.store
    listen = getattr(worker.queue, "listen", None)
    if listen is False:
        return None
    if not store.dialect.capabilities.listen_notify:
        if listen:
            log.info("%s has no LISTEN/NOTIFY: polling only", store.dialect.name)
        return None
    try:
        import psycopg  # noqa: F401
    except ImportError:
        log.warning("LISTEN needs the psycopg driver, which is not installed: polling only")
        return None
    raw = getattr(store, "_raw_engine", None)
    url = raw.url if raw is not None else store.engine.url
    # The schema is the one the store's own connections see (their search_path may come
    # from connect arguments the listener's connection does not share).
    base = channel_for(store.tables.jobs.name[: -len("jobs")])
    channel = store.read(
        lambda conn: conn.execute(
            sa.text(f"SELECT :base || {SCHEMA_SUFFIX}"), {"base": base}
        ).scalar_one()
    )
    listener = Listener(conninfo_for(url), channel, worker._inbox.wake.set)
    worker._listener = listener
    return listener.start()
