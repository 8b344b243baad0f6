"""Periodic schedules as a queue defines them: checked once, at definition.

:func:`define_schedule` turns the arguments of :meth:`readyq.Queue.schedule` into a
:class:`Schedule` or raises :class:`readyq.InvalidSchedule`, writing nothing. When the
schedule fires is decided by :mod:`readyq.planning.schedules`; who fires it, by
:mod:`readyq.firing`; the firing itself is one transaction of :mod:`readyq.store.schedules`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Union
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from readyq.errors import InvalidSchedule
from readyq.planning.schedules import CATCH_UP, DEFAULT_CATCH_UP, Timing
from readyq.schema import MAX_SECONDS, key_problem

if TYPE_CHECKING:
    from readyq.model import JobSpec

# What a schedule's ``job`` returns for an occurrence: one job, or a batch (a DAG) as
# ``Queue.enqueue_many`` takes it.
JobFactory = Callable[[datetime], Union["JobSpec", Sequence["JobSpec"]]]

DEFAULT_TZ = "UTC"


@dataclass(frozen=True)
class Schedule:
    """A checked schedule: its name, when it fires, and what it enqueues."""

    name: str
    timing: Timing
    job: JobFactory

    @property
    def fingerprint(self) -> str:
        return self.timing.fingerprint()

    def specs(self, fire_at: int) -> list[JobSpec]:
        """The jobs of the occurrence at epoch second ``fire_at``: ``job`` is called
        with it as an aware datetime in the schedule's time zone."""
        made = self.job(self.timing.local(fire_at))
        if isinstance(made, (list, tuple)):
            return list(made)
        return [made]  # type: ignore[list-item]


def _cron(value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidSchedule(f"cron must be a string of five fields, not {value!r}")
    fields = value.split()
    # cronsim also reads a sixth field (seconds) and the @daily-style names in some
    # versions: five fields only keep one meaning across versions.
    if len(fields) != 5:
        raise InvalidSchedule(
            f"cron must have five fields (minute hour day month weekday), not {value!r}"
        )
    expr = " ".join(fields)
    try:
        next(CronSim(expr, datetime(2000, 1, 1, tzinfo=timezone.utc)))
    except (CronSimError, StopIteration, ValueError) as exc:
        raise InvalidSchedule(f"cron {value!r} is not valid: {exc}") from None
    return expr


def _every(value: Any) -> int:
    seconds: Any = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real):
        raise InvalidSchedule(f"every must be a timedelta or a number of seconds, not {value!r}")
    seconds = float(seconds)
    if not math.isfinite(seconds) or seconds < 1 or seconds != int(seconds):
        raise InvalidSchedule(
            f"every must be a positive whole number of seconds, not {value!r}"
        )
    if seconds > MAX_SECONDS:
        raise InvalidSchedule(f"every must be at most a century, not {value!r}")
    return int(seconds)


def _tz(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidSchedule(f"tz must be an IANA time zone name, not {value!r}")
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidSchedule(f"tz {value!r} is not a known time zone") from None
    return value


def define_schedule(
    name: Any,
    *,
    job: Any,
    cron: Any = None,
    every: Any = None,
    tz: Any = DEFAULT_TZ,
    catch_up: Any = DEFAULT_CATCH_UP,
) -> Schedule:
    """Check a schedule's definition and build it; :class:`readyq.InvalidSchedule`
    otherwise."""
    problem = key_problem(name)
    if problem is not None:
        raise InvalidSchedule(f"schedule name {problem}: {name!r}")
    if (cron is None) == (every is None):
        raise InvalidSchedule("a schedule takes exactly one of cron= and every=")
    if catch_up not in CATCH_UP:
        raise InvalidSchedule(
            f"catch_up must be one of {', '.join(CATCH_UP)}, not {catch_up!r}"
        )
    if not callable(job):
        raise InvalidSchedule(f"job must be a callable taking the fire time, not {job!r}")
    timing = Timing(
        cron=None if cron is None else _cron(cron),
        every=None if every is None else _every(every),
        tz=_tz(tz),
        catch_up=str(catch_up),
    )
    return Schedule(str(name), timing, job)
