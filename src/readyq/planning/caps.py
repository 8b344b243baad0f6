"""The concurrency cap: the minimum of external limits, re-read at every tick."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import cast

from readyq.errors import ConfigurationError

log = logging.getLogger("readyq.caps")

Limit = int | Callable[[], int]
Limits = Limit | Sequence[Limit]

# The largest cap: a claim binds it as an INTEGER parameter, and no process runs more.
MAX_CAP = 1_000_000


def normalize(limits: Limits) -> tuple[Limit, ...]:
    """Check the limits given to a worker and return them as a tuple."""
    items: tuple[Limit, ...] = (
        tuple(limits) if isinstance(limits, (list, tuple)) else (cast(Limit, limits),)
    )
    if not items:
        raise ConfigurationError("concurrency needs at least one limit")
    for item in items:
        if isinstance(item, bool) or not (isinstance(item, int) or callable(item)):
            raise ConfigurationError(
                f"a concurrency limit must be an int or a callable returning one, not {item!r}"
            )
        if isinstance(item, int) and item < 1:
            # A worker that may never start a job would idle for ever; a callable may
            # still read 0 at a tick (an external limit spent for now).
            raise ConfigurationError(
                f"a concurrency limit given as a number must be at least 1, not {item}"
            )
        if isinstance(item, int) and item > MAX_CAP:
            raise ConfigurationError(f"a concurrency limit is at most {MAX_CAP:,}, not {item}")
    return items


def current_cap(limits: Sequence[Limit]) -> int:
    """Evaluate every limit now and return their minimum, from 0 to MAX_CAP.

    A callable that raises or returns something that is not an int counts as 0: when an
    external limit cannot be read, starting nothing is the safe choice. One that returns
    more than MAX_CAP counts as MAX_CAP (more would mean the same: no limit).
    """
    values: list[int] = []
    for item in limits:
        if callable(item):
            try:
                value = item()
            except Exception:
                log.exception("concurrency limit %r raised; using 0 for this tick", item)
                value = 0
            if isinstance(value, bool) or not isinstance(value, int):
                log.error("concurrency limit %r returned %r, not an int; using 0", item, value)
                value = 0
        else:
            value = item
        values.append(min(max(0, value), MAX_CAP))
    return min(values)
