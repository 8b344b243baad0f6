"""The outcome of an attempt, built from how it ended: the value its handler returned,
the exception it raised, what became of its child process, or a value the database
refused. How an attempt ends (done, retry, fail, cancel) is decided by
:func:`readyq.planning.attempts.attempt_end`; this module builds the record of it.

Shared by the thread worker and the asyncio worker.
"""

from __future__ import annotations

import traceback
from typing import Any

from readyq.errors import InvalidJob, InvalidJobResult
from readyq.handlers import HandlerSpec
from readyq.model import ClaimedJob, Job
from readyq.payload import encode
from readyq.planning.attempts import Ended, attempt_end
from readyq.planning.backoff import retry_delay
from readyq.store import Outcome, OutcomeKind
from readyq.store.records import Spawn
from readyq.transient import describe
from readyq.untrusted import one_line
from readyq.validation import dump_result

# The error types of attempts that ended with their child process (readyq.isolation).
CHILD_DIED = "ChildProcessDied"
CHILD_ENDS = frozenset({"Timeout", "MemoryLimit", CHILD_DIED, "Cancelled", "LeaseLost"})
# The error type of an attempt whose outcome the database refused to store, and of one
# whose stored args cannot be read.
VALUE_REFUSED = "ValueRefused"
UNREADABLE_ARGS = "UnreadableArgs"
# Fills a NamedTuple from its fields in order, with no Python frame (see done_outcome).
_NEW_TUPLE = tuple.__new__
# The kinds every outcome is built with and sorted by, read once: on Python 3.11 each
# ``OutcomeKind.X`` goes through EnumType.__getattr__'s slow attribute path.
DONE, RETRY, FAIL, CANCEL = (
    OutcomeKind.DONE, OutcomeKind.RETRY, OutcomeKind.FAIL, OutcomeKind.CANCEL
)


def done_outcome(
    c: ClaimedJob,
    value: Any,
    max_bytes: int,
    spec: HandlerSpec | None = None,
    duration: float = 0.0,
    spawns: tuple[Spawn, ...] = (),
) -> Outcome:
    """The outcome of an attempt whose handler returned ``value`` (having staged
    ``spawns``).

    Raises InvalidJobResult when the value cannot be stored (or fails the handler's
    ``result_model``); the caller fails the attempt with it.
    """
    model = None if spec is None else spec.result_model
    if value is not None or model is not None:  # None, what most return, is JSON-ready
        value = dump_result(model, c.type, value)
    try:
        result_json = encode(value, max_bytes, "result")
    except InvalidJob as exc:
        raise InvalidJobResult(
            f"the handler of job type {c.type!r} returned a result that cannot be stored: "
            f"the {exc}"
        ) from None
    # Outcome's fields in order (job, kind, result_json, error, delay, duration,
    # error_type, spawns), filled by tuple.__new__ with no Python frame: its generated
    # constructor, with keywords, cost each job about 800 instructions more.
    return _NEW_TUPLE(Outcome, (c, DONE, result_json, None, 0.0, duration, None, spawns))


def failed_outcome(
    c: ClaimedJob,
    job: Job,
    spec: HandlerSpec,
    exc: BaseException,
    *,
    duration: float = 0.0,
) -> Outcome:
    """The outcome of an attempt whose handler raised ``exc``: cancel, retry or fail."""
    error = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return error_outcome(c, job, spec, error, type(exc).__name__, duration=duration)


def error_outcome(
    c: ClaimedJob,
    job: Job,
    spec: HandlerSpec,
    error: str,
    error_type: str,
    *,
    duration: float = 0.0,
    ended: Ended = Ended.RAISED,
) -> Outcome:
    """The outcome of an attempt that ``ended`` with ``error`` (a traceback, or what
    became of its child process), as :func:`readyq.planning.attempts.attempt_end`
    decides it. A retry waits the handler's backoff; after a timeout, the backoff a
    sweep would give it."""
    end = attempt_end(ended, cancel_requested=job.cancelled, attempt=c.attempt,
                      max_attempts=c.max_attempts, retry_on_timeout=spec.retry_on_timeout)
    kind = OutcomeKind(end)
    delay = 0.0
    if kind is RETRY:
        delay = (retry_delay(c.attempt) if ended is Ended.TIMED_OUT
                 else retry_delay(c.attempt, base=spec.retry_base, maximum=spec.retry_max))
    return Outcome(job=c, kind=kind, error=error, duration=duration, error_type=error_type,
                   delay=delay)


def refused_outcome(o: Outcome, exc: BaseException) -> Outcome:
    """The failure that replaces outcome ``o`` when the database refused a value it
    carries (``exc``): the job fails, with an error that says what was refused."""
    what = "result" if o.kind == DONE else "error text"
    end = attempt_end(Ended.UNRUNNABLE, cancel_requested=False, attempt=o.job.attempt,
                      max_attempts=o.job.max_attempts)
    return Outcome(
        job=o.job, kind=OutcomeKind(end), duration=o.duration, error_type=VALUE_REFUSED,
        error=(f"the attempt ended {o.kind}, but the database refused its {what}: "
               f"{one_line(describe(exc))}"),
    )


def unreadable_outcome(c: ClaimedJob, job: Job, spec: HandlerSpec, why: str) -> Outcome:
    """The failure of an attempt whose stored args cannot be read (``why``): running it
    again cannot help, so the job fails at once."""
    return error_outcome(c, job, spec, why, UNREADABLE_ARGS, ended=Ended.UNRUNNABLE)
