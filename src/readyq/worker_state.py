"""The state a worker's parts share: its running attempts, the inbox of their outcomes,
and its counters.

The loop (:mod:`readyq.worker`), the recording of outcomes (:mod:`readyq.recording`) and
the attempts in child processes (:mod:`readyq.child_attempts`) each receive the pieces
they use; none of them owns another.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from readyq.handlers import HandlerSpec
from readyq.model import ClaimedJob, Flag, Job, LeaseFlag, job_log_fields
from readyq.store import Outcome


class LoopEvent(Protocol):
    """What the loop waits on and is woken by: a ``threading.Event``, or an event the
    asyncio worker's loop awaits (see :mod:`readyq.aio.worker`)."""

    def set(self) -> None: ...

    def clear(self) -> None: ...

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


@dataclass
class WorkerStats:
    """Counters of one worker's run."""

    claimed: int = 0
    done: int = 0
    retried: int = 0
    failed: int = 0
    cancelled: int = 0
    fenced_out: int = 0
    leases_lost: int = 0
    reclaimed: int = 0
    timed_out: int = 0
    db_errors: int = 0
    ticks: int = 0
    # Schedule occurrences this worker enqueued (readyq.firing).
    fired: int = 0


@dataclass(slots=True)
class RunningAttempt:
    """An attempt this worker holds a lease for."""

    claimed: ClaimedJob
    job: Job
    spec: HandlerSpec
    # The job's ``lease_lost`` and ``cancelled``, set by this worker; ``lost`` is also
    # true by itself once the lease may have run out (see readyq.heartbeats).
    lost: LeaseFlag
    cancelled: Flag
    cancel_seen: bool = False
    # Whether the attempt runs in a span (asked once per claimed batch: the check reads
    # the environment when no provider is set).
    traced: bool = False
    # Whether the handler runs in a child process (see readyq.isolation).
    isolated: bool = False
    # Why the stored args cannot be read (a row written by hand), when they cannot: the
    # attempt then fails without running.
    unreadable: str | None = None


@dataclass
class Inbox:
    """Outcomes handed to the loop, the event that wakes it, and whether a database
    notification (new work) woke it since its last claim."""

    outcomes: deque[Outcome] = field(default_factory=deque)
    wake: LoopEvent = field(default_factory=threading.Event)
    notified: bool = False

    def notify(self) -> None:
        """Wake the loop for a database notification (called by the listener)."""
        self.notified = True
        self.wake.set()

    def take_notified(self) -> bool:
        """Whether a notification came since the last call (then forgotten)."""
        if not self.notified:
            return False
        self.notified = False
        return True


def claimed_fields(c: ClaimedJob) -> dict[str, object]:
    """The structured log fields of an attempt (never its args)."""
    return job_log_fields(c.id, c.type, c.attempt, c.group)
