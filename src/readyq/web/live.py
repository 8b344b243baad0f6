"""Live updates: what tells an open page to refresh.

Where the database delivers notifications (PostgreSQL's LISTEN/NOTIFY: see
:mod:`readyq.wakeup`), one listener per app counts the wake-ups that workers send when
jobs become ready, and each page's event stream (``/api/events``, server-sent events)
passes them on, at most one a second. Elsewhere, and as the backstop on PostgreSQL for
what sends no notification (a job that ends), the pages poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from readyq.dialects import Listener
from readyq.wakeup import start_listener

log = logging.getLogger("readyq.web")


class Changes:
    """A counter of the store's wake-ups that coroutines can wait on."""

    def __init__(self, store: Any, call: Callable[..., Any]) -> None:
        self.store = store
        self.call = call  # runs a blocking function off the event loop
        self.version = 0
        self.listener: Listener | None = None
        self.started = False
        self.lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.event: asyncio.Event | None = None

    @property
    def listening(self) -> bool:
        """Whether wake-ups arrive by notification (else the pages poll)."""
        return self.listener is not None

    async def start(self) -> None:
        """Start the listener once (idempotent); without notifications, do nothing."""
        if self.started:
            return
        self.started = True
        self.loop = asyncio.get_running_loop()
        self.event = asyncio.Event()
        try:
            self.listener = await self.call(start_listener, self.store, None, self.wake)
        except Exception:  # the pages poll instead
            log.warning("the dashboard cannot listen for notifications; its pages poll",
                        exc_info=True)
            self.listener = None

    def wake(self) -> None:
        """Called from the listener's thread for each batch of notifications."""
        loop = self.loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self.bump)

    def bump(self) -> None:
        self.version += 1
        if self.event is not None:
            self.event.set()
            self.event = asyncio.Event()

    async def wait(self, seen: int, timeout: float) -> int:
        """The version once it differs from ``seen``, or after ``timeout`` seconds."""
        if self.version != seen or self.event is None:
            return self.version
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.event.wait(), timeout)
        return self.version

    def stop(self) -> None:
        listener, self.listener = self.listener, None
        if listener is not None:
            listener.stop()
