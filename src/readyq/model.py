"""Job states and the objects readyq hands to users."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from enum import Enum
from time import monotonic
from typing import Any, NamedTuple

from readyq.errors import InvalidJobOption, InvalidUniqueKey, NotInAJob


class JobState(str, Enum):
    """Where a job is in its life.

    ``waiting`` → ``ready`` → ``leased`` → ``running`` → ``done`` | ``failed``; a job can
    also end ``cancelled`` or ``upstream_failed`` (a job it depends on ended badly).
    Containers are ``active`` until their last child ends, then ``done`` or ``failed``;
    their own dependencies end them like a job's (``upstream_failed``, or ``done`` when
    the last one is done and they have no children).
    """

    WAITING = "waiting"
    READY = "ready"
    LEASED = "leased"
    RUNNING = "running"
    ACTIVE = "active"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UPSTREAM_FAILED = "upstream_failed"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATES

    @classmethod
    def stored(cls, value: str) -> JobState:
        """The state a row holds. One this readyq does not know (a row written by hand,
        or by a newer readyq) is kept as it is, in a member of its own named
        ``UNKNOWN``: neither terminal nor unfinished, shown as stored."""
        try:
            return cls(value)
        except ValueError:
            member = str.__new__(cls, value)
            member._name_ = "UNKNOWN"
            member._value_ = value
            return member

    def __str__(self) -> str:
        return self.value


TERMINAL_STATES = frozenset(
    {JobState.DONE, JobState.FAILED, JobState.CANCELLED, JobState.UPSTREAM_FAILED}
)
IN_FLIGHT_STATES = (JobState.LEASED.value, JobState.RUNNING.value)
UNFINISHED_STATES = (
    JobState.WAITING.value,
    JobState.READY.value,
    JobState.LEASED.value,
    JobState.RUNNING.value,
)
# Ends that make dependents 'upstream_failed' and containers 'failed'.
BAD_ENDS = (JobState.FAILED.value, JobState.CANCELLED.value, JobState.UPSTREAM_FAILED.value)


def job_log_fields(job_id: int, type: str, attempt: int, group: str) -> dict[str, object]:
    """The structured fields of every log record about one attempt (``extra=``).

    Args are never part of them: they may hold personal data or secrets.
    """
    return {"job_id": job_id, "job_type": type, "attempt": attempt, "group": group}


def from_epoch(value: float | None) -> datetime | None:
    """Convert a stored epoch instant to an aware UTC datetime."""
    if value is None:
        return None
    return datetime.fromtimestamp(value, tz=timezone.utc)


@dataclass(frozen=True)
class JobSpec:
    """One job of a batch for :meth:`Queue.enqueue_many`.

    ``depends_on`` and ``parent`` take ids of existing jobs (ints) or the ``key`` of
    another job of the same batch (strings), before or after it in the batch.
    ``container=True`` makes a container (see :meth:`Queue.enqueue_container`).
    ``unique_key`` deduplicates the job as in :meth:`Queue.enqueue` (not on containers).
    """

    type: str
    args: Any = None
    key: str | None = None
    group: str = "default"
    weight: int = 1
    priority: int = 0
    depends_on: Sequence[int | str] = ()
    parent: int | str | None = None
    run_after: datetime | timedelta | float | None = None
    max_attempts: int | None = None
    timeout: float | timedelta | None = None
    container: bool = False
    unique_key: str | None = None
    uses: Mapping[str, int] | None = None


@dataclass(frozen=True)
class JobProgress:
    """What a job's handler reported last with ``Job.progress``.

    ``fraction`` is ``current / total`` (None without a total); ``updated_at`` is when it
    was written (database clock).
    """

    current: float
    total: float | None
    message: str | None
    updated_at: datetime | None

    @property
    def fraction(self) -> float | None:
        if self.total is None or self.total <= 0:
            return None
        return max(0.0, min(1.0, self.current / self.total))


@dataclass(frozen=True)
class JobInfo:
    """A snapshot of one job, as returned by ``Queue.get``.

    ``attempt`` is the number of the job's latest attempt (0 before its first claim), the
    same number a handler sees as ``Job.attempt``; ``attempts`` is kept as its alias.
    """

    id: int
    type: str
    state: JobState
    args: Any
    result: Any
    error: str | None
    attempts: int
    # None until a job enqueued without max_attempts first runs: its handler decides.
    max_attempts: int | None
    group: str
    weight: int
    priority: int
    parent_id: int | None
    is_container: bool
    depends_on: tuple[int, ...]
    created_at: datetime | None
    run_after: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    lease_owner: str | None
    unique_key: str | None = None
    # Who asked for its cancel: "api" (Queue.cancel, readyq.admin), "cli", "dashboard";
    # None if nobody did. The error stays what ended the job (a handler's exception).
    cancelled_by: str | None = None
    # The job whose handler spawned this one (``Job.spawn``); None for any other job.
    spawned_by: int | None = None
    # The ``key`` it had in its ``enqueue_many`` batch (or spawn); None otherwise.
    key: str | None = None
    # What its handler reported last with ``Job.progress``; None if it never did.
    progress: JobProgress | None = None

    @property
    def attempt(self) -> int:
        """The number of the latest attempt: ``Job.attempt`` of the attempt that ran last
        (or runs now); 0 before the first claim."""
        return self.attempts

    @property
    def is_terminal(self) -> bool:
        return self.state.is_terminal


class Enqueued(NamedTuple):
    """What :meth:`readyq.Queue.enqueue_unique` did: the job's id, and whether it is new.

    ``created`` is False when a job that had not ended already held the unique key;
    ``id`` is then that job's id and nothing was written.
    """

    id: int
    created: bool


@dataclass(frozen=True)
class GroupStats:
    """What one group has waiting and running, read with the database's clock.

    Attributes:
        group: the fair-share group.
        ready: jobs that could be claimed now (ready, ``run_after`` passed).
        in_flight: jobs leased or running, on every worker.
        oldest_ready_age: seconds the longest-waiting claimable job has waited since it
            became claimable (None when nothing is ready).
    """

    group: str
    ready: int
    in_flight: int
    oldest_ready_age: float | None
    uses: dict[str, int] = field(default_factory=dict)
    """Units of each named resource the group's jobs in flight hold."""


@dataclass(frozen=True)
class ProgressStats:
    """How far one job type's jobs in flight have got, by what their handlers reported
    with ``Job.progress`` (read with :meth:`readyq.Queue.progress_stats`).

    Attributes:
        type: the job type.
        reporting: its jobs in flight that have reported progress.
        with_total: those of them that gave a total.
        mean_fraction: the mean of ``current / total`` (each clamped to 0..1) over those
            ``with_total`` jobs; None when none gave a total.
    """

    type: str
    reporting: int
    with_total: int
    mean_fraction: float | None


@dataclass(frozen=True)
class Pause:
    """A pause in force: no worker claims the jobs it names until it ends.

    Attributes:
        group: the paused group (None: every group).
        type: the paused job type (None: every type). A pause names a group, a type, or
            a type within a group.
        until: when it ends by itself, on the database clock (None: at a resume).
        since: when it was made.
    """

    group: str | None
    type: str | None
    until: datetime | None
    since: datetime



@dataclass(frozen=True)
class ScheduleInfo:
    """A periodic schedule as stored: the definition that stands and its progress.

    Attributes:
        name: the schedule's name.
        definition: the definition that stands, in words (the first queue to fire the
            schedule wrote it; see :meth:`readyq.Queue.schedule`).
        last_fire: the occurrence fired last (None: none yet).
        next_fire: the next occurrence due.
        paused: whether occurrences are skipped (see :meth:`readyq.Queue.pause_schedule`).
        conflict: a different definition of the same name seen last, in words (None: no
            worker defined it differently); that worker fires nothing of it.
        conflict_at: when that definition was seen.
        updated_at: when the row was last written.
    """

    name: str
    definition: str
    last_fire: datetime | None
    next_fire: datetime
    paused: bool
    conflict: str | None
    conflict_at: datetime | None
    updated_at: datetime


@dataclass(frozen=True)
class ResourceStats:
    """One named resource, read with the database's clock.

    Attributes:
        name: the resource.
        capacity: its capacity as a worker's claim last saw it (None if no worker has
            claimed with it defined yet).
        seen_age: seconds since a claim last recorded that capacity (None likewise).
        in_use: units held by the jobs in flight, on every worker.
        waiting: runnable jobs that use it (counted up to 10,000). A job enqueued without
            costs counts with its handler's when read through a queue that has the
            handler, and once a worker reserved it otherwise.
        wanted: units those jobs ask for, in all.
        largest: the most units one of them asks for.
        reserved: jobs whose units are held for them because they were next in
            fair-share order and did not fit.
    """

    name: str
    capacity: int | None
    seen_age: float | None
    in_use: int
    waiting: int
    wanted: int
    largest: int
    reserved: int


class ClaimedJob(NamedTuple):
    """A job claimed by a worker: what it needs to run it and to fence its writes.

    A named tuple: built for every claimed row, in the order of the claim's columns
    (see ``readyq.sql.claims.claim_columns``), so building one costs a tuple.
    """

    id: int
    type: str
    args_json: str
    attempt: int
    max_attempts: int
    lease_token: int
    group: str
    parent_id: int | None
    timeout: float | None


class Flag:
    """A one-way boolean set by the worker's loop and read by the handler's thread.

    Reading and writing one attribute is atomic in Python, so no lock is needed, and a
    flag is far cheaper to create per job than a ``threading.Event``.
    """

    __slots__ = ("_value",)

    def __init__(self) -> None:
        self._value = False

    def set(self) -> None:
        self._value = True

    def is_set(self) -> bool:
        return self._value


class LeaseFlag(Flag):
    """``job.lease_lost``: set by the worker when it learns that the lease is gone, and
    true by itself from ``until`` on (this process's monotonic clock), the instant the
    lease may have run out without a heartbeat. A worker that cannot reach its database
    stops believing it holds the lease then (see :mod:`readyq.heartbeats`)."""

    __slots__ = ("until",)

    def __init__(self, until: float = float("inf")) -> None:
        self._value = False  # Flag's own start, without the call
        self.until = until

    def is_set(self) -> bool:
        return self._value or monotonic() >= self.until


@dataclass(eq=False)
class Job:
    """What a handler receives.

    Attributes:
        id: the job id.
        type: the handler key.
        args: the decoded JSON args; an instance of the handler's ``args_model`` when it
            has one (see :meth:`readyq.Queue.handler`).
        attempt: 1 for the first run, 2 for the first retry... (a run handed back unrun
            by a stopping worker is not charged: the next one has the same number).
        group: the fair-share group.
        parent_id: the container the job belongs to, if any.
        lease_token: grows at every claim of the job and is never reset: build
            idempotency keys for side effects from ``(id, lease_token)``, which never
            repeats.
        worker_id: the worker that runs this attempt.
    """

    id: int
    type: str
    args: Any
    attempt: int
    max_attempts: int
    group: str
    parent_id: int | None
    lease_token: int
    worker_id: str
    # Called as ``_heartbeat(job, lost=..., cancelled=...)`` with the job's own flags, so
    # that a worker can pass one bound method for all its jobs.
    _heartbeat: Callable[..., bool] = field(repr=False)
    _lost: Flag = field(default_factory=Flag, repr=False)
    _cancelled: Flag = field(default_factory=Flag, repr=False)
    # Checks and builds a spawn, as ``_stage(specs, join=..., parent=...)``: the queue's
    # ``spawn_of``. None where the job object cannot spawn (hooks).
    _stage: Callable[..., Any] | None = field(default=None, repr=False)
    # Made at the first spawn: most attempts spawn nothing.
    _spawns: list[Any] | None = field(default=None, repr=False)
    _spawn_keys: set[str] | None = field(default=None, repr=False)
    # Builds the attempt's memory (readyq.checkpoints.AttemptMemory) at its first use,
    # so that a job that uses none costs nothing; None where the job object is not a
    # running attempt (hooks, a Job built by hand).
    _remember: Callable[[Job], Any] | None = field(default=None, repr=False)
    _memory: Any = field(default=None, repr=False)
    _stopping: Flag = field(default_factory=Flag, repr=False)

    def _mem(self) -> Any:
        if self._memory is None:
            if self._remember is None:
                raise NotInAJob(
                    "this job object is not a running attempt: steps, state, progress "
                    "and upstream results exist only in a handler a worker runs"
                )
            self._memory = self._remember(self)
        return self._memory

    def settle(self) -> None:
        """Called by the worker as the attempt ends: the last progress reported is
        written, and the memory closes (:class:`readyq.NotInAJob` after)."""
        if self._memory is not None:
            self._memory.settle()

    async def asettle(self) -> None:
        """:meth:`settle` for an attempt on an event loop."""
        if self._memory is not None:
            await self._memory.asettle()

    @property
    def state(self) -> Any:
        """What the latest :meth:`save_state` of any attempt of this job stored (decoded
        JSON), or None. Read once per attempt, at first use; an ``async def`` handler on
        an event loop awaits :meth:`astate` instead."""
        return self._mem().state()

    async def astate(self) -> Any:
        """:attr:`state`, awaited (for ``async def`` handlers)."""
        return await self._mem().astate()

    def save_state(self, value: Any, *, connection: Any = None) -> None:
        """Store ``value`` (JSON, at most the queue's ``max_payload_bytes``) as the job's
        state for the attempts after this one, and extend the lease, in one write fenced
        by the lease: an attempt that lost it stores nothing and gets
        :class:`readyq.LeaseLost`. With ``connection`` (a SQLAlchemy Connection or Session
        on the queue's database) the write joins the caller's transaction, and commits
        or rolls back with it. Raises :class:`readyq.InvalidState` for a bad value or a
        connection to another database, and for any ``connection`` in a handler with
        ``isolation="process"`` (its child has no database connection: the worker
        writes for it)."""
        self._mem().save_state(value, connection)

    async def asave_state(self, value: Any, *, connection: Any = None) -> None:
        """:meth:`save_state`, awaited; ``connection`` may be an AsyncConnection or
        AsyncSession."""
        await self._mem().asave_state(value, connection)

    def step(self, name: str, fn: Callable[..., Any], *args: Any, connection: Any = None,
             **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` once per job: its result is stored under ``name``
        (fenced by the lease, like :meth:`save_state`), and a later attempt gets it back
        without calling ``fn``. What is returned is the stored JSON, decoded, on the
        first attempt as on the later ones. A step that raises stores nothing. Raises
        :class:`readyq.InvalidStep` for a bad name or one used twice in an attempt, and
        :class:`readyq.InvalidJobResult` for a result that cannot be stored."""
        return self._mem().step(name, fn, args, kwargs, connection)

    async def astep(self, name: str, fn: Callable[..., Any], *args: Any,
                    connection: Any = None, **kwargs: Any) -> Any:
        """:meth:`step`, awaited: ``fn`` may be an ``async def`` function."""
        return await self._mem().astep(name, fn, args, kwargs, connection)

    def progress(self, current: float, total: float | None = None,
                 message: str | None = None) -> None:
        """Report how far the attempt has got. Cheap to call often: written at most once
        a second, and the last value by the time the attempt's end is recorded. Raises
        :class:`readyq.InvalidProgress` for a value that is not a finite number."""
        self._mem().progress(current, total, message)

    def upstream_results(self, by: str = "id", include_children: bool = False) -> dict[Any, Any]:
        """The results of the jobs this job depends on (and those its containers depend
        on), in one read: by job id, or with ``by="key"`` by the ``key`` each had in its
        ``enqueue_many`` batch (its id where it had none). With ``include_children``, the
        results of the jobs inside the containers it depends on are included too."""
        return self._mem().upstream_results(by, include_children)  # type: ignore[no-any-return]

    async def aupstream_results(self, by: str = "id",
                                include_children: bool = False) -> dict[Any, Any]:
        """:meth:`upstream_results`, awaited."""
        return await self._mem().aupstream_results(by, include_children)  # type: ignore[no-any-return]

    @property
    def stopping(self) -> bool:
        """True once the worker began a graceful shutdown: save a checkpoint and return
        within the grace, or be handed back at its end (what was saved stays)."""
        return self._stopping.is_set()

    def spawn(self, specs: Any, join: bool = True, parent: int | None = None) -> None:
        """Add jobs (:class:`readyq.JobSpec` items, a DAG as for ``enqueue_many``) when,
        and only if, this attempt ends ``done``: they are inserted in the transaction that
        records that end. An attempt that fails, times out, is cancelled or loses its
        lease spawns nothing, and a retry spawns afresh.

        The specs are checked now, as ``enqueue_many`` checks them: bad input raises its
        :class:`readyq.InvalidJob` here and stages nothing. With ``join`` (the default)
        everything that waits for this job waits for the spawned jobs too. They go into
        this job's container, if it has one, unless ``parent`` names another container.
        """
        if self._stage is None:
            raise InvalidJobOption("this job object is not a running attempt: it cannot spawn")
        specs = list(specs)
        keys = [s.unique_key for s in specs if getattr(s, "unique_key", None) is not None]
        if self._spawns is None or self._spawn_keys is None:
            self._spawns, self._spawn_keys = [], set()
        taken = self._spawn_keys.intersection(keys)
        if taken:
            raise InvalidUniqueKey(
                f"unique_key {sorted(taken)[0]!r} is already given to a job this attempt spawned"
            )
        self._spawns.append(self._stage(specs, join=join, parent=parent))
        self._spawn_keys.update(keys)

    def staged_spawns(self) -> tuple[Any, ...]:
        """What :meth:`spawn` staged so far, in order (for the worker to record)."""
        return () if self._spawns is None else tuple(self._spawns)

    @property
    def lease_lost(self) -> bool:
        """True once the worker knows it lost this job's lease; its writes are fenced out."""
        return self._lost.is_set()

    @property
    def cancelled(self) -> bool:
        """True once someone asked to cancel this job (seen at the next heartbeat)."""
        return self._cancelled.is_set()

    def heartbeat(self) -> bool:
        """Extend the lease now and refresh ``lease_lost`` and ``cancelled``.

        Workers already heartbeat every running job; call this to learn early whether the
        job should stop. Returns True once the lease was extended, False when the
        database did not answer within 5 seconds (the lease still holds; the worker
        keeps trying). Raises :class:`readyq.LeaseLost` if the lease is gone, or given up
        because the database could not be reached before it might run out: then at
        once, without waiting for the database.
        """
        return self._heartbeat(self, lost=self._lost, cancelled=self._cancelled)
