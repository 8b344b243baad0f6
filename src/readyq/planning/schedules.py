"""When a periodic schedule fires: its occurrences, and which of the due ones to fire.

Pure: instants are whole seconds since the Unix epoch read from the database's clock;
the store locks the schedule's row, reads that clock and asks :meth:`Timing.plan`.

A cron expression is evaluated by ``cronsim`` in the schedule's time zone, which follows
Debian cron across daylight-saving changes: a time that does not exist on a
spring-forward day (02:30 in Europe/Berlin) fires once, at the first instant after the
gap (03:00 local); a time that happens twice on a fall-back day fires once, at its first
occurrence; an expression whose hour field is ``*`` fires in both copies of the repeated
hour. An ``every`` interval is a fixed number of seconds counted from the Unix epoch, so
it is the same whatever the time zone (``every=timedelta(hours=1)`` fires at the top of
each UTC hour).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from cronsim import CronSim

CATCH_UP = ("latest", "all", "none")
DEFAULT_CATCH_UP = "latest"
# The most occurrences one firing enqueues under ``catch_up="all"``: after a longer
# outage the older ones are skipped (and a warning logged), so that a worker coming back
# after a year of a per-minute schedule does not enqueue half a million jobs at once.
MAX_CATCH_UP = 1000
# Under ``catch_up="none"`` an occurrence is still fired this many seconds after its
# time: a worker busy for a moment, or polling, is late by a little without having
# missed anything.
ON_TIME = 60


@dataclass(frozen=True)
class Plan:
    """What a firing does: the occurrences to enqueue (oldest first), the one after
    them, and whether due occurrences were left out."""

    fire: tuple[int, ...]
    next_fire_at: int
    skipped: bool


@dataclass(frozen=True)
class Timing:
    """When a schedule fires: a 5-field ``cron`` expression in time zone ``tz``, or
    ``every`` so many seconds; and what to do with missed occurrences (``catch_up``).
    Built checked by :func:`readyq.schedules.define_schedule`."""

    cron: str | None
    every: int | None
    tz: str
    catch_up: str

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.tz)

    def fingerprint(self) -> str:
        """A digest of the definition: two workers whose schedules of one name have
        different fingerprints define it differently."""
        text = json.dumps(
            {"cron": self.cron, "every": self.every, "tz": self.tz, "catch_up": self.catch_up},
            sort_keys=True,
        )
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def describe(self) -> str:
        """The definition in words, as ``readyq schedules`` shows it."""
        when = f"cron {self.cron} {self.tz}" if self.cron is not None else f"every {self.every}s"
        return f"{when}, catch_up={self.catch_up}"

    def local(self, at: int) -> datetime:
        """Epoch second ``at`` as an aware datetime in the schedule's zone."""
        return datetime.fromtimestamp(at, self.zone)

    def next_after(self, at: float) -> int:
        """The first occurrence strictly after instant ``at``."""
        second = math.floor(at)
        if self.every is not None:
            return (second // self.every + 1) * self.every
        assert self.cron is not None
        return int(next(CronSim(self.cron, self.local(second))).timestamp())

    def latest(self, at: float, count: int, since: int) -> list[int]:
        """Up to ``count`` occurrences at or before ``at`` and not before ``since``,
        newest first."""
        second = math.floor(at)
        out: list[int] = []
        if self.every is not None:
            t = second // self.every * self.every
            while t >= since and len(out) < count:
                out.append(t)
                t -= self.every
            return out
        assert self.cron is not None
        # Reverse iteration starts strictly before its instant: one second later takes
        # an occurrence at ``at`` itself in.
        for when in CronSim(self.cron, self.local(second + 1), reverse=True):
            t = int(when.timestamp())
            if t < since or len(out) >= count:
                break
            out.append(t)
        return out

    def plan(self, next_fire_at: int, now: float) -> Plan:
        """The occurrences due at ``now`` (from ``next_fire_at`` on) to fire under the
        catch-up policy, and the next one after ``now``."""
        following = self.next_after(now)
        if next_fire_at > now:
            return Plan((), next_fire_at, False)
        if self.catch_up == "all":
            due = self.latest(now, MAX_CATCH_UP + 1, next_fire_at)
            fire = due[:MAX_CATCH_UP]
            return Plan(tuple(reversed(fire)), following, len(due) > len(fire))
        due = self.latest(now, 2, next_fire_at)
        fire = due[:1]
        if self.catch_up == "none" and fire and now - fire[0] > ON_TIME:
            fire = []
        return Plan(tuple(fire), following, len(due) > len(fire))
