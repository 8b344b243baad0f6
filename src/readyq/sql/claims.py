"""The claim's statements: the columns a claim returns and the SET clause of its lease,
a group's first runnable jobs in claim order, and the rows read back as claimed jobs.

Portable builders; a dialect decides how they run (a row lock, an index hint, one
statement or two) and completes them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from readyq.model import ClaimedJob
from readyq.schema import DEFAULT_MAX_ATTEMPTS, GATE_ID, MAX_ATTEMPTS_FROM_HANDLER, Tables
from readyq.sql.ready import Part, as_is, claim_sort_keys, merged_head, merged_types, runnable

if TYPE_CHECKING:
    from readyq.dialects.records import ClaimRequest

# Bound parameters of a claim statement; ClaimRequest.params() gives their values.
OWNER = sa.bindparam("rq_owner", type_=sa.String)
GROUP = sa.bindparam("rq_group", type_=sa.String)
LIMIT = sa.bindparam("rq_limit", type_=sa.Integer)
LEASE_TTL = sa.bindparam("rq_lease_ttl", type_=sa.Double)


_NEW_CLAIMED = functools.partial(tuple.__new__, ClaimedJob)


def claimed_rows(rows: Iterable[Any]) -> list[ClaimedJob]:
    """ClaimedJobs from rows of the claim's columns read after its UPDATE (RETURNING).

    ``tuple.__new__`` makes each with no Python frame per row; the claim's columns are
    ClaimedJob's fields, in order."""
    return list(map(_NEW_CLAIMED, rows))


def claimed_from_row(
    row: Any, *, before_update: bool = False, req: ClaimRequest | None = None
) -> ClaimedJob:
    """Build a ClaimedJob from a row of the claim's columns (``claim_columns``).

    ``before_update`` says the row was read before the claim's UPDATE (MySQL), so the
    attempt and the fencing token are one more than read, and ``max_attempts`` is what
    the UPDATE of ``req`` (:func:`lease_values`) sets.
    """
    if not before_update:
        return ClaimedJob._make(row)
    id_, type_, args, attempts, max_attempts, token, group, parent, timeout = row
    if max_attempts == MAX_ATTEMPTS_FROM_HANDLER:
        policy = (req.order.start or {}).get(type_) if req is not None else None
        given = policy.max_attempts if policy is not None else None
        max_attempts = given or DEFAULT_MAX_ATTEMPTS
    return ClaimedJob(
        id_, type_, args, int(attempts) + 1, max_attempts, int(token) + 1, group, parent,
        timeout,
    )


def claim_head(
    t: Tables,
    now: sa.ColumnElement[float],
    group: str | sa.ColumnElement[str],
    types: Sequence[str] | None,
    limit: sa.ColumnElement[int],
    *columns: sa.ColumnElement[Any],
    part: Part = as_is,
    costed: bool = False,
) -> sa.Select[Any]:
    """``columns`` of a group's first ``limit`` runnable jobs of ``types``, in claim
    order (with ``costed``, jobs that take resources too). For a worker of a few types,
    the merge of one read per type (:func:`readyq.sql.ready.merged_head`), ``part``
    applied to each read; otherwise one read, which the caller completes (a row lock, an
    index hint)."""
    many = merged_types(types)
    if many is not None:
        return merged_head(t, now, group, many, limit, *columns, part=part, costed=costed)
    return (
        sa.select(*columns)
        .where(runnable(t, now, group=group, types=types, costed=costed))
        .order_by(*claim_sort_keys(t, types))
        .limit(limit)
    )


def group_heads(
    t: Tables,
    now: sa.ColumnElement[float],
    types: Sequence[str] | None,
    n: int,
    *columns: sa.ColumnElement[Any],
) -> list[sa.Select[Any]]:
    """One select per group of a multi-group claim, in claim order and limited: group
    ``i`` and its limit are bound as ``c_g{i}`` and ``c_n{i}`` (see
    :func:`group_head_params`)."""
    return [
        claim_head(
            t,
            now,
            sa.bindparam(f"c_g{i}", type_=t.jobs.c.group_key.type),
            types,
            sa.bindparam(f"c_n{i}", type_=sa.Integer),
            *columns,
        )
        for i in range(n)
    ]


def group_head_params(requests: Sequence[ClaimRequest]) -> dict[str, Any]:
    """The parameters of :func:`group_heads` for ``requests``, with the first request's
    own (owner, lease length, ...)."""
    params = requests[0].params()
    for i, req in enumerate(requests):
        params[f"c_g{i}"] = req.group
        params[f"c_n{i}"] = req.limit
    return params


def claim_columns(t: Tables) -> list[sa.Column[Any]]:
    j = t.jobs
    return [
        j.c.id,
        j.c.type,
        j.c.args,
        j.c.attempts,
        j.c.max_attempts,
        j.c.lease_token,
        j.c.group_key,
        j.c.parent_id,
        j.c.timeout,
    ]


def lease_values(t: Tables, req: ClaimRequest, now: sa.ColumnElement[float]) -> dict[str, Any]:
    """The SET clause of a claim: a new lease, a new fencing token, one more attempt.

    The owner and the lease length are bound parameters (``req.params()``); only the
    start policies shape the SQL."""
    j = t.jobs
    start = req.order.start
    # Jobs enqueued without max_attempts take their handler's now (the rule: a value given
    # at enqueue wins, else the registration of the handler that runs the job).
    # (A type whose handler's value is the fallback needs no arm of its own.)
    attempts = {
        k: n
        for k, v in (start or {}).items()
        if v.max_attempts and (n := v.max_attempts) != DEFAULT_MAX_ATTEMPTS
    }
    resolved: Any = (
        sa.case(attempts, value=j.c.type, else_=DEFAULT_MAX_ATTEMPTS)
        if attempts
        else DEFAULT_MAX_ATTEMPTS
    )
    values: dict[str, Any] = {
        "max_attempts": sa.case(
            (j.c.max_attempts == MAX_ATTEMPTS_FROM_HANDLER, resolved), else_=j.c.max_attempts
        ),
        "state": "leased",
        "lease_owner": OWNER,
        "lease_token": j.c.lease_token + 1,
        "attempts": j.c.attempts + 1,
        "lease_expires": now + LEASE_TTL,
        "heartbeat_at": now,
        "updated_at": now,
        "cancel_requested": False,
    }
    if req.uses:
        # Jobs stored without costs take their handler's, recorded here so that every
        # other claim counts them while they are in flight.
        values["uses"] = sa.func.coalesce(
            j.c.uses, sa.case(dict(req.uses), value=j.c.type, else_=sa.null())
        )
    if start is not None:
        timeouts = {k: v.timeout for k, v in start.items() if v.timeout is not None}
        # (A type that retries on timeout, as the ELSE does, needs no arm of its own.)
        retries = {k: False for k, v in start.items() if not v.retry_on_timeout}
        by_type: Any = sa.case(timeouts, value=j.c.type, else_=sa.null()) if timeouts else sa.null()
        values.update(
            state="running",
            started_at=now,
            deadline=now + sa.func.coalesce(j.c.timeout, by_type),
            retry_on_timeout=sa.case(retries, value=j.c.type, else_=sa.true())
            if retries
            else sa.true(),
        )
    return values


def gate_clock_update(t: Tables) -> sa.Update:
    """The UPDATE that stores the fair-share clock in the gate row, ``vclock`` and
    ``seq`` bound at execution."""
    return (
        sa.update(t.gate)
        .where(t.gate.c.id == GATE_ID)
        .values(vclock=sa.bindparam("vclock"), seq=sa.bindparam("seq"))
    )
