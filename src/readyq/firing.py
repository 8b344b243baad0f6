"""Who fires schedules: every worker whose queue defines them, from its loop.

A :class:`ScheduleFirer` remembers, per schedule, the monotonic instant at which its
next occurrence may be due, and asks the database only then: a tick with nothing due
costs one comparison per schedule and no statement. The firing itself locks the
schedule's row (:mod:`readyq.store.schedules`), so any number of workers on any number
of hosts may hold the same schedules: each occurrence is enqueued once.

The memory is re-read at least every ``recheck`` seconds even when nothing is due by
it, so that a schedule paused, resumed or redefined from elsewhere, or a database clock
that jumped, is noticed within that time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from readyq.planning.schedules import MAX_CATCH_UP
from readyq.schedules import Schedule
from readyq.store import BatchJob, Store
from readyq.transient import describe, waited_out
from readyq.untrusted import one_line

log = logging.getLogger("readyq.schedules")

# The longest a firer trusts its memory of a schedule's next occurrence (seconds).
DEFAULT_RECHECK = 60.0

# Checks a batch of JobSpecs as Queue.enqueue_many does and builds its rows.
BatchBuilder = Callable[[Sequence[Any]], tuple[list[BatchJob], Any]]


class ScheduleFirer:
    """Fires a queue's schedules when they come due (see the module's docstring).

    Args:
        store: the queue's store.
        schedules: the queue's schedules by name.
        batch_of: checks what a schedule's ``job`` returns and builds its rows
            (``Queue.batch_of``).
        worker_id: named in the log lines.
        enqueued: called with the jobs a firing enqueued, once it is committed (the
            observers' ``Observers.enqueued``, as ``Queue.enqueue_many`` calls it).
    """

    def __init__(
        self,
        store: Store,
        schedules: Mapping[str, Schedule],
        batch_of: BatchBuilder,
        worker_id: str = "",
        enqueued: Callable[[list[BatchJob]], None] | None = None,
    ) -> None:
        self.store = store
        self.schedules = dict(schedules)
        self.batch_of = batch_of
        self.worker_id = worker_id
        self.enqueued = enqueued
        self.recheck = DEFAULT_RECHECK
        # name -> monotonic instant to look at the schedule's row again (0: at once).
        self.due: dict[str, float] = dict.fromkeys(self.schedules, 0.0)
        # Schedules this firer has reported a conflicting definition of.
        self.conflicts: set[str] = set()

    def next_due(self) -> float | None:
        """The monotonic instant at which some schedule may be due (None: none)."""
        return min(self.due.values(), default=None)

    def run_once(self, now: float | None = None) -> int:
        """Fire the schedules that may be due at monotonic instant ``now``; return how
        many occurrences were enqueued. A database outage is raised for the caller to
        wait out; any other failure (a ``job`` that raises or returns bad jobs) is
        logged and the schedule is tried again ``recheck`` seconds later."""
        now = time.monotonic() if now is None else now
        fired = 0
        for name, at in list(self.due.items()):
            if at <= now:
                fired += self._fire(self.schedules[name], now)
        return fired

    def reset(self, name: str | None = None) -> None:
        """Forget what is remembered of ``name`` (None: of every schedule): the next
        ``run_once`` reads its row."""
        for key in self.due if name is None else [name]:
            if key in self.due:
                self.due[key] = 0.0

    def _fire(self, schedule: Schedule, now: float) -> int:
        name = schedule.name

        # fire time -> the jobs built for it (built again if the transaction runs again)
        built: dict[int, list[BatchJob]] = {}

        def build(fire_at: int) -> list[BatchJob]:
            built[fire_at] = self.batch_of(schedule.specs(fire_at))[0]
            return built[fire_at]

        try:
            firing = self.store.fire_schedule(
                name, schedule.timing, build, report_conflict=name not in self.conflicts
            )
        except Exception as exc:
            if waited_out(exc, self.store.connected_dialect):
                raise
            self.due[name] = now + self.recheck
            log.error(
                "schedule %s not fired (%s); trying again in %.0fs", one_line(name),
                describe(exc), self.recheck, exc_info=True,
                extra={"event": "schedule_failed", "schedule": name,
                       "worker_id": self.worker_id},
            )
            return 0
        if firing.conflict is not None:
            if name not in self.conflicts:
                self.conflicts.add(name)
                log.warning(
                    "schedule %s is stored as %s, but this queue defines it as %s: this "
                    "worker does not fire it (readyq schedules shows the conflict)",
                    one_line(name), one_line(firing.conflict),
                    one_line(schedule.timing.describe()),
                    extra={"event": "schedule_conflict", "schedule": name,
                           "worker_id": self.worker_id},
                )
            self.due[name] = now + self.recheck
            return 0
        self.conflicts.discard(name)
        wait = self.recheck
        if firing.next_fire_at is not None and not firing.paused:
            wait = min(wait, max(0.0, firing.next_fire_at - firing.now))
        self.due[name] = now + wait
        if firing.fired:
            if self.enqueued is not None:
                self.enqueued([b for at in firing.fired for b in built.get(at, ())])
            log.info(
                "schedule %s fired %d occurrence(s), the last at %s", one_line(name),
                len(firing.fired), schedule.timing.local(firing.fired[-1]).isoformat(),
                extra={"event": "schedule_fired", "schedule": name,
                       "worker_id": self.worker_id, "fire_times": list(firing.fired),
                       "job_ids": list(firing.job_ids)},
            )
        if firing.skipped and schedule.timing.catch_up == "all":
            log.warning(
                "schedule %s missed more than %d occurrences: the older ones were skipped",
                one_line(name), MAX_CATCH_UP,
                extra={"event": "schedule_skipped", "schedule": name,
                       "worker_id": self.worker_id},
            )
        return len(firing.fired)
