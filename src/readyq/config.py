"""A worker's options: one frozen definition, its defaults and its checks.

``Queue.worker``, ``Queue.run_worker`` and their asyncio twins take the same keyword
arguments (:class:`WorkerOptionsDict`) and build one :class:`WorkerOptions` from them,
so every option and default is written here once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TypedDict

from readyq.errors import ConfigurationError
from readyq.isolation import DEFAULT_KILL_GRACE, ISOLATIONS
from readyq.planning.caps import Limit, Limits, normalize
from readyq.schema import MAX_SECONDS, MAX_WORKER_ID_CHARS, key_problem
from readyq.untrusted import has_controls

DEFAULT_CONCURRENCY = 1
DEFAULT_LEASE_TTL = 30.0
DEFAULT_HEARTBEAT_INTERVAL = 10.0
DEFAULT_POLL_INTERVAL = 1.0
DEFAULT_SHUTDOWN_GRACE = 0.0


class WorkerOptionsDict(TypedDict, total=False):
    """The keyword arguments of ``Queue.worker`` (see :class:`WorkerOptions`)."""

    concurrency: Limits
    lease_ttl: float | timedelta
    heartbeat_interval: float | timedelta
    poll_interval: float | timedelta
    types: Sequence[str] | None
    worker_id: str | None
    max_running: int | None
    shutdown_grace: float | timedelta
    freeze_gc: bool
    isolation: str
    kill_grace: float | timedelta
    max_jobs_per_child: int | None
    max_memory_per_child: int | None
    fire_schedules: bool


def _positive_seconds(value: float | timedelta, what: str) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not math.isfinite(seconds)
        or not 0 < seconds <= MAX_SECONDS
    ):
        raise ConfigurationError(
            f"{what} must be a positive duration of at most a century, not {value!r}"
        )
    return float(seconds)


@dataclass(frozen=True, init=False)
class WorkerOptions:
    """How a worker runs; every field is checked when the options are made, and holds
    its checked form: durations in seconds (a timedelta given is converted), and
    ``concurrency`` as its tuple of limits.

    Args:
        concurrency: the global cap: an int, a callable re-read every tick (free GPU
            slots, API budget...), or a list of them, combined as their minimum. It holds
            across every worker process on the database.
        lease_ttl: how long a claim lives without a heartbeat (seconds or timedelta).
        heartbeat_interval: how often running jobs' leases are extended; at most half of
            ``lease_ttl``.
        poll_interval: longest wait between two looks for runnable jobs.
        types: job types this worker runs (default: every registered handler).
        worker_id: the id its leases carry (default: host, pid and random bits).
        max_running: most jobs this process runs at once (default: the whole cap). The
            cap is global, so without it one process may take every slot.
        shutdown_grace: seconds that SIGTERM/SIGINT (handled while the worker runs in the
            main thread) give running jobs to finish; the rest are then handed back at
            once, uncharged. A second signal hands them back immediately.
        freeze_gc: while the worker runs, leave the objects that existed when it started
            out of the garbage collector's passes (``gc.freeze()``, process-wide, undone
            when the last worker of the process returns).
        isolation: where handlers that do not choose run: ``"thread"`` (the default) or
            ``"process"``, a child process the worker kills at the timeout (see
            :mod:`readyq.isolation`). ``async def`` handlers stay on the event loop
            unless their registration asks for a process.
        kill_grace: seconds between the SIGTERM and the SIGKILL of a child at its
            timeout (and at a terminating cancel).
        max_jobs_per_child: jobs a child runs before it is replaced (default: no limit).
        max_memory_per_child: bytes of resident memory a child may use; past them it is
            killed and its attempt fails, saying so (default: no limit; Linux only).
        fire_schedules: whether this worker fires the queue's schedules (the default);
            False leaves them to other workers, such as one process kept for them.

    Raises:
        ConfigurationError: for a value out of its range.
    """

    concurrency: tuple[Limit, ...]
    lease_ttl: float
    heartbeat_interval: float
    poll_interval: float
    types: Sequence[str] | None
    worker_id: str | None
    max_running: int | None
    shutdown_grace: float
    freeze_gc: bool
    isolation: str
    kill_grace: float
    max_jobs_per_child: int | None
    max_memory_per_child: int | None
    fire_schedules: bool

    def __init__(
        self,
        concurrency: Limits = DEFAULT_CONCURRENCY,
        lease_ttl: float | timedelta = DEFAULT_LEASE_TTL,
        heartbeat_interval: float | timedelta = DEFAULT_HEARTBEAT_INTERVAL,
        poll_interval: float | timedelta = DEFAULT_POLL_INTERVAL,
        types: Sequence[str] | None = None,
        worker_id: str | None = None,
        max_running: int | None = None,
        shutdown_grace: float | timedelta = DEFAULT_SHUTDOWN_GRACE,
        freeze_gc: bool = True,
        isolation: str = "thread",
        kill_grace: float | timedelta = DEFAULT_KILL_GRACE,
        max_jobs_per_child: int | None = None,
        max_memory_per_child: int | None = None,
        fire_schedules: bool = True,
    ) -> None:
        # Each option keeps its name from the API down: the field holds its checked form.
        set_ = object.__setattr__
        set_(self, "concurrency", normalize(concurrency))
        set_(self, "lease_ttl", _positive_seconds(lease_ttl, "lease_ttl"))
        set_(
            self,
            "heartbeat_interval",
            _positive_seconds(heartbeat_interval, "heartbeat_interval"),
        )
        set_(self, "poll_interval", _positive_seconds(poll_interval, "poll_interval"))
        set_(self, "types", types)
        set_(self, "worker_id", worker_id)
        set_(self, "max_running", max_running)
        set_(self, "freeze_gc", freeze_gc)
        set_(self, "isolation", isolation)
        set_(self, "max_jobs_per_child", max_jobs_per_child)
        set_(self, "max_memory_per_child", max_memory_per_child)
        set_(self, "fire_schedules", fire_schedules)
        grace = shutdown_grace
        grace = grace.total_seconds() if isinstance(grace, timedelta) else grace
        if (
            isinstance(grace, bool)
            or not isinstance(grace, (int, float))
            or not 0 <= grace <= MAX_SECONDS
        ):
            raise ConfigurationError(
                f"shutdown_grace must be a duration >= 0, not {shutdown_grace!r}"
            )
        set_(self, "shutdown_grace", float(grace))
        set_(self, "kill_grace", _positive_seconds(kill_grace, "kill_grace"))
        self._check()

    def _check(self) -> None:
        max_running = self.max_running
        if max_running is not None and (
            isinstance(max_running, bool) or not isinstance(max_running, int) or max_running < 1
        ):
            raise ConfigurationError(f"max_running must be an int >= 1, not {max_running!r}")
        for name in ("freeze_gc", "fire_schedules"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ConfigurationError(f"{name} must be True or False, not {value!r}")
        if self.heartbeat_interval * 2 > self.lease_ttl:
            raise ConfigurationError(
                f"heartbeat_interval ({self.heartbeat_interval:g}s) must be at most half of "
                f"lease_ttl ({self.lease_ttl:g}s), so that one late heartbeat does not "
                "lose the lease"
            )
        if self.isolation not in ISOLATIONS:
            raise ConfigurationError(
                f"isolation must be one of {', '.join(ISOLATIONS)}, not {self.isolation!r}"
            )
        for name in ("max_jobs_per_child", "max_memory_per_child"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ConfigurationError(f"{name} must be an int >= 1, not {value!r}")
        worker_id = self.worker_id
        if worker_id is not None:
            problem = key_problem(worker_id)
            if problem is None and len(worker_id) > MAX_WORKER_ID_CHARS:
                problem = f"must be at most {MAX_WORKER_ID_CHARS} characters"
            if problem is None and has_controls(worker_id):
                problem = "must not contain control characters"
            if problem is not None:
                # It is written into every lease and log line of the worker.
                raise ConfigurationError(f"worker_id {problem}: {worker_id!r}")
        if self.types is not None and (
            isinstance(self.types, (str, bytes)) or not all(isinstance(t, str) for t in self.types)
        ):
            raise ConfigurationError(f"types must be a list of job types, not {self.types!r}")
