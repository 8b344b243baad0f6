"""The public facade: :class:`Queue`."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session
from typing_extensions import Unpack

from readyq.building import (
    JobRules,
    batch_of,
    check_job_id,
    check_key,
    check_max_attempts,
    check_seconds,
    instant_or_delay,
    one_job,
    spawn_of,
)
from readyq.config import WorkerOptions, WorkerOptionsDict
from readyq.engines import (
    DEFAULT_IDLE_TRANSACTION_TIMEOUT,
    DEFAULT_LOCK_TIMEOUT,
    create_engine,
)
from readyq.errors import (
    ConfigurationError,
    InvalidFilter,
    InvalidJobOption,
    InvalidPause,
    InvalidRateLimit,
    InvalidResource,
    InvalidSchedule,
    InvalidUniqueKey,
    QueueClosed,
    ScheduleNotFound,
)
from readyq.handlers import HandlerRegistry, HandlerSpec
from readyq.isolation import ISOLATIONS, check_handler_shape
from readyq.listing import DEFAULT_LIMIT, JobFilter, check_limit, check_order, filter_of
from readyq.metrics import Observers
from readyq.model import (
    Enqueued,
    GroupStats,
    JobInfo,
    JobSpec,
    JobState,
    Pause,
    ProgressStats,
    ResourceStats,
    ScheduleInfo,
)
from readyq.payload import DEFAULT_MAX_PAYLOAD_BYTES
from readyq.planning.backoff import DEFAULT_RETRY_BASE, DEFAULT_RETRY_MAX
from readyq.planning.caps import Limits
from readyq.planning.schedules import DEFAULT_CATCH_UP
from readyq.rate_limits import RateLimit
from readyq.reports import AttemptRecord, JobPage, StuckJob
from readyq.resources import Resource, check_uses, define
from readyq.resources import encode as encode_uses
from readyq.schedules import DEFAULT_TZ, JobFactory, Schedule, define_schedule
from readyq.schema import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PREFIX,
    key_problem,
    validate_prefix,
)
from readyq.store import BatchJob, Store
from readyq.store.records import Spawn
from readyq.validation import check_model
from readyq.worker import Worker, WorkerStats

DEFAULT_URL = "sqlite:///readyq.db"
DEFAULT_GROUP = "default"

F = TypeVar("F", bound=Callable[..., Any])


def pause_target(group: Any, type: Any) -> tuple[str | None, str | None]:
    """The (group, type) a pause or a resume names, checked; InvalidPause otherwise."""
    if group is None and type is None:
        raise InvalidPause("a pause names a group, a type or both")
    try:
        return (
            None if group is None else check_key(group, "group"),
            None if type is None else check_key(type, "type"),
        )
    except InvalidJobOption as exc:
        raise InvalidPause(str(exc)) from None


def pause_until(value: datetime | timedelta | float | None) -> tuple[float | None, float | None]:
    """A pause's ``until`` as (epoch instant, None) or (None, seconds from now)."""
    try:
        return instant_or_delay(value, "until", allow_zero=False)
    except InvalidJobOption as exc:
        raise InvalidPause(str(exc)) from None


def queue_duration(value: float | timedelta | None, what: str) -> float | None:
    """A positive duration option of a queue, or None (ConfigurationError otherwise)."""
    try:
        return check_seconds(value, what)
    except InvalidJobOption as exc:
        raise ConfigurationError(str(exc)) from None


class Queue:
    """A job queue stored in one database under one table prefix.

    Args:
        url: a SQLAlchemy URL (``sqlite:///jobs.db``, ``postgresql+psycopg://...``,
            ``mysql+pymysql://...``) or an existing :class:`~sqlalchemy.engine.Engine`.
        prefix: table name prefix (``readyq_`` by default), for apps that already have a
            ``jobs`` table. Must match ``^[A-Za-z_][A-Za-z0-9_]{0,30}$``.
        max_payload_bytes: largest args or result accepted, as UTF-8 JSON (1 MiB).
        default_max_attempts: attempts for jobs whose type sets none (3).
        observers: metrics hooks (see :mod:`readyq.metrics`), called on enqueue and by
            every worker of this queue.
        idle_transaction_timeout: seconds (or timedelta) a session of the engine readyq
            creates from ``url`` may sit idle inside a transaction before the server
            ends it (PostgreSQL, MariaDB; 20 by default, None to leave the server's
            setting). It frees the claim lock of a worker frozen inside its claim, which
            would otherwise stall every other worker; it applies to transactions run on
            ``Queue.engine`` too. Not applied to an engine passed in (see
            :mod:`readyq.engines`).
        lock_timeout: seconds (or timedelta) a statement of that engine waits for a
            row lock before it fails and is run again (PostgreSQL ``lock_timeout``,
            MySQL and MariaDB ``innodb_lock_wait_timeout``; 5 by default, None to leave
            the server's setting). Not applied to an engine passed in.

    Example::

        queue = readyq.Queue("sqlite:///jobs.db")
        queue.create_schema()

        @queue.handler("resize", timeout=600)
        def resize(job):
            return {"ok": True}

        job_id = queue.enqueue("resize", {"path": "a.png"})
        queue.run_worker(concurrency=4, until_idle=True)
        assert queue.get(job_id).state == "done"
    """

    def __init__(
        self,
        url: str | sa.URL | Engine = DEFAULT_URL,
        *,
        prefix: str = DEFAULT_PREFIX,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        default_max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        engine_options: dict[str, Any] | None = None,
        listen: bool | None = None,
        observers: Iterable[Any] = (),
        idle_transaction_timeout: float | timedelta | None = DEFAULT_IDLE_TRANSACTION_TIMEOUT,
        lock_timeout: float | timedelta | None = DEFAULT_LOCK_TIMEOUT,
    ) -> None:
        validate_prefix(prefix)
        idle_timeout = queue_duration(idle_transaction_timeout, "idle_transaction_timeout")
        lock_wait = queue_duration(lock_timeout, "lock_timeout")
        if (
            isinstance(max_payload_bytes, bool)
            or not isinstance(max_payload_bytes, int)
            or max_payload_bytes <= 0
        ):
            raise ConfigurationError(
                f"max_payload_bytes must be a positive int, not {max_payload_bytes!r}"
            )
        check_max_attempts(default_max_attempts, "default_max_attempts", ConfigurationError)
        if isinstance(url, Engine):
            engine, owned = url, False
        elif isinstance(getattr(url, "sync_engine", None), Engine):  # an AsyncEngine
            raise ConfigurationError(
                "readyq.Queue takes a synchronous Engine; use readyq.AsyncQueue with an "
                "AsyncEngine"
            )
        else:
            engine = create_engine(
                url, options=engine_options, idle_transaction_timeout=idle_timeout,
                lock_timeout=lock_wait,
            )
            owned = True
        self.prefix = prefix
        self.max_payload_bytes = max_payload_bytes
        self.default_max_attempts = default_max_attempts
        # Wake-ups by LISTEN/NOTIFY (None: on where the database has them).
        self.listen = listen
        self.store = Store(engine, prefix, owned=owned, listen=listen)
        """The store behind this queue, for readyq's own tools (``readyq.admin``, the
        dashboard); its methods are not part of the stable API."""
        self._handlers = HandlerRegistry()
        self._observers = Observers(observers)
        self._rate_limits: dict[str, RateLimit] = {}
        self._resources: dict[str, Resource] = {}
        self._schedules: dict[str, Schedule] = {}
        self._closed = False

    # -- set-up ---------------------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        """The engine readyq uses."""
        return self.store.engine

    @property
    def database(self) -> str:
        """The database flavour: ``sqlite``, ``postgresql``, ``mysql`` or ``mariadb``."""
        return self.store.dialect.database

    def create_schema(self) -> None:
        """Create readyq's tables and indexes if they do not exist (idempotent)."""
        self.check_open()
        self.store.create_schema()

    def drop_schema(self) -> None:
        """Drop readyq's tables for this prefix, with every job in them."""
        self.check_open()
        self.store.drop_schema()

    def close(self) -> None:
        """Release connections. The queue raises QueueClosed afterwards."""
        if not self._closed:
            self._closed = True
            self.store.dispose()

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check_open(self) -> None:
        """Raise QueueClosed once the queue is closed."""
        if self._closed:
            raise QueueClosed("this queue was closed")

    # -- observers --------------------------------------------------------------------------

    def add_observer(self, observer: Any) -> None:
        """Add a metrics observer (see :mod:`readyq.metrics`) to this queue and its workers.

        Workers built before the call see it too. Raises ConfigurationError for an object
        with none of the hooks.
        """
        self._observers.add(observer)

    @property
    def observers(self) -> tuple[Any, ...]:
        """The observers given to this queue."""
        return tuple(self._observers)

    @property
    def hooks(self) -> Observers:
        """The fan-out to this queue's observers that the queue and its workers call
        (one observer added later is seen by workers built before)."""
        return self._observers

    def group_stats(self) -> dict[str, GroupStats]:
        """Per group: jobs claimable now, the longest wait among them, and jobs in flight.

        Read with the database's clock, at the cost of one pass over the ready and the
        in-flight rows (finished jobs are never read): meant for metrics scrapes.
        Groups with nothing ready or in flight are left out.
        """
        self.check_open()
        return self.store.group_stats()

    def progress_stats(self) -> dict[str, ProgressStats]:
        """Per job type: its jobs in flight that reported progress (``Job.progress``),
        those that gave a total, and their mean fraction done.

        One grouped read of the jobs in flight and their progress, with no per-job
        detail: meant for metrics scrapes. Types with no job in flight reporting
        progress are left out.
        """
        self.check_open()
        return self.store.progress_stats()

    # -- handlers ---------------------------------------------------------------------------

    def handler(
        self,
        type: str,
        *,
        timeout: float | timedelta | None = None,
        max_attempts: int | None = None,
        retry_on_timeout: bool = True,
        retry_backoff: float | timedelta = DEFAULT_RETRY_BASE,
        retry_backoff_max: float | timedelta = DEFAULT_RETRY_MAX,
        args_model: type[Any] | None = None,
        result_model: type[Any] | None = None,
        rate_limit: str | RateLimit | None = None,
        isolation: str | None = None,
        on_cancel: str = "cooperative",
        uses: Mapping[str, int] | None = None,
    ) -> Callable[[F], F]:
        """Register the function that runs jobs of ``type``.

        Args:
            timeout: seconds (or timedelta) an attempt may run; past it the attempt is
                ended by the next tick of any worker, whether or not its worker is alive.
            max_attempts: attempts before the job fails for good (queue default: 3).
            retry_on_timeout: retry a timed-out attempt (True) or fail the job (False).
            retry_backoff: first retry delay; doubles each attempt up to
                ``retry_backoff_max``, with ±10% jitter.
            args_model: a pydantic v2 model. Args enqueued for this type are validated
                (raising :class:`readyq.InvalidJobArgs`, nothing written) and stored as
                its JSON dump; the handler gets ``job.args`` as a model instance.
            result_model: a pydantic v2 model the handler's result must validate
                against; a result that does not fails the attempt with
                :class:`readyq.InvalidJobResult`.
            rate_limit: a :class:`readyq.RateLimit`, or the name of one defined with
                :meth:`rate_limit`, that caps how often jobs of this type start, across
                every worker on the database. Several types may share one limit.
            isolation: ``"process"`` runs the handler in a child process that the
                worker kills at the timeout, and whose crash fails only its attempt;
                ``"thread"`` keeps it in the worker; None (the default) takes the
                worker's ``isolation``. See :mod:`readyq.isolation` for what such a
                handler must be (a module-level function, JSON args and result).
            on_cancel: ``"cooperative"`` (the handler sees ``job.cancelled`` at the next
                heartbeat) or ``"terminate"`` (a running job in a child process is
                killed at once and ends cancelled).
            uses: units of resources defined with :meth:`resource` that each job of
                the type holds while in flight, such as ``{"gpu": 2}``; a job enqueued
                with its own ``uses`` takes those instead.

        The handler gets a :class:`readyq.Job` and returns a JSON-serialisable result
        (or a pydantic model, stored as its JSON dump). It may be ``async def``; it then
        runs in its own event loop in the job's thread.
        """
        check_key(type, "handler type")
        timeout_s = check_seconds(timeout, "timeout")
        if max_attempts is not None:
            check_max_attempts(max_attempts, "max_attempts", ConfigurationError)
        base = check_seconds(retry_backoff, "retry_backoff", allow_zero=True) or 0.0
        cap = check_seconds(retry_backoff_max, "retry_backoff_max", allow_zero=True) or 0.0
        check_model(args_model, "args_model")
        check_model(result_model, "result_model")
        limit_name: str | None = None
        if isinstance(rate_limit, RateLimit):
            limit_name = self._define_rate_limit(rate_limit).name
        elif rate_limit is not None:
            if not isinstance(rate_limit, str) or rate_limit not in self._rate_limits:
                raise InvalidRateLimit(
                    f"rate_limit {rate_limit!r} is not defined on this queue: define it "
                    "with queue.rate_limit(name, limit, per=...) or pass a readyq.RateLimit"
                )
            limit_name = rate_limit
        if isolation is not None and isolation not in ISOLATIONS:
            raise ConfigurationError(
                f"isolation must be one of {', '.join(ISOLATIONS)} or None, not {isolation!r}"
            )
        if on_cancel not in ("cooperative", "terminate"):
            raise ConfigurationError(
                f"on_cancel must be 'cooperative' or 'terminate', not {on_cancel!r}"
            )
        costs = {} if uses is None else check_uses(
            uses, self._resources, what=f"handler {type!r}: uses"
        )

        def register(fn: F) -> F:
            if isolation == "process":
                check_handler_shape(fn, type)
            self._handlers.register(HandlerSpec(
                type=type,
                fn=fn,
                timeout=timeout_s,
                max_attempts=max_attempts,
                retry_on_timeout=retry_on_timeout,
                retry_base=base,
                retry_max=cap,
                args_model=args_model,
                result_model=result_model,
                rate_limit=limit_name,
                isolation=isolation,
                on_cancel=on_cancel,
                uses=costs,
            ))
            return fn

        return register

    @property
    def handlers(self) -> dict[str, HandlerSpec]:
        """The registered handlers, by job type (a copy)."""
        return self._handlers.snapshot()

    def rate_limit(self, name: str, limit: int, *, per: float | timedelta) -> RateLimit:
        """Define a rate limit: at most ``limit`` job starts in any ``per`` seconds.

        Handlers name it with ``rate_limit=name``. The count is kept in the database, so
        it holds across every worker process and host, each attempt counting once when
        a worker claims it. The definition is stored by the first worker claim that
        uses it; every process should define it alike.

        Raises:
            InvalidRateLimit: a bad name, ``limit`` or ``per``, or ``name`` already
                defined on this queue with other values.

        Example::

            queue.rate_limit("openai", 100, per=60)

            @queue.handler("summarize", rate_limit="openai")
            def summarize(job): ...
        """
        seconds = per.total_seconds() if isinstance(per, timedelta) else per
        return self._define_rate_limit(RateLimit(name, limit, seconds))

    def _define_rate_limit(self, limit: RateLimit) -> RateLimit:
        known = self._rate_limits.get(limit.name)
        if known is not None and known != limit:
            raise InvalidRateLimit(
                f"rate limit {limit.name!r} is already defined as {known.limit} per "
                f"{known.per:g}s on this queue"
            )
        self._rate_limits[limit.name] = limit
        return limit

    @property
    def rate_limits(self) -> dict[str, RateLimit]:
        """The rate limits defined on this queue, by name."""
        return dict(self._rate_limits)

    def resource(self, name: str, *, capacity: Limits) -> Resource:
        """Define a resource: a capacity that jobs take units of while in flight.

        ``capacity`` is an int, a callable re-read at every tick (``lambda:
        free_gpus()``), or a list of them, whose minimum counts, like a worker's
        ``concurrency``. Handlers and jobs say what they take with ``uses={"gpu": 2}``.
        Across every worker process and host on the database, the jobs in flight never
        hold more of a resource than its capacity: each claim sums what they hold from
        the database, under the lock that orders the claims. A capacity that shrinks
        below what is in use starts nothing that uses the resource until use is back
        under it; nothing is stopped. Every worker that runs jobs using the resource
        must define it (a worker leaves jobs that use resources it does not know to
        the workers that do).

        Raises:
            InvalidResource: a bad name (the rules of group keys) or capacity, or
                ``name`` already defined on this queue with another capacity.

        Example::

            queue.resource("gpu", capacity=4)

            @queue.handler("train", uses={"gpu": 2})
            def train(job): ...
        """
        resource = define(name, capacity)
        known = self._resources.get(resource.name)
        if known is not None and known != resource:
            raise InvalidResource(f"resource {name!r} is already defined on this queue")
        self._resources[resource.name] = resource
        return resource

    @property
    def resources(self) -> dict[str, Resource]:
        """The resources defined on this queue, by name."""
        return dict(self._resources)

    def resource_stats(self) -> dict[str, ResourceStats]:
        """Per resource: its capacity as workers last saw it, the units in flight, the
        runnable jobs that use it and what they ask for, and the largest cost among
        them. Resources defined on this queue or seen by a worker's claim are listed."""
        self.check_open()
        handler_uses = {k: dict(v.uses) for k, v in self._handlers.snapshot().items() if v.uses}
        return self.store.resource_stats(sorted(self._resources), handler_uses)

    def _check_uses(self, uses: Any, what: str = "uses") -> str | None:
        """Checked costs in their stored form (None for none)."""
        if uses is None:
            return None
        if isinstance(uses, Mapping):
            unknown = [n for n in uses if isinstance(n, str) and n not in self._resources]
        else:
            unknown = []
        known = self.store.known_resources() if unknown else {}
        return encode_uses(
            check_uses(uses, self._resources, what=what, known=sorted(known))
        )

    # -- enqueue ------------------------------------------------------------------------------

    def _rules(self) -> JobRules:
        """What this queue's jobs are checked against (see :mod:`readyq.building`)."""
        return JobRules(self._handlers, self.max_payload_bytes, self._check_uses)

    @staticmethod
    def _connection(connection: Connection | Session | None) -> Connection | None:
        if connection is None or isinstance(connection, Connection):
            return connection
        if isinstance(connection, Session):
            return connection.connection()
        raise InvalidJobOption(
            f"connection must be a SQLAlchemy Connection or Session, not {connection!r}"
        )

    def enqueue(
        self,
        type: str,
        args: Any = None,
        *,
        group: str = DEFAULT_GROUP,
        weight: int = 1,
        priority: int = 0,
        depends_on: Iterable[int | JobInfo] = (),
        parent: int | JobInfo | None = None,
        run_after: datetime | timedelta | float | None = None,
        max_attempts: int | None = None,
        timeout: float | timedelta | None = None,
        unique_key: str | None = None,
        uses: Mapping[str, int] | None = None,
        connection: Connection | Session | None = None,
    ) -> int:
        """Add a job and return its id.

        Args:
            type: the handler key.
            args: JSON-serialisable arguments (strict JSON: no NaN, no sets, no objects).
            group: fair-share group; slots are shared between groups by weight.
            weight: the group's fair-share weight (a positive int).
            priority: higher runs first within its group.
            depends_on: job ids that must all end ``done`` before this one starts. If one
                ends failed or cancelled, this job ends ``upstream_failed``.
            parent: a container (see :meth:`enqueue_container`) this job belongs to.
            run_after: not before this time (an aware datetime; a naive one raises
                InvalidJobOption) or a delay (seconds or timedelta).
            max_attempts: the attempts before the job fails for good. A value given here
                wins; without one, the handler's ``max_attempts`` (else the worker's
                queue's ``default_max_attempts``) decides when the job first runs.
            timeout: the same rule: given here it wins, else the handler's.
            unique_key: deduplicate: while a job holding this key has not ended (it is
                waiting, ready, leased or running), enqueueing another job with the same
                key writes nothing and returns the existing job's id. Once that job is
                done, failed, cancelled or upstream_failed, the key is free again. Keys
                are global to the queue, whatever the type. :meth:`enqueue_unique` also
                tells whether the job is new.
            uses: units of resources (see :meth:`resource`) the job holds while in
                flight, such as ``{"gpu": 2}``; without it, its handler's ``uses``.
            connection: enqueue inside the caller's transaction (a Connection or a
                Session); readyq neither commits nor rolls it back.

        Raises:
            InvalidJob: a subclass naming what is wrong; nothing is written.
        """
        self.check_open()
        job = one_job(
            self._rules(), type, args, group=group, weight=weight, priority=priority,
            depends_on=depends_on, parent=parent, run_after=run_after,
            max_attempts=max_attempts, timeout=timeout, is_container=False,
            unique_key=unique_key, uses=uses,
        )
        job_id = self.store.enqueue(job, connection=self._connection(connection))
        if self._observers:
            self._observers.emit("on_enqueued", 1, type)
        return job_id

    def enqueue_unique(
        self,
        type: str,
        args: Any = None,
        *,
        unique_key: str,
        group: str = DEFAULT_GROUP,
        weight: int = 1,
        priority: int = 0,
        depends_on: Iterable[int | JobInfo] = (),
        parent: int | JobInfo | None = None,
        run_after: datetime | timedelta | float | None = None,
        max_attempts: int | None = None,
        timeout: float | timedelta | None = None,
        uses: Mapping[str, int] | None = None,
        connection: Connection | Session | None = None,
    ) -> Enqueued:
        """Add a job unless one holding ``unique_key`` has not ended; say which happened.

        The same as :meth:`enqueue` with ``unique_key``, but returns
        ``Enqueued(id, created)``: ``created`` is False when the id is that of an existing
        job, in which case the other arguments were not used (nor checked against the
        database: a missing dependency goes unnoticed) and nothing was written.

        Example::

            job_id, created = queue.enqueue_unique("report", {"day": day},
                                                   unique_key=f"report:{day}")
        """
        unique_key = check_key(unique_key, "unique_key", InvalidUniqueKey)
        self.check_open()
        job = one_job(
            self._rules(), type, args, group=group, weight=weight, priority=priority,
            depends_on=depends_on, parent=parent, run_after=run_after,
            max_attempts=max_attempts, timeout=timeout, is_container=False,
            unique_key=unique_key, uses=uses,
        )
        return Enqueued(*self.store.enqueue_unique(job, connection=self._connection(connection)))

    def enqueue_container(
        self,
        type: str,
        args: Any = None,
        *,
        group: str = DEFAULT_GROUP,
        weight: int = 1,
        depends_on: Iterable[int | JobInfo] = (),
        parent: int | JobInfo | None = None,
        connection: Connection | Session | None = None,
    ) -> int:
        """Add a container: a job that never runs and ends when its last child ends.

        It rolls up to ``done`` when every child ended done, else ``failed``. Containers
        nest, and other jobs may depend on a container. Its ``depends_on`` applies to every
        child, and ends the container as it would a job: ``upstream_failed`` when one
        ends badly (it is born so if one already has), and ``done`` when the last one
        ends done while the container has no children. A container with neither children
        nor unfinished dependencies stays ``active``, waiting for children.
        """
        self.check_open()
        job = one_job(
            self._rules(), type, args, group=group, weight=weight, priority=0,
            depends_on=depends_on, parent=parent, run_after=None, max_attempts=1,
            timeout=None, is_container=True,
        )
        return self.store.enqueue(job, connection=self._connection(connection))

    def enqueue_many(
        self,
        jobs: Iterable[JobSpec],
        *,
        connection: Connection | Session | None = None,
    ) -> list[int]:
        """Add a whole batch, a DAG included, in one transaction; return ids in order.

        Jobs refer to each other by ``key`` (forward references allowed) and to existing
        jobs by id. The batch is checked whole before anything is written: unknown keys,
        duplicate keys, dependency cycles (including a job depending on its own
        container) and every single-job check raise a specific :class:`InvalidJob` and
        leave the database unchanged.

        A job with a ``unique_key`` held by a job that has not ended is not added: its
        place in the returned list holds the existing job's id, and jobs of the batch
        that depend on it depend on the existing job. Two jobs of one batch with the
        same unique key raise :class:`InvalidUniqueKey` (which of them should win is the
        caller's decision, not readyq's), as does a unique key on a container.

        Example::

            ids = queue.enqueue_many([
                readyq.JobSpec("report", depends_on=["fetch"]),
                readyq.JobSpec("fetch", {"url": "..."}, key="fetch"),
            ])
        """
        specs = list(jobs)
        self.check_open()
        batch, where = self.batch_of(specs)
        ids = self.store.enqueue_many(batch, connection=self._connection(connection))
        self._observers.enqueued(batch)
        return ids if where is None else [ids[where[pos]] for pos in range(len(specs))]

    def spawn_of(
        self, specs: Sequence[JobSpec], *, join: bool = True, parent: int | None = None
    ) -> Spawn:
        """Check what a handler spawns (``Job.spawn``) and build it, writing nothing."""
        return spawn_of(self._rules(), specs, join=join, parent=parent)

    def batch_of(
        self, specs: Sequence[JobSpec]
    ) -> tuple[list[BatchJob], dict[int, int] | None]:
        """Check a batch as :meth:`enqueue_many` does and build its rows, writing nothing.

        Returns the rows in an order that inserts every job after those it refers to,
        and (when that is not the given order) each spec's position among them.
        Raises the :class:`InvalidJob` that :meth:`enqueue_many` would raise. Checks
        that need the database (jobs named by id exist, containers have not ended) are
        left to the insert.
        """
        return batch_of(self._rules(), specs)

    # -- inspect and control ---------------------------------------------------------------------

    def get(self, job_id: int) -> JobInfo:
        """The job's current state, result, error and attempts. Raises JobNotFound, or
        InvalidJobId for a value that cannot be a job id."""
        self.check_open()
        return self.store.get(check_job_id(job_id, "job id"))

    def attempts(self, job_id: int) -> list[AttemptRecord]:
        """The job's attempts, oldest first, as :class:`readyq.AttemptRecord`: each one
        that did not end it done (kept until the job is pruned), then the one that
        ended it done or runs now. Raises JobNotFound, or InvalidJobId."""
        self.check_open()
        return self.store.attempts(check_job_id(job_id, "job id"))

    def cancel(self, job_id: int) -> bool:
        """Cancel a job. Returns False if it had already ended.

        A waiting or ready job ends ``cancelled`` at once and never starts; its dependents
        end ``upstream_failed``. A running job is asked to stop: its handler sees
        ``job.cancelled`` at the next heartbeat, and the job ends ``cancelled`` unless
        the handler returns a result first. Cancelling a container cancels its children.
        Raises JobNotFound, or InvalidJobId for a value that cannot be a job id.
        """
        self.check_open()
        return self.store.cancel(check_job_id(job_id, "job id")) is not None

    def close_container(self, job_id: int) -> None:
        """End an empty container ``done``, as if its last child had ended done.

        For a container enqueued without unfinished dependencies that will get no
        children: it would otherwise stay ``active`` (see :meth:`enqueue_container`), and
        its dependents waiting. Its dependents follow as after any ``done``. Raises
        :class:`readyq.NotClosable`, changing nothing, for a job that is not a container
        or has ended, a container with children that have not ended (it ends when they
        do), and one that still waits for a dependency (it ends by itself when that is
        done; one whose dependency ended badly is ended or revived with that job);
        :class:`readyq.JobNotFound` for an unknown id.
        """
        self.check_open()
        self.store.close_container(check_job_id(job_id))

    def pause(
        self,
        *,
        group: str | None = None,
        type: str | None = None,
        until: datetime | timedelta | float | None = None,
    ) -> None:
        """Pause a group, a job type, or a type within a group: from the commit on, no
        worker on any host claims their ready jobs. Jobs already running go on.

        ``until`` (an aware datetime, or seconds or a timedelta from now, on the
        database clock) ends the pause by itself; without it, it stands until
        :meth:`resume`. Pausing again what is paused replaces its ``until``. The global
        cap is shared among the groups that are not paused, and units held in reserve
        for a paused job are released. Raises :class:`readyq.InvalidPause`.
        """
        self.check_open()
        group_key, type_ = pause_target(group, type)
        at, delay = pause_until(until)
        self.store.pause_jobs(group_key, type_, at, delay)

    def resume(self, *, group: str | None = None, type: str | None = None) -> bool:
        """End the pause of exactly this group, type or pair; False if none stood.
        Raises :class:`readyq.InvalidPause`."""
        self.check_open()
        group_key, type_ = pause_target(group, type)
        return self.store.resume_jobs(group_key, type_)

    def pauses(self) -> list[Pause]:
        """The pauses in force now (:class:`readyq.Pause`), by group then type."""
        self.check_open()
        return self.store.pauses()

    # -- schedules ------------------------------------------------------------------------

    def schedule(
        self,
        name: str,
        *,
        job: JobFactory,
        cron: str | None = None,
        every: timedelta | float | None = None,
        tz: str = DEFAULT_TZ,
        catch_up: str = DEFAULT_CATCH_UP,
    ) -> None:
        """Define a periodic schedule: every worker of this queue enqueues
        ``job(fire_time)`` at each occurrence, exactly once across all workers and hosts.

        Args:
            name: the schedule's name (a key, as job types are), unique in the database.
            job: called with each occurrence's fire time (an aware datetime in ``tz``);
                returns a :class:`readyq.JobSpec`, or a list of them (a DAG, as for
                :meth:`enqueue_many`). It runs inside the firing transaction: keep it
                quick, and let it read nothing but its argument.
            cron: a five-field cron expression (minute hour day month weekday),
                evaluated in ``tz``, daylight-saving changes included (see
                docs/schedules.md).
            every: a fixed interval (a timedelta or seconds, a whole number of seconds
                from 1 up), counted from the Unix epoch. Exactly one of ``cron`` and
                ``every``.
            tz: an IANA time zone name (``UTC`` by default).
            catch_up: what a firing does with occurrences missed while no worker ran:
                ``"latest"`` (the default) enqueues the newest one only, ``"all"``
                enqueues each (at most 1,000 per firing: older ones are skipped), and
                ``"none"`` enqueues only one at most a minute late.

        Occurrences are computed on the database's clock. Nothing is written here: the
        first worker to fire the schedule stores its definition, which then stands; a
        worker whose queue defines the same name differently fires nothing of it and
        reports the conflict (:meth:`schedules`). :meth:`forget_schedule` lets a new
        definition take its place. Raises :class:`readyq.InvalidSchedule` for a bad
        definition or a name this queue already defines.

        Example::

            queue.schedule(
                "nightly-report", cron="0 3 * * *", tz="Europe/Berlin",
                job=lambda at: readyq.JobSpec("report", {"day": at.date().isoformat()}),
            )
        """
        self.check_open()
        made = define_schedule(name, job=job, cron=cron, every=every, tz=tz, catch_up=catch_up)
        if made.name in self._schedules:
            raise InvalidSchedule(f"schedule {made.name!r} is already defined on this queue")
        self._schedules[made.name] = made

    def _schedule_name(self, name: Any) -> str:
        problem = key_problem(name)
        if problem is not None:
            raise InvalidSchedule(f"schedule name {problem}: {name!r}")
        return str(name)

    def pause_schedule(self, name: str) -> None:
        """Pause schedule ``name``: from the commit on, no worker enqueues its
        occurrences; those that come due while it is paused are skipped. Raises
        :class:`readyq.ScheduleNotFound` when it is neither stored nor defined here."""
        self.check_open()
        key = self._schedule_name(name)
        defined = self._schedules.get(key)
        found = self.store.pause_schedule(
            key, True, None if defined is None else defined.timing
        )
        if found is None:
            raise ScheduleNotFound(f"no schedule named {key!r}")

    def resume_schedule(self, name: str) -> bool:
        """Resume schedule ``name``; False if it was not paused. Occurrences that came
        due while it was paused stay skipped; the next one from now on fires. Raises
        :class:`readyq.ScheduleNotFound` when it is neither stored nor defined here."""
        self.check_open()
        key = self._schedule_name(name)
        defined = self._schedules.get(key)
        was = self.store.pause_schedule(
            key, False, None if defined is None else defined.timing
        )
        if was is None:
            raise ScheduleNotFound(f"no schedule named {key!r}")
        return was

    def forget_schedule(self, name: str) -> bool:
        """Remove schedule ``name``'s stored definition and progress; False if none
        was stored. The next worker to fire it stores its own queue's definition: the
        way to change a definition. Occurrences already fired are never fired again."""
        self.check_open()
        return self.store.forget_schedule(self._schedule_name(name))

    @property
    def defined_schedules(self) -> Mapping[str, Schedule]:
        """The schedules this queue defines, by name (what its workers fire)."""
        return MappingProxyType(self._schedules)

    def schedules(self) -> list[ScheduleInfo]:
        """The stored schedules (:class:`readyq.ScheduleInfo`), by name: the definition
        that stands, the last and next fire times, paused, and a conflicting definition
        some worker reported."""
        self.check_open()
        return self.store.schedules()

    def stuck(
        self, *, empty_after: float | timedelta = 60.0, limit: int = 100
    ) -> list[StuckJob]:
        """What cannot progress on its own, in id order, at most ``limit`` (1 to 1,000):

        * a waiting job or an open container that a job it depends on ended badly
          without ending (``upstream_ended``; a database written by an earlier readyq,
          or edited by hand);
        * one whose count of unfinished dependencies disagrees with its dependencies
          (``pending_mismatch``);
        * a container with no child and nothing to wait for, unchanged for
          ``empty_after`` (a number of seconds or a timedelta; ``empty_container``): it
          waits for children nobody may add.

        Each :class:`readyq.StuckJob` says why and what to do. A ready job is never
        stuck, even with a ``run_after`` in the future; one of a type no worker handles
        cannot be told from here (there is no registry of workers): ``readyq status``
        names the types whose runnable jobs wait with none in flight. The read is
        bounded: at most 10,000 waiting jobs and as many open containers are looked at,
        through their indexes. Raises :class:`readyq.InvalidFilter` for a bad
        ``empty_after`` or ``limit``.
        """
        self.check_open()
        try:
            seconds = check_seconds(empty_after, "empty_after", allow_zero=True)
        except InvalidJobOption as exc:
            raise InvalidFilter(str(exc)) from None
        assert seconds is not None
        return self.store.stuck(empty_after=seconds, limit=check_limit(limit))

    def counts(self) -> dict[str, int]:
        """Number of jobs in each state."""
        self.check_open()
        return self.store.counts()

    def jobs(
        self,
        filter: JobFilter | None = None,
        *,
        state: str | JobState | Iterable[str | JobState] | None = None,
        type: str | None = None,
        group: str | None = None,
        parent: int | None = None,
        created_after: datetime | timedelta | None = None,
        created_before: datetime | timedelta | None = None,
        started_after: datetime | timedelta | None = None,
        started_before: datetime | timedelta | None = None,
        finished_after: datetime | timedelta | None = None,
        finished_before: datetime | timedelta | None = None,
        unique_key: str | None = None,
        id: int | Iterable[int] | None = None,
        order: str = "newest",
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
    ) -> JobPage:
        """A page of the jobs that match a filter, newest first (``order="oldest"``:
        oldest first), at most ``limit`` (1 to 1,000; 50 by default).

        The criteria are those of :class:`readyq.JobFilter`, given here as keywords or
        as one ``filter``; every one given must hold. Time bounds are aware datetimes or
        timedeltas (that long ago by the database's clock). The page's ``next_cursor``
        continues the listing (pass it back as ``cursor`` with the same filter and
        order), or is None on the last page. Pages are read by keyset on the job id
        through an index, so a page costs the same however deep it is.

        Raises :class:`readyq.errors.InvalidFilter` for a bad criterion, order or limit
        and :class:`readyq.errors.InvalidCursor` for a cursor of another listing.

        Example::

            page = queue.jobs(state="failed", type="resize", limit=20)
            for job in page:
                print(job.id, job.error)
            more = queue.jobs(state="failed", type="resize", limit=20,
                              cursor=page.next_cursor)
        """
        self.check_open()
        flt = filter_of(filter, {
            "state": state, "type": type, "group": group, "parent": parent,
            "created_after": created_after, "created_before": created_before,
            "started_after": started_after, "started_before": started_before,
            "finished_after": finished_after, "finished_before": finished_before,
            "unique_key": unique_key, "id": id,
        })
        return self.store.jobs(
            flt, order=check_order(order), limit=check_limit(limit), cursor=cursor
        )

    def wait(
        self,
        job_id: int,
        timeout: float | timedelta | None = None,
        *,
        poll_interval: float = 0.1,
    ) -> JobInfo:
        """Block until the job reaches a terminal state; return it.

        Polls the database (the only state) with a growing interval up to
        ``poll_interval``. Raises ``TimeoutError`` if ``timeout`` passes first and
        :class:`JobNotFound` for an unknown id (InvalidJobId for a value that cannot be
        one). It returns failed, cancelled and
        upstream_failed jobs as well: check ``info.state``.
        """
        self.check_open()
        job_id = check_job_id(job_id)
        limit = check_seconds(timeout, "timeout", allow_zero=True)
        deadline = None if limit is None else time.monotonic() + limit
        delay = min(0.01, poll_interval)
        while True:
            info = self.store.get(job_id)
            if info.is_terminal:
                return info
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"job {job_id} is still {info.state.value} after {limit:g}s"
                )
            pause = delay if deadline is None else min(delay, max(0.0, deadline - time.monotonic()))
            self.store.pause(pause)
            delay = min(delay * 2, poll_interval)

    # -- workers ---------------------------------------------------------------------------------

    def worker(self, **options: Unpack[WorkerOptionsDict]) -> Worker:
        """Build a :class:`readyq.Worker` over this queue's handlers; the options are
        those of :class:`readyq.WorkerOptions` (see :meth:`run_worker`)."""
        self.check_open()
        return Worker(
            self.store,
            self.handlers,
            self.hooks,
            self.rate_limits,
            WorkerOptions(**options),
            max_payload_bytes=self.max_payload_bytes,
            listen=self.listen,
            default_max_attempts=self.default_max_attempts,
            resources=self._resources,
            spawner=self.spawn_of,
            schedules=self.defined_schedules,
            batch_of=self.batch_of,
        )

    def run_worker(
        self, *, until_idle: bool = False, **options: Unpack[WorkerOptionsDict]
    ) -> WorkerStats:
        """Run jobs until stopped (or, with ``until_idle``, until none is left to run).

        The options are those of :class:`readyq.WorkerOptions`: ``concurrency`` (the
        global cap: an int, a callable re-read every tick, or a list of them combined as
        their minimum), ``lease_ttl``, ``heartbeat_interval``, ``poll_interval``,
        ``types``, ``worker_id``, ``max_running``, ``shutdown_grace``, ``freeze_gc``,
        ``fire_schedules`` and the isolation options.
        ``until_idle`` returns once every job of the worker's types has ended.

        Returns the worker's :class:`readyq.WorkerStats`.
        """
        return self.worker(**options).run(until_idle=until_idle)
