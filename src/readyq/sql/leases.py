"""Writes about claimed jobs, each fenced by the lease: the job's owner and token.

``fence`` is the test that a row is one of the given (id, token) pairs held by the given
owner (:func:`held_by`, with the dialect's ``pairs_match``); a fenced-out row is simply
not updated.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from readyq.model import IN_FLIGHT_STATES
from readyq.schema import Tables
from readyq.sql.ready import state_in


def held_by(
    t: Tables, owner: str, pairs: sa.ColumnElement[bool]
) -> sa.ColumnElement[bool]:
    """The fence of a write about claimed jobs: ``pairs``, the test that a row is one of
    the (id, token) leases, and the lease held by ``owner``."""
    return sa.and_(pairs, t.jobs.c.lease_owner == owner)


def fenced_start(
    t: Tables,
    now: sa.ColumnElement[float],
    fence: sa.ColumnElement[bool],
    *,
    timeout: float | None,
    retry_on_timeout: bool,
) -> sa.Update:
    """Leased jobs to running, with their deadline and timeout policy."""
    j = t.jobs
    return (
        sa.update(j)
        .where(fence, j.c.state == "leased")
        .values(
            state="running",
            started_at=now,
            deadline=None if timeout is None else now + timeout,
            retry_on_timeout=retry_on_timeout,
            updated_at=now,
        )
    )


def fenced_heartbeat(
    t: Tables, now: sa.ColumnElement[float], fence: sa.ColumnElement[bool], lease_ttl: float
) -> sa.Update:
    """Leases of jobs in flight extended by ``lease_ttl`` seconds."""
    j = t.jobs
    return (
        sa.update(j)
        .where(fence, state_in(t, *IN_FLIGHT_STATES))
        .values(lease_expires=now + lease_ttl, heartbeat_at=now)
    )


def fenced_hand_back(
    t: Tables, now: sa.ColumnElement[float], fence: sa.ColumnElement[bool]
) -> sa.Update:
    """Jobs in flight back to ready with the attempt uncharged, unless a cancel was asked
    (the lease sweep then cancels them)."""
    j = t.jobs
    return (
        sa.update(j)
        .where(fence, j.c.state.in_(IN_FLIGHT_STATES), j.c.cancel_requested == sa.false())
        .values(
            state="ready",
            attempts=j.c.attempts - 1,
            run_after=None,
            lease_expires=None,
            deadline=None,
            started_at=None,
            updated_at=now,
        )
    )


def done_values(now: sa.ColumnElement[float], result: Any) -> dict[str, Any]:
    """The SET clause that ends an attempt done, with its result."""
    return {
        "state": "done",
        "result": result,
        "error": None,
        "finished_at": now,
        "lease_expires": None,
        "deadline": None,
        "updated_at": now,
    }
