"""Live updates: what tells an open page to refresh.

Where the database delivers notifications (PostgreSQL's LISTEN/NOTIFY: see
:mod:`readyq.wakeup`), one listener per app counts the wake-ups that workers send when
jobs become ready, and each page's event stream (``/api/events``, server-sent events)
passes them on, at most one a second. Elsewhere, and as the backstop on PostgreSQL for
what sends no notification (a job that ends), the pages poll.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from readyq.dialects import Listener
from readyq.wakeup import start_listener

log = logging.getLogger("readyq.web")


class Changes:
    """A counter of the store's wake-ups that coroutines can wait on.

    The listener's thread increments the counter; a waiting stream looks at it a few
    times a second. Nothing here is bound to one event loop, so one counter serves an
    app whatever loop (or loops, as in a test client) runs its requests.
    """

    # How often a waiting stream looks at the counter.
    TICK = 0.2

    def __init__(self, store: Any, call: Callable[..., Any]) -> None:
        self.store = store
        self.call = call  # runs a blocking function off the event loop
        self.version = 0
        self.listener: Listener | None = None
        self.started = False

    @property
    def listening(self) -> bool:
        """Whether wake-ups arrive by notification (else the pages poll)."""
        return self.listener is not None

    async def start(self) -> None:
        """Start the listener once (idempotent); without notifications, do nothing."""
        if self.started:
            return
        self.started = True
        try:
            self.listener = await self.call(start_listener, self.store, None, self.wake)
        except Exception:  # the pages poll instead
            log.warning("the dashboard cannot listen for notifications; its pages poll",
                        exc_info=True)
            self.listener = None

    def wake(self) -> None:
        """Called from the listener's thread for each batch of notifications."""
        self.version += 1

    async def wait(self, seen: int, timeout: float) -> int:
        """The version once it differs from ``seen``, or after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while self.version == seen and (left := end - loop.time()) > 0:
            await asyncio.sleep(min(self.TICK, left))
        return self.version

    def stop(self) -> None:
        listener, self.listener = self.listener, None
        if listener is not None:
            listener.stop()
