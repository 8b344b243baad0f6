"""The records that cross the dialect seam: what the store hands a dialect's operations
(a claim's request, the fair-share progress to store) and what they hand back (a claim's
receipt, a batch's dependents, what a claim that weighs resources reads), and the
database's :class:`Capabilities`. Plain values, without SQL or I/O."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from readyq.model import ClaimedJob

if TYPE_CHECKING:
    from readyq.claim_order import ClaimOrder


@dataclass(frozen=True)
class Capabilities:
    """What a database can do, for callers that must not test dialect names."""

    skip_locked: bool
    returning: bool
    partial_index: bool
    listen_notify: bool
    row_locks: bool
    # A unit of one statement (a read, or a write that is its own transaction) may run in
    # autocommit without costing a round trip: psycopg sets autocommit on the client
    # side, while PyMySQL sends a SET for it.
    cheap_autocommit: bool = False


@dataclass(frozen=True)
class ClaimRequest:
    """One group's share of a claim transaction."""

    # The whole claim: its owner, lease and start policies (``order.start``: start the
    # jobs as they are claimed, running with a deadline, instead of leaving them leased).
    order: ClaimOrder
    group: str
    limit: int
    # The order's types as rate limits and pauses left them for this group.
    types: Sequence[str] | None
    # job type -> the stored form of its handler's resource costs, written into the jobs
    # of the type claimed without costs of their own (see readyq.resources).
    uses: Mapping[str, str] | None = None

    def shape(self) -> tuple[Any, ...]:
        """What the claim statement's text depends on (the rest is bound at execution)."""
        start = self.order.start
        return (
            None if self.types is None else tuple(self.types),
            None if start is None else tuple(sorted(start.items())),
            None if not self.uses else tuple(sorted(self.uses.items())),
        )

    def params(self) -> dict[str, Any]:
        """The values bound into a claim statement built by :func:`readyq.sql.claims.lease_values`
        and :func:`readyq.sql.ready.runnable` with ``group=GROUP``."""
        return {"rq_owner": self.order.owner, "rq_group": self.group, "rq_limit": self.limit,
                "rq_lease_ttl": self.order.lease_ttl}


class ClaimReceipt(NamedTuple):
    """A claim whose rows may be read after its transaction commits: ``claimed`` jobs,
    ``read()`` returns them."""

    claimed: int
    read: Callable[[], list[ClaimedJob]]


class Dependents(NamedTuple):
    """The dependents of some jobs: ``edges`` maps each dependent's id to its edges from
    those jobs; ``containers`` holds the dependents that are containers, whose end a
    release may decide (see :func:`readyq.store.graph.propagate`)."""

    edges: Counter[int]
    containers: frozenset[int] = frozenset()


class MarkedDone(NamedTuple):
    """What :meth:`readyq.dialects.base.Dialect.mark_done` did: ``marked`` rows and,
    when that is the whole batch, the batch's dependents."""

    marked: int
    dependents: Dependents | None


def dependents_from(rows: Iterable[Any]) -> Dependents:
    """:class:`Dependents` from (dependent id, is_container) rows, one per edge; rows
    without a dependent (an outer join's) are skipped."""
    edges: Counter[int] = Counter()
    boxes: set[int] = set()
    for dependent, is_container in rows:
        if dependent is None:
            continue
        edges[int(dependent)] += 1
        if is_container:
            boxes.add(int(dependent))
    return Dependents(edges, frozenset(boxes))


class Progress(NamedTuple):
    """What a claim stores of fair share: (group, vfinish, served_seq) per group served,
    the groups that already have a row, and the gate's new clock and sequence."""

    rows: Sequence[tuple[str, float, int]]
    known: set[str]
    vclock: float
    seq: int


class ResourceState(NamedTuple):
    """What a claim that weighs resources reads under the gate row's lock (see
    :meth:`readyq.dialects.base.Dialect.resource_state`)."""

    # (group, stored costs, jobs, largest weight) of the jobs in flight.
    flight: list[tuple[str, str | None, int, int]]
    # (job id, seq, held costs, state, type, group, weight, due) per reservation, oldest
    # first; the job's columns are None for a job that is gone.
    reservations: list[tuple[Any, ...]]
    # group -> (vfinish, served_seq), for the groups asked for that have a history.
    history: dict[str, tuple[float, int]]
    # (id, group, type, stored costs, weight, priority) of the groups' first jobs.
    heads: list[tuple[Any, ...]]


class ResourceFlight(NamedTuple):
    """What a claim that weighs resources reads first, to tell whether the costs can
    change its plan (see :meth:`readyq.dialects.base.Dialect.resource_flight`)."""

    # (group, stored costs, jobs, largest weight) of the jobs in flight.
    flight: list[tuple[str, str | None, int, int]]
    # group -> (vfinish, served_seq), for the groups asked for that have a history.
    history: dict[str, tuple[float, int]]
    # Whether any reservation is stored.
    reserved: bool
    # Whether any ready job of the types asked for has costs of its own.
    costed: bool
