"""How a worker wakes: it always polls, and listens where the database delivers
notifications.

Every worker polls at ``poll_interval``. On a database that implements
:class:`readyq.dialects.Notifies` (PostgreSQL's LISTEN/NOTIFY), a worker also keeps a
listener, which calls the worker's wake-up on each notification: a job made ready by
another process starts without waiting for the next poll, and many notifications
coalesce into one tick. Polling stays the floor, so a lost notification, a listener
that is down or one that cannot be set up only costs latency.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from readyq.dialects import Listener, Notifies

if TYPE_CHECKING:
    from readyq.store import Store

log = logging.getLogger("readyq.wakeup")


def start_listener(
    store: Store, listen: bool | None, on_wake: Callable[[], None]
) -> Listener | None:
    """Start listening for the store's wake-ups, calling ``on_wake`` for each; None when
    the worker polls only (``listen=False``, or a database without notifications)."""
    if listen is False:
        return None
    dialect = store.dialect
    if not isinstance(dialect, Notifies):
        if listen:
            log.info("%s has no LISTEN/NOTIFY: polling only", dialect.database)
        return None
    channel = store.read(lambda conn: dialect.listen_channel(conn, store.tables.prefix))
    return dialect.start_listener(store.url, channel, on_wake)
