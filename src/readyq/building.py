"""Building jobs: the caller's arguments and :class:`~readyq.model.JobSpec` items checked
and turned into the store's :class:`~readyq.store.records.NewJob` and
:class:`~readyq.store.records.BatchJob` records.

Every check that needs no database runs here, so that bad input raises its specific
exception before anything is written. Nothing here reads or writes the database: what a
queue knows (its handlers, its payload limit, how it checks resource uses) comes in as
:class:`JobRules`. Checks that need the database (jobs named by id exist, containers
have not ended) are left to the insert (:mod:`readyq.store.enqueue`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

from readyq.errors import (
    DependencyNotFound,
    InvalidJobId,
    InvalidJobOption,
    InvalidParent,
    InvalidResourceUse,
    InvalidUniqueKey,
    InvalidWeight,
    UnknownJobType,
)
from readyq.handlers import HandlerRegistry
from readyq.model import JobInfo, JobSpec
from readyq.payload import encode
from readyq.planning.dag import insertion_order
from readyq.schema import (
    MAX_ATTEMPTS,
    MAX_ATTEMPTS_FROM_HANDLER,
    MAX_ID,
    MAX_SECONDS,
    is_job_id,
    key_problem,
)
from readyq.store.records import BatchJob, NewJob, Spawn
from readyq.validation import normalize_args

MAX_WEIGHT = 1_000_000
MAX_PRIORITY = 1_000_000
MAX_BATCH = 100_000


@dataclass(frozen=True)
class JobRules:
    """What a queue's jobs are checked against.

    ``handlers``: the queue's handlers (a job type needs one when any is registered,
    and a handler's ``args_model`` validates its args). ``check_uses(uses, what)``: the
    resource uses in their stored form (None for none), or the queue's exception.
    """

    handlers: HandlerRegistry
    max_payload_bytes: int
    check_uses: Callable[[Any, str], str | None]


class Options(NamedTuple):
    """The checked options of a job that many jobs of a batch share."""

    type: str
    group: str
    weight: int
    priority: int
    max_attempts: int
    timeout: float | None
    is_container: bool
    args_model: Any


# -- single values -------------------------------------------------------------------


def check_seconds(
    value: float | timedelta | None, what: str, *, allow_zero: bool = False
) -> float | None:
    """A duration in seconds (None stays None); InvalidJobOption otherwise."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidJobOption(f"{what} must be a number of seconds or a timedelta, not {value!r}")
    result = float(value)
    if not math.isfinite(result) or result < 0 or (result == 0 and not allow_zero):
        raise InvalidJobOption(f"{what} must be a positive, finite duration, not {value!r}")
    if result > MAX_SECONDS:
        raise InvalidJobOption(
            f"{what} must be at most a century ({MAX_SECONDS:,.0f} seconds), not {value!r}"
        )
    return result


def instant_or_delay(
    value: datetime | timedelta | float | None, what: str, *, allow_zero: bool
) -> tuple[float | None, float | None]:
    """(epoch instant, None) for an aware datetime, (None, seconds) for a delay."""
    if not isinstance(value, datetime):
        return None, check_seconds(value, what, allow_zero=allow_zero)
    if value.tzinfo is None or value.utcoffset() is None:
        # A naive datetime means local time to datetime.now() but UTC to timestamp() of
        # a replaced tzinfo: refuse the ambiguity.
        raise InvalidJobOption(
            f"{what} {value.isoformat()} is a naive datetime: give an aware one "
            "(datetime.now(timezone.utc) + timedelta(...)) or a delay in seconds or as a "
            "timedelta"
        )
    try:
        return value.astimezone(timezone.utc).timestamp(), None
    except OverflowError:  # within a day of year 1 or 9999, not in UTC
        raise InvalidJobOption(f"{what} {value.isoformat()} is out of range in UTC") from None


def check_key(
    value: Any, what: str, error: type[InvalidJobOption] = InvalidJobOption,
    *, remember: bool = False,
) -> str:
    """``value`` as a key (a type, a group, a unique key...), else ``error``."""
    problem = key_problem(value, remember=remember)
    if problem is not None:
        raise error(f"{what} {problem}: {value!r}")
    return str(value)


def check_job_id(value: Any, what: str = "job id") -> int:
    """``value`` as a job id (a JobInfo gives its own), checked against the id column's
    range before any database sees it; raises InvalidJobId otherwise."""
    if isinstance(value, JobInfo):
        return value.id
    if not is_job_id(value):
        shown = repr(value)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        raise InvalidJobId(f"{what} must be a job id (an int from 1 to {MAX_ID}), not {shown}")
    return int(value)


def check_max_attempts(value: Any, what: str, error: type[ValueError]) -> int:
    """``value`` if it is an int from 1 to MAX_ATTEMPTS, else ``error``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS:
        raise error(f"{what} must be an int from 1 to {MAX_ATTEMPTS:,}, not {value!r}")
    return value


def _dependency_ids(depends_on: Iterable[int | JobInfo]) -> tuple[int, ...]:
    """``depends_on`` as distinct job ids, in their first order."""
    if depends_on is None or isinstance(depends_on, (str, bytes, int)):
        raise InvalidJobOption("depends_on must be a list of job ids")
    if type(depends_on) is tuple and not depends_on:
        return ()
    try:
        given = list(depends_on)
    except TypeError:  # not iterable
        raise InvalidJobOption("depends_on must be a list of job ids") from None
    return tuple(dict.fromkeys(check_job_id(d, "depends_on") for d in given))


# -- one job -------------------------------------------------------------------------


def job_options(
    rules: JobRules,
    type: str,
    group: str,
    weight: int,
    priority: int,
    max_attempts: int | None,
    timeout: float | timedelta | None,
    is_container: bool,
) -> Options:
    """Check the options a job shares with others of its kind (they repeat across a
    batch, where :func:`batch_of` checks each combination once)."""
    check_key(type, "job type", remember=True)
    handlers = rules.handlers
    if not is_container and handlers and type not in handlers:
        raise UnknownJobType(
            f"no handler for job type {type!r} on this queue "
            f"(registered: {', '.join(sorted(handlers))})"
        )
    check_key(group, "group", remember=True)
    if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= MAX_WEIGHT:
        raise InvalidWeight(f"weight must be an int from 1 to {MAX_WEIGHT}, not {weight!r}")
    if (
        isinstance(priority, bool)
        or not isinstance(priority, int)
        or abs(priority) > MAX_PRIORITY
    ):
        raise InvalidJobOption(
            f"priority must be an int within ±{MAX_PRIORITY}, not {priority!r}"
        )
    spec = None if is_container else handlers.get(type)
    if max_attempts is None:
        # Not given: the worker's handler decides when the job first runs, so that
        # a producer without the handler stores no guess.
        max_attempts = MAX_ATTEMPTS_FROM_HANDLER
    else:
        check_max_attempts(max_attempts, "max_attempts", InvalidJobOption)
    return Options(
        type, group, weight, priority, max_attempts, check_seconds(timeout, "timeout"),
        bool(is_container), None if spec is None else spec.args_model,
    )


def new_job(
    rules: JobRules,
    options: Options,
    args: Any,
    depends_on: Iterable[int | JobInfo],
    parent: int | JobInfo | None,
    run_after: datetime | timedelta | float | None,
    unique_key: str | None,
) -> NewJob:
    """A job of checked ``options``, its own arguments checked."""
    if options.args_model is not None:
        args = normalize_args(options.args_model, options.type, args)
    deps = _dependency_ids(depends_on)
    parent_id = None if parent is None else check_job_id(parent, "parent")
    run_at, delay = instant_or_delay(run_after, "run_after", allow_zero=True)
    return NewJob(
        options.type,
        encode(args, max_bytes=rules.max_payload_bytes),
        options.group,
        options.weight,
        options.priority,
        options.max_attempts,
        options.timeout,
        run_at,
        delay,
        deps,
        parent_id,
        options.is_container,
        None if unique_key is None else check_key(unique_key, "unique_key", InvalidUniqueKey),
    )


def one_job(
    rules: JobRules,
    type: str,
    args: Any,
    *,
    group: str,
    weight: int,
    priority: int,
    depends_on: Iterable[int | JobInfo],
    parent: int | JobInfo | None,
    run_after: datetime | timedelta | float | None,
    max_attempts: int | None,
    timeout: float | timedelta | None,
    is_container: bool,
    unique_key: str | None = None,
    uses: Mapping[str, int] | None = None,
) -> NewJob:
    """The job ``Queue.enqueue`` (and its kin) adds, checked whole."""
    options = job_options(rules, type, group, weight, priority, max_attempts, timeout,
                          is_container)
    if uses is not None and is_container:
        raise InvalidResourceUse("a container never runs: it takes no resources")
    job = new_job(rules, options, args, depends_on, parent, run_after, unique_key)
    return job if uses is None else job._replace(uses=rules.check_uses(uses, "uses"))


# -- a batch -------------------------------------------------------------------------


def _batch_keys(specs: Sequence[JobSpec]) -> dict[str, int]:
    """Check the specs' keys and unique keys; key -> its spec's position."""
    if len(specs) > MAX_BATCH:
        raise InvalidJobOption(f"a batch holds at most {MAX_BATCH} jobs, not {len(specs)}")
    keys: dict[str, int] = {}
    unique_keys: dict[str, int] = {}
    for pos, spec in enumerate(specs):
        if not isinstance(spec, JobSpec):
            raise InvalidJobOption(f"enqueue_many takes JobSpec items, not {spec!r}")
        if spec.key is not None:
            check_key(spec.key, "key")
            if spec.key in keys:
                raise InvalidJobOption(f"key {spec.key!r} is used twice in the batch")
            keys[spec.key] = pos
        if spec.unique_key is not None:
            check_key(spec.unique_key, "unique_key", InvalidUniqueKey)
            if spec.container:
                raise InvalidUniqueKey("a container cannot have a unique_key")
            if spec.unique_key in unique_keys:
                first = unique_keys[spec.unique_key]
                raise InvalidUniqueKey(
                    f"unique_key {spec.unique_key!r} is given to jobs #{first} and #{pos} "
                    "of the batch"
                )
            unique_keys[spec.unique_key] = pos
    return keys


def _in_batch(keys: Mapping[str, int], value: str, what: str) -> int:
    """The position of the job whose key is ``value``."""
    if value not in keys:
        raise DependencyNotFound(f"{what} names key {value!r}, which is not in the batch")
    return keys[value]


def _spec_dependencies(spec: JobSpec) -> Sequence[int | str | JobInfo]:
    """A spec's ``depends_on`` as a sequence."""
    depends_on = spec.depends_on
    if isinstance(depends_on, (tuple, list)):
        return depends_on
    if depends_on is None or isinstance(depends_on, (str, bytes, int)):
        raise InvalidJobOption("depends_on must be a list of job ids or keys")
    try:
        return list(depends_on)
    except TypeError:
        raise InvalidJobOption("depends_on must be a list of job ids or keys") from None


class _OptionsSeen:
    """The option combinations a batch has checked already (they repeat)."""

    def __init__(self) -> None:
        self.checked: dict[tuple[Any, ...], Options] = {}

    def of(self, rules: JobRules, spec: JobSpec) -> Options:
        weight, priority, max_attempts, timeout = (
            spec.weight, spec.priority, spec.max_attempts, spec.timeout
        )
        container = spec.container
        # The types are part of the key: True == 1 and 1.0 == 1 must not share a check.
        key = (
            spec.type, spec.group, weight, priority, max_attempts, timeout, container,
            type(weight), type(priority), type(max_attempts), type(timeout),
        )
        hashable = True
        try:
            options = self.checked.get(key)
        except TypeError:  # an unhashable option: checked (and refused) below
            options, hashable = None, False
        if options is None:
            options = job_options(
                rules, spec.type, spec.group, weight, 0 if container else priority,
                1 if container else max_attempts, None if container else timeout,
                container,
            )
            if hashable and len(self.checked) < 1024:
                self.checked[key] = options
        return options


def _spec_job(
    rules: JobRules,
    spec: JobSpec,
    pos: int,
    options: Options,
    outer_deps: Sequence[int | JobInfo],
    outer_parent: int | None,
) -> NewJob:
    """The job of one spec, with its references to existing jobs only."""
    container = spec.container
    job = new_job(
        rules, options, spec.args, outer_deps, outer_parent,
        None if container else spec.run_after, spec.unique_key,
    )
    if spec.uses is not None:
        if container:
            raise InvalidResourceUse(
                f"job #{pos} is a container, which never runs: it takes no resources"
            )
        job = job._replace(uses=rules.check_uses(spec.uses, f"job #{pos}: uses"))
    if spec.key is not None:
        job = job._replace(key=spec.key)
    return job


def batch_of(
    rules: JobRules, specs: Sequence[JobSpec]
) -> tuple[list[BatchJob], dict[int, int] | None]:
    """Check a batch as ``Queue.enqueue_many`` does and build its rows.

    Returns the rows in an order that inserts every job after those it refers to,
    and (when that is not the given order) each spec's position among them.
    """
    keys = _batch_keys(specs)
    deps_in: dict[int, list[int]] = {}
    parent_in: dict[int, int | None] = {}
    built: list[NewJob] = []
    seen = _OptionsSeen()
    backward = True  # every reference points to an earlier job, and no parent
    for pos, spec in enumerate(specs):
        depends_on = _spec_dependencies(spec)
        outer_deps: Sequence[int | JobInfo] = ()
        if depends_on:
            inner = deps_in[pos] = [
                _in_batch(keys, d, "depends_on") for d in depends_on if isinstance(d, str)
            ]
            if len(inner) != len(depends_on):
                outer_deps = [d for d in depends_on if not isinstance(d, str)]
            if backward and not all(d < pos for d in inner):
                backward = False
        outer_parent = spec.parent
        if isinstance(outer_parent, str):
            backward = False
            parent = parent_in[pos] = _in_batch(keys, outer_parent, "parent")
            if not specs[parent].container:
                raise InvalidParent(f"parent {spec.parent!r} is not a container")
            outer_parent = None
        options = seen.of(rules, spec)
        built.append(_spec_job(rules, spec, pos, options, outer_deps, outer_parent))
    if backward:
        # Already in an order that inserts every job after those it refers to.
        return [
            BatchJob(job, tuple(sorted(set(deps_in[pos]))) if pos in deps_in else ())
            for pos, job in enumerate(built)
        ], None
    return _reordered(built, deps_in, parent_in)


def _reordered(
    built: Sequence[NewJob],
    deps_in: Mapping[int, Sequence[int]],
    parent_in: Mapping[int, int | None],
) -> tuple[list[BatchJob], dict[int, int]]:
    """The batch in an order that inserts every job after those it refers to, and each
    job's position in it."""
    order = insertion_order(deps_in, parent_in, len(built))
    where = {pos: i for i, pos in enumerate(order)}
    batch = []
    for pos in order:
        parent = parent_in.get(pos)
        batch.append(BatchJob(
            built[pos],
            tuple(sorted({where[d] for d in deps_in.get(pos, ())})),
            None if parent is None else where[parent],
        ))
    return batch, where


def spawn_of(
    rules: JobRules, specs: Sequence[JobSpec], *, join: bool, parent: int | None
) -> Spawn:
    """Check what a handler spawns (``Job.spawn``) and build it."""
    if not isinstance(join, bool):
        raise InvalidJobOption(f"join must be True or False, not {join!r}")
    if parent is not None:
        parent = check_job_id(parent, "parent")
    batch, _ = batch_of(rules, list(specs))
    return Spawn(tuple(batch), join, parent)
