"""What every unit of the store works with: the tables, the dialect, the clock, the hooks.

A unit is a function of a :class:`StoreContext` and an open connection. It never opens
or ends a transaction (:mod:`readyq.store.transactions` does) and calls other units only
through their public names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from readyq.dialects import Dialect, ReadyNotifier, RecordsProgressInClaim
from readyq.schema import Tables


@dataclass
class Clock:
    """Seconds added to the database's clock.

    Tests move time forward with it instead of sleeping; it shifts every comparison the
    same way, as a faster clock would. It is read when each statement runs, so
    statements built once follow it.
    """

    offset: float = 0.0

    def expression(self, dialect: Dialect) -> sa.ColumnElement[float]:
        """The database clock plus the offset, as one expression."""
        offset = sa.bindparam(
            "rq_clock_offset", type_=sa.Double, callable_=lambda: self.offset
        )
        return dialect.now() + offset


@dataclass
class Hooks:
    """Callbacks the tests use to step into a transaction."""

    # Called with the connection inside each claim transaction.
    on_claim_transaction: Callable[[Connection], None] | None = None


@dataclass(frozen=True)
class StoreContext:
    """The tables of one prefix on one connected database.

    ``now`` is the database's clock (see :class:`Clock`). ``notifier`` wakes listening
    workers from a transaction that made jobs ready, where the database can (None
    elsewhere, or when the queue was made with ``listen=False``).
    """

    tables: Tables
    dialect: Dialect
    now: sa.ColumnElement[float]
    notifier: ReadyNotifier | None = None
    hooks: Hooks = field(default_factory=Hooks)
    # The dialect where its claim statement also stores the fair-share progress (None
    # elsewhere). Checked once here: ``isinstance`` against a runtime protocol walks the
    # protocol's members at every call, tens of microseconds on Python 3.11.
    progress_recorder: RecordsProgressInClaim | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        d = self.dialect
        object.__setattr__(
            self, "progress_recorder", d if isinstance(d, RecordsProgressInClaim) else None
        )

    def notify_ready(self, conn: Connection) -> None:
        """Wake listening workers when this transaction commits (no-op without a
        notifier)."""
        if self.notifier is not None:
            self.notifier.send(conn)
