"""Every exception readyq raises on purpose lives here, under :class:`ReadyqError`.

Bad input raises a subclass of :class:`InvalidJob` (also a :class:`ValueError`) before
anything is written, so the database is left exactly as it was.
"""

from __future__ import annotations


class ReadyqError(Exception):
    """Base class of every error readyq raises on purpose."""


class ConfigurationError(ReadyqError, ValueError):
    """A queue or worker option is invalid (bad table prefix, lease TTL, limits...)."""


class InvalidTablePrefix(ConfigurationError):
    """The table prefix is not a safe SQL identifier prefix.

    Prefixes must match ``^[A-Za-z_][A-Za-z0-9_]{0,30}$``: they become table and index
    names, which cannot be bound as parameters.
    """


class InvalidRateLimit(ConfigurationError):
    """A rate limit is badly defined (limit or period not positive, bad name), defined
    twice with different values on one queue, or named by a handler without being
    defined."""


class InvalidResource(ConfigurationError):
    """A resource defined with a bad name or capacity, or defined twice with different
    capacities."""


class UnsupportedDatabase(ConfigurationError):
    """The database or its server version cannot run readyq safely.

    Raised for MySQL older than 8.0.1 and MariaDB older than 10.6 (no ``SKIP LOCKED``),
    SQLite older than 3.35 (no ``RETURNING``), servers that only speak the protocol of
    PostgreSQL or MySQL (TiDB, Vitess, CockroachDB, YugabyteDB: see
    :mod:`readyq.dialects.lookalikes`) and any other SQLAlchemy dialect.
    """


class DatabaseFileUnusable(ConfigurationError):
    """The SQLite file is not a database (another kind of file, or an encrypted one) or
    is corrupt. No wait cures it: a worker stops and says which file and what is wrong
    with it."""


class SchemaNotFound(ReadyqError):
    """The readyq tables do not exist yet: call ``Queue.create_schema()`` first."""


class InvalidJob(ReadyqError, ValueError):
    """Base class of the errors raised for a job that cannot be enqueued as given."""


class UnknownJobType(InvalidJob):
    """The job type has no handler on a queue that has handlers registered."""


class PayloadNotJSON(InvalidJob):
    """Args (or a result) cannot be encoded as strict JSON (NaN, sets, objects...)."""


class PayloadTooLarge(InvalidJob):
    """The encoded args exceed the queue's ``max_payload_bytes`` (1 MiB by default)."""


class DependencyNotFound(InvalidJob):
    """A job listed in ``depends_on`` does not exist."""


class DependencyCycle(InvalidJob):
    """The dependencies given would form a cycle."""


class InvalidParent(InvalidJob):
    """The parent is missing, is not a container, or has already finished."""


class InvalidWeight(InvalidJob):
    """The fair-share weight is not a positive integer."""


class InvalidJobArgs(InvalidJob):
    """The args do not validate against the handler's ``args_model`` (pydantic).

    ``errors`` holds pydantic's error list (locations, messages and types, without the
    input values), for callers that report them field by field.
    """

    def __init__(self, message: str, errors: list[dict[str, object]] | None = None) -> None:
        super().__init__(message)
        self.errors: list[dict[str, object]] = list(errors or [])


class InvalidJobOption(InvalidJob):
    """Another job option (group, priority, max_attempts, timeout, run_after...) is invalid."""


class InvalidJobId(InvalidJobOption):
    """A job id is not an int from 1 to 2**63 - 1, the range of the id column.

    Raised before the database is asked, by every call that takes a job id (``get``,
    ``cancel``, ``wait``, ``depends_on``, ``parent``, ``admin.show``, ``admin.retry``,
    ``admin.dag``...), the same on every database.
    """


class InvalidJobResult(ReadyqError, ValueError):
    """A handler's result does not validate against its ``result_model`` (pydantic).

    Raised by the worker after the handler returns: the attempt fails (and may be
    retried) with this error, and the result is not stored.
    """


class InvalidStep(ReadyqError, ValueError):
    """``Job.step`` was given a bad name (not a non-empty string of at most 200
    characters, without NUL or whitespace at either end), or a name already used in this
    attempt. Nothing was run or stored."""


class InvalidState(InvalidJobResult):
    """``Job.save_state`` was given a value that is not JSON, or larger than the queue's
    ``max_payload_bytes``, or a ``connection`` to another database. Nothing was stored."""


class InvalidProgress(ReadyqError, ValueError):
    """``Job.progress`` was given a current or total that is not a finite number (a total
    must be positive), or a message that is not text. Nothing was stored."""


class NotInAJob(ReadyqError, RuntimeError):
    """A job's memory (steps, state, progress, upstream results) was used outside a
    running attempt: on a Job that no worker handed out, or after its attempt ended."""


class InvalidResourceUse(InvalidJobOption):
    """A job's (or handler's) ``uses`` is not a mapping of resource names to positive
    ints, or asks for more of a resource than its fixed capacity."""


class UnknownResource(InvalidResourceUse):
    """``uses`` names a resource that neither this queue nor any worker defined."""


class InvalidUniqueKey(InvalidJobOption):
    """A unique key is not a valid key, or is given twice in one batch, or to a container.

    Keys follow the rules of group keys: a non-empty string of at most 200 characters,
    without NUL characters or whitespace at either end.
    """


class JobNotFound(ReadyqError, LookupError):
    """No job has the given id."""


class NotClosable(ReadyqError):
    """``Queue.close_container`` was refused: the job is not a container, has ended, has
    children that have not ended, or still waits for a dependency (the message says
    which, and what to do). Nothing was changed."""


class LeaseLost(ReadyqError):
    """The worker no longer holds the lease of its job.

    The lease expired and was reclaimed, the job timed out, or it was cancelled. Every
    write fenced by the old lease changed nothing.
    """


class QueueClosed(ReadyqError):
    """The queue was closed with ``Queue.close()`` and accepts no more calls."""


class AdminError(ReadyqError):
    """An operator command cannot do what was asked (the message says why)."""


class NotRetryable(AdminError):
    """The job is not in a state that ``retry`` can revive."""


class NotCancellable(AdminError):
    """The job has already ended; there is nothing to cancel."""


class SchemaNotVersioned(AdminError):
    """readyq's tables exist but carry no migration history (see ``migrate --stamp``)."""


class InvalidArgument(ReadyqError, ValueError):
    """An operator function of :mod:`readyq.admin` was given a bad argument: a negative,
    infinite or too long age to ``prune``, ``extra_attempts`` out of range, a bad batch
    or graph size."""


class InvalidPause(ReadyqError, ValueError):
    """A pause or a resume was given neither a group nor a type, a bad key, or a bad
    ``until`` (a naive or out-of-range datetime, a duration that is not positive)."""


class InvalidSchedule(ConfigurationError):
    """A periodic schedule is badly defined: a bad name, both or neither of ``cron`` and
    ``every``, a cron expression that is not five valid fields, an unknown time zone, an
    ``every`` that is not a positive whole number of seconds, an unknown ``catch_up``,
    a ``job`` that is not callable, or a name defined twice on one queue."""


class ScheduleNotFound(ReadyqError, LookupError):
    """No schedule of that name is stored, and this queue does not define one."""


class InvalidFilter(ReadyqError, ValueError):
    """A job listing or a bulk action was given a bad filter: an unknown state, a bad
    key or id, a time range that ends before it starts, a bad order or page size; or a
    bulk action was given no filter at all, or states it cannot change."""


class InvalidCursor(InvalidFilter):
    """The cursor is not one a job listing made, or it continues a listing with another
    filter or order."""
