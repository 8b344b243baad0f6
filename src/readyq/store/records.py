"""The records the store's units exchange with their callers.

New jobs on their way in; how an attempt ended, on its way back from a worker; the fence
of a claimed job; what a sweep did. Plain tuples and frozen dataclasses, no behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import NamedTuple

from readyq.model import ClaimedJob


class NewJob(NamedTuple):
    """A validated job, ready to insert."""

    type: str
    args_json: str
    group: str = "default"
    weight: int = 1
    priority: int = 0
    max_attempts: int = 3
    timeout: float | None = None
    run_after_at: float | None = None
    run_after_delay: float | None = None
    depends_on: tuple[int, ...] = ()
    parent: int | None = None
    is_container: bool = False
    unique_key: str | None = None
    # Canonical JSON of the resources the job takes (readyq.resources), or None.
    uses: str | None = None
    # Its JobSpec.key in an enqueue_many batch (stored as ``batch_key``), or None.
    key: str | None = None
    # The job whose handler spawned it (Job.spawn), or None.
    spawned_by: int | None = None


class BatchJob(NamedTuple):
    """A job of a batch: ``job`` plus references to other jobs of the same batch.

    ``deps_in_batch`` and ``parent_in_batch`` are positions in the batch; the batch is
    ordered so that they always point to earlier positions.
    """

    job: NewJob
    deps_in_batch: tuple[int, ...] = ()
    parent_in_batch: int | None = None


class Spawn(NamedTuple):
    """Jobs a handler spawned (``Job.spawn``), checked and staged: inserted with the
    attempt's ``done``, or never.

    ``batch`` is ordered as :func:`readyq.store.enqueue.insert_batch` wants it. Its jobs
    without a container go into ``parent`` (the spawner's container unless the handler
    named another; None: none). With ``join`` the spawner's dependents wait for them too.
    """

    batch: tuple[BatchJob, ...]
    join: bool = True
    parent: int | None = None


class OutcomeKind(str, Enum):
    """How an attempt ended, as its worker reports it."""

    DONE = "done"
    """The handler returned; ``result_json`` holds its result."""
    RETRY = "retry"
    """The handler raised with attempts left: ready again after ``delay`` seconds."""
    FAIL = "fail"
    """The handler raised on its last attempt: the job fails."""
    CANCEL = "cancel"
    """The job was cancelled while it ran: it ends cancelled."""
    RELEASE = "release"
    """Handed back unrun by a stopping worker; the attempt is not charged."""

    def __str__(self) -> str:
        return self.value


class Outcome(NamedTuple):
    """How one attempt ended."""

    job: ClaimedJob
    kind: OutcomeKind
    result_json: str | None = None
    error: str | None = None
    delay: float = 0.0
    # Seconds the handler ran, and the class name of what it raised: for logs and metrics.
    duration: float = 0.0
    error_type: str | None = None
    # Jobs the handler spawned: inserted with a recorded ``done`` only.
    spawns: tuple[Spawn, ...] = ()


class Lease(NamedTuple):
    """The fence of one claimed job: its id and the token its claim drew."""

    id: int
    token: int


@dataclass(frozen=True)
class LeaseStatus:
    """What a heartbeat learned about one job."""

    lost: bool
    cancel_requested: bool


@dataclass(frozen=True)
class ReclaimedJob:
    """One attempt ended by a sweep: ``outcome`` is retried, failed or cancelled and
    ``reason`` is ``timeout`` or ``lease_expired``."""

    id: int
    type: str
    attempt: int
    group: str
    outcome: str
    reason: str
    # What happened, in a log line's words, and the wait before a retry.
    what: str = ""
    retry_in: float = 0.0


@dataclass(frozen=True)
class ReclaimResult:
    """What one sweep of expired leases and passed deadlines did."""

    retried: int = 0
    failed: int = 0
    timed_out: int = 0
    cancelled: int = 0
    jobs: tuple[ReclaimedJob, ...] = ()

    @property
    def total(self) -> int:
        return self.retried + self.failed + self.cancelled


class Recorded(IntEnum):
    """What became of an outcome handed to the store (false only when fenced out)."""

    FENCED = 0
    """Not recorded: the lease was no longer this attempt's."""
    RECORDED = 1
    """Recorded by this call (or by an earlier try of it whose COMMIT reply was lost)."""
    SWEPT = 2
    """A timeout (or a hand-back) of an attempt that a sweep had already ended as timed
    out: the attempt ended as this outcome says, and the sweep's worker logged and
    counted it."""


# (job id, lease token) -> what became of the outcome.
Applied = dict[tuple[int, int], Recorded]
# The error type of an attempt that passed its deadline, and how the error a sweep
# stores for it begins.
TIMEOUT = "Timeout"
TIMED_OUT = "timed out"


