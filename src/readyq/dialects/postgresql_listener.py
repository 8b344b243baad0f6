"""PostgreSQL's LISTEN, from a dedicated connection in a daemon thread.

A transaction that makes jobs ready runs ``NOTIFY <prefix>wake_<schema hash>`` (see
``PostgresDialect.ready_notifier``): PostgreSQL delivers it at commit and drops it on
rollback. The listener's connection waits for those notifications and calls back once
for each batch read together; polling stays the floor, so a lost notification only
costs latency. When LISTEN does not hold (``pg_listening_channels()`` lacks the channel,
as behind a transaction-pooling proxy) the listener says so and ends; while its
connection is down it reconnects with backoff, LISTENs again and then calls back once,
for whatever was enqueued while it was away.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

log = logging.getLogger("readyq.wakeup")

RECONNECT_MIN = 0.1
RECONNECT_MAX = 5.0


def channel_for(prefix: str) -> str:
    """The base of a prefix's notification channel (prefixes are plain identifiers).

    Notifications are database-wide, so the channel also carries a hash of the schema
    the tables live in, evaluated by the server: queues with the same prefix in two
    schemas of one database do not wake each other.
    """
    return f"{prefix}wake"


def conninfo_for(url: sa.URL) -> str:
    """A libpq URI for a SQLAlchemy PostgreSQL URL, whatever its driver."""
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


class PgListener:
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

    def start(self) -> PgListener:
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
