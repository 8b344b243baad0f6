"""What a worker asks of one claim: a frozen record built once per tick.

The worker builds a :class:`ClaimOrder` from its options, handlers and the cap it reads
this tick, and hands it whole to the store, which plans the claim
(:mod:`readyq.store.claim`, :mod:`readyq.store.resource_claim`) and passes it on to the
dialect inside each group's :class:`readyq.dialects.ClaimRequest`. Each value keeps one
name from the API to the SQL: ``lease_ttl`` is the option, the field and the bound
parameter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the dialects import this module
    from readyq.rate_limits import RateLimit
    from readyq.resources import ResourceView


@dataclass(frozen=True)
class StartPolicy:
    """How the jobs of one type start when a claim starts them at once (its handler's
    registration): the deadline's length, whether a timeout is retried, and the attempts
    given to jobs enqueued without their own (None: the queue's default)."""

    timeout: float | None
    retry_on_timeout: bool = True
    max_attempts: int | None = None


@dataclass(frozen=True)
class ClaimOrder:
    """One claim's inputs.

    Attributes:
        owner: the worker id the leases carry.
        cap: the global cap read this tick (the ``concurrency`` option's current value).
        limit: the most jobs this claim takes (the worker's free slots).
        lease_ttl: seconds a claimed job's lease lives without a heartbeat.
        types: the job types the worker runs (None: every type).
        start: job type -> its :class:`StartPolicy`; given, the claim's own UPDATE starts
            the jobs (``running``, with a deadline) instead of leaving them ``leased``.
        rate_limits: job type -> the rate limit on its starts.
        resources: each resource's capacity now and the handlers' costs; None when the
            worker keeps no resources (the claim then leaves jobs that take some alone).
    """

    owner: str
    cap: int
    limit: int
    lease_ttl: float
    types: Sequence[str] | None
    start: Mapping[str, StartPolicy] | None = None
    rate_limits: Mapping[str, RateLimit] | None = None
    resources: ResourceView | None = None

    @property
    def empty(self) -> bool:
        """Whether the order can claim nothing (no cap or no free slot)."""
        return self.cap <= 0 or self.limit <= 0
