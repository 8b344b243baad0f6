"""The rows of the reads a claim that weighs resources makes under the gate row's lock
(:meth:`readyq.dialects.base.Dialect.resource_state` and ``resource_flight``): one
``UNION ALL`` whose parts each fill some columns, tagged by kind."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from readyq.schema import Tables

# The columns of every row of the read, in order after its kind: each part fills some
# and leaves the others NULL, typed so that the union's types agree.
_STATE_COLUMNS: tuple[tuple[str, Callable[[Tables], Any]], ...] = (
    ("group_key", lambda t: t.jobs.c.group_key.type), ("uses", lambda t: t.jobs.c.uses.type),
    ("n", lambda t: sa.BigInteger()), ("w", lambda t: sa.Integer()),
    ("job_id", lambda t: sa.BigInteger()), ("seq", lambda t: sa.BigInteger()),
    ("state", lambda t: t.jobs.c.state.type), ("type", lambda t: t.jobs.c.type.type),
    ("priority", lambda t: sa.Integer()), ("due", lambda t: sa.Integer()),
    ("vf", lambda t: sa.Double()),
)


def state_row(t: Tables, kind: int, **cols: Any) -> list[Any]:
    """A row of ``resource_state`` of ``kind`` (0 in flight, 1 reservation, 2 history,
    3 head; 4 in ``resource_flight``, a ready job with costs) with ``cols``, the other
    columns NULL."""
    out: list[Any] = [sa.literal(kind).label("kind")]
    for name, type_of in _STATE_COLUMNS:
        value = cols.get(name)
        out.append(
            sa.cast(sa.null(), type_of(t)).label(name) if value is None else value.label(name)
        )
    return out
