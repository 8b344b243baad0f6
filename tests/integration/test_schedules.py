"""Periodic schedules on SQLite, PostgreSQL and MariaDB: each occurrence enqueued once,
catch-up policies, daylight-saving days in Europe/Berlin, pauses, conflicting
definitions, and definitions refused before anything is written.

The database clock is moved with ``store.clock_offset`` (no sleeping), and the worker's
firer is called directly (``worker.firer.run_once``), as its loop calls it.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from itertools import pairwise
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa

import readyq
from observability_support import Recorder
from readyq.firing import ScheduleFirer

BERLIN = ZoneInfo("Europe/Berlin")


def db_now(queue: readyq.Queue) -> float:
    return float(queue.store.read(lambda c: c.execute(sa.select(queue.store.now())).scalar()))


def set_clock(queue: readyq.Queue, at: datetime) -> None:
    """Move the database clock (as the store sees it) to ``at``."""
    queue.store.clock_offset = 0.0
    queue.store.clock_offset = at.timestamp() - db_now(queue)


def shift_clock(queue: readyq.Queue, seconds: float) -> None:
    queue.store.clock_offset += seconds


def handle_reports(queue: readyq.Queue) -> None:
    """Register the no-op handler of the ``report`` jobs the schedules enqueue."""

    @queue.handler("report")
    def report(job: Any) -> None:
        return None


def firer(queue: readyq.Queue) -> ScheduleFirer:
    handle_reports(queue)
    made = queue.worker().firer
    assert made is not None
    return made


def fire(f: ScheduleFirer) -> int:
    """Look at every schedule's row now, whatever the firer remembers."""
    f.reset()
    return f.run_once()


def fired_at(queue: readyq.Queue) -> list[int]:
    """The fire times recorded in the jobs' args, in id order."""
    page = queue.jobs(order="oldest", limit=1000)
    return [job.args["at"] for job in page if job.args and "at" in job.args]


def fire_rows(queue: readyq.Queue) -> list[tuple[str, int]]:
    f = queue.store.tables.schedule_fires
    with queue.engine.connect() as conn:
        rows = conn.execute(sa.select(f.c.name, f.c.fire_at).order_by(f.c.fire_at)).all()
    return [(name, int(at)) for name, at in rows]


def spec(at: datetime) -> readyq.JobSpec:
    return readyq.JobSpec("report", {"at": int(at.timestamp()), "local": at.isoformat()})


def test_every_fires_each_occurrence_once_and_first_after_it_was_defined(
    queue: readyq.Queue,
) -> None:
    queue.schedule("tick", every=timedelta(minutes=10), job=spec)
    f = firer(queue)
    assert queue.schedules() == []  # defining writes nothing
    set_clock(queue, datetime(2026, 6, 1, 12, 3, tzinfo=timezone.utc))
    assert fire(f) == 0  # the row is written; past occurrences are not fired
    (info,) = queue.schedules()
    assert info.name == "tick" and info.last_fire is None and not info.paused
    assert info.next_fire == datetime(2026, 6, 1, 12, 10, tzinfo=timezone.utc)
    assert info.definition == "every 600s, catch_up=latest" and info.conflict is None
    shift_clock(queue, 7 * 60)
    assert fire(f) == 1 and fire(f) == 0 and fire(f) == 0
    at = int(datetime(2026, 6, 1, 12, 10, tzinfo=timezone.utc).timestamp())
    assert fired_at(queue) == [at] and fire_rows(queue) == [("tick", at)]
    (info,) = queue.schedules()
    assert info.last_fire == datetime(2026, 6, 1, 12, 10, tzinfo=timezone.utc)
    assert info.next_fire == datetime(2026, 6, 1, 12, 20, tzinfo=timezone.utc)


def test_the_worker_remembers_when_to_look_and_claims_what_fired_in_the_same_tick(
    queue: readyq.Queue,
) -> None:
    queue.schedule("tick", every=60, job=spec)
    handle_reports(queue)
    worker = queue.worker(concurrency=1)
    assert worker.firer is not None
    worker.run_once()  # writes the row
    (info,) = queue.schedules()
    due = worker.firer.next_due()
    assert due is not None
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        statements.append(statement)

    sa.event.listen(queue.engine, "before_cursor_execute", seen)
    try:
        assert worker.firer.run_once() == 0  # not due yet: no statement at all
    finally:
        sa.event.remove(queue.engine, "before_cursor_execute", seen)
    assert statements == []
    set_clock(queue, info.next_fire + timedelta(seconds=1))
    worker.firer.due["tick"] = 0.0  # the clock jumped: look now
    tick = worker.run_once()
    assert tick.claimed == 1 and worker.stats.fired == 1
    worker.stop()


def test_a_worker_told_not_to_fire_leaves_the_schedules_to_the_others(
    queue: readyq.Queue,
) -> None:
    queue.schedule("tick", every=60, job=spec)
    handle_reports(queue)
    quiet = queue.worker(concurrency=1, fire_schedules=False)
    assert quiet.firer is None
    quiet.run_once()
    assert queue.schedules() == [] and quiet.stats.fired == 0  # not even the row
    firing = queue.worker(concurrency=1)
    assert firing.firer is not None
    firing.run_once()
    (info,) = queue.schedules()
    set_clock(queue, info.next_fire + timedelta(seconds=1))
    quiet.run_once()
    assert queue.counts() == {} and quiet.stats.fired == 0
    firing.firer.due["tick"] = 0.0  # the clock jumped: look now
    firing.run_once()
    assert firing.stats.fired == 1 and sum(queue.counts().values()) == 1
    with pytest.raises(readyq.ConfigurationError, match="fire_schedules must be True or False"):
        queue.worker(fire_schedules="no")  # type: ignore[arg-type]


def test_the_jobs_a_firing_enqueues_reach_on_enqueued_once_committed(
    queue: readyq.Queue,
) -> None:
    def occurrence(at: datetime) -> list[readyq.JobSpec]:
        return [
            readyq.JobSpec("report", {"at": int(at.timestamp())}, key="first"),
            readyq.JobSpec("report", {"step": 2}, depends_on=["first"]),
            readyq.JobSpec("audit", {}),
        ]

    queue.schedule("s", every=600, catch_up="all", job=occurrence)
    recorder = Recorder()
    queue.add_observer(recorder)

    @queue.handler("audit")
    def audit(job: Any) -> None:
        return None

    f = firer(queue)
    assert fire(f) == 0 and recorder.named("on_enqueued") == []  # the row only
    shift_clock(queue, 3 * 600 + 1)
    assert fire(f) == 3
    assert sorted(recorder.named("on_enqueued")) == [(3, "audit"), (6, "report")]
    assert sum(queue.counts().values()) == 9
    queue.pause_schedule("s")
    shift_clock(queue, 600)
    assert fire(f) == 0 and len(recorder.named("on_enqueued")) == 2  # nothing fired


@pytest.mark.parametrize(("policy", "expected"), [("latest", 1), ("all", 3), ("none", 0)])
def test_catch_up_policies(queue: readyq.Queue, policy: str, expected: int) -> None:
    queue.schedule("s", every=600, catch_up=policy, job=spec)
    f = firer(queue)
    set_clock(queue, datetime(2026, 6, 1, 12, 1, tzinfo=timezone.utc))
    fire(f)
    # Missed: 12:10, 12:20 and 12:30; the latest is 5 minutes old.
    set_clock(queue, datetime(2026, 6, 1, 12, 35, tzinfo=timezone.utc))
    assert fire(f) == expected
    stamps = [int(datetime(2026, 6, 1, 12, m, tzinfo=timezone.utc).timestamp())
              for m in (10, 20, 30)]
    assert fired_at(queue) == {"latest": stamps[-1:], "all": stamps, "none": []}[policy]
    (info,) = queue.schedules()
    assert info.next_fire == datetime(2026, 6, 1, 12, 40, tzinfo=timezone.utc)
    set_clock(queue, datetime(2026, 6, 1, 12, 40, 20, tzinfo=timezone.utc))
    assert fire(f) == 1  # on time: every policy fires it


def test_none_fires_an_occurrence_that_is_a_little_late(queue: readyq.Queue) -> None:
    queue.schedule("s", every=600, catch_up="none", job=spec)
    f = firer(queue)
    set_clock(queue, datetime(2026, 6, 1, 12, 1, tzinfo=timezone.utc))
    fire(f)
    set_clock(queue, datetime(2026, 6, 1, 12, 10, 50, tzinfo=timezone.utc))
    assert fire(f) == 1


def test_all_catches_up_at_most_1000_occurrences_per_firing(
    queue: readyq.Queue, caplog: pytest.LogCaptureFixture
) -> None:
    queue.schedule("s", every=1, catch_up="all", job=spec)
    f = firer(queue)
    start = datetime(2026, 6, 1, 12, 0, 0, 500000, tzinfo=timezone.utc)
    set_clock(queue, start)
    fire(f)
    set_clock(queue, start + timedelta(seconds=1500))
    with caplog.at_level(logging.WARNING, logger="readyq.schedules"):
        assert fire(f) == 1000
    rows = [at for _, at in fire_rows(queue)]
    last = int(start.timestamp()) + 1500
    assert rows == list(range(last - 999, last + 1))
    assert [r for r in caplog.records if getattr(r, "event", "") == "schedule_skipped"]


def test_a_dag_per_occurrence(queue: readyq.Queue) -> None:
    def dag(at: datetime) -> list[readyq.JobSpec]:
        return [
            readyq.JobSpec("report", {"step": "send"}, depends_on=["build"]),
            readyq.JobSpec("report", {"at": int(at.timestamp())}, key="build"),
        ]

    queue.schedule("dag", every=60, job=dag)
    f = firer(queue)
    fire(f)
    shift_clock(queue, 61)
    assert fire(f) == 1
    assert queue.counts() == {"ready": 1, "waiting": 1}
    assert len(fire_rows(queue)) == 1
    f_t = queue.store.tables.schedule_fires
    with queue.engine.connect() as conn:
        first = conn.execute(sa.select(f_t.c.job_id)).scalar_one()
    assert first == min(j.id for j in queue.jobs(limit=10))


# -- daylight saving time in Europe/Berlin ------------------------------------------------


def test_a_daily_0230_on_spring_forward_and_fall_back_days_fires_once_each(
    queue: readyq.Queue,
) -> None:
    queue.schedule("night", cron="30 2 * * *", tz="Europe/Berlin", catch_up="all", job=spec)
    f = firer(queue)
    set_clock(queue, datetime(2026, 3, 28, 12, 0, tzinfo=BERLIN))
    fire(f)
    set_clock(queue, datetime(2026, 3, 30, 12, 0, tzinfo=BERLIN))
    assert fire(f) == 2
    locals_ = [job.args["local"] for job in queue.jobs(order="oldest")]
    # 02:30 does not exist on 29 March 2026: it runs once, at 03:00 CEST.
    assert locals_ == ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"]
    set_clock(queue, datetime(2026, 10, 24, 12, 0, tzinfo=BERLIN))
    fire(f)  # the days in between
    before = len(fired_at(queue))
    set_clock(queue, datetime(2026, 10, 26, 12, 0, tzinfo=BERLIN))
    assert fire(f) == 2
    locals_ = [job.args["local"] for job in queue.jobs(order="oldest", limit=1000)][before:]
    # 02:30 happens twice on 25 October 2026: it runs once, at the first (CEST).
    assert locals_ == ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]


def test_an_hourly_schedule_fires_in_both_copies_of_the_repeated_hour(queue: readyq.Queue) -> None:
    queue.schedule("hourly", cron="0 * * * *", tz="Europe/Berlin", catch_up="all", job=spec)
    f = firer(queue)
    set_clock(queue, datetime(2026, 10, 24, 23, 30, tzinfo=BERLIN))
    fire(f)
    set_clock(queue, datetime(2026, 10, 25, 23, 30, tzinfo=BERLIN))
    # 00:00 to 23:00 local: 24 wall-clock hours, and 02:00 twice (CEST, then CET).
    assert fire(f) == 25
    stamps = fired_at(queue)
    assert len(set(stamps)) == 25 and all(b - a == 3600 for a, b in pairwise(stamps))
    locals_ = [job.args["local"] for job in queue.jobs(order="oldest")]
    assert locals_[2:4] == ["2026-10-25T02:00:00+02:00", "2026-10-25T02:00:00+01:00"]
    set_clock(queue, datetime(2026, 10, 26, 0, 0, 5, tzinfo=BERLIN))
    assert fire(f) == 1


# -- pause, conflict, bad input -----------------------------------------------------------


def test_a_paused_schedule_fires_nothing_and_resumes_from_now(queue: readyq.Queue) -> None:
    queue.schedule("s", every=600, catch_up="all", job=spec)
    f = firer(queue)
    set_clock(queue, datetime(2026, 6, 1, 12, 1, tzinfo=timezone.utc))
    fire(f)
    queue.pause_schedule("s")
    assert queue.schedules()[0].paused
    set_clock(queue, datetime(2026, 6, 1, 13, 1, tzinfo=timezone.utc))
    assert fire(f) == 0 and fired_at(queue) == []
    assert queue.resume_schedule("s") is True and queue.resume_schedule("s") is False
    assert fire(f) == 0  # what came due while paused stays skipped
    (info,) = queue.schedules()
    assert info.next_fire == datetime(2026, 6, 1, 13, 10, tzinfo=timezone.utc)
    set_clock(queue, datetime(2026, 6, 1, 13, 10, 1, tzinfo=timezone.utc))
    assert fire(f) == 1


def test_pausing_a_schedule_no_worker_has_stored_yet(queue: readyq.Queue) -> None:
    queue.schedule("s", every=600, job=spec)
    f = firer(queue)
    queue.pause_schedule("s")  # defined here: written, paused
    assert [i.paused for i in queue.schedules()] == [True]
    shift_clock(queue, 3600)
    assert fire(f) == 0
    with pytest.raises(readyq.ScheduleNotFound):
        queue.pause_schedule("nope")
    with pytest.raises(readyq.ScheduleNotFound):
        queue.resume_schedule("nope")
    with pytest.raises(readyq.InvalidSchedule):
        queue.pause_schedule("")


def test_a_different_definition_is_reported_not_fired(
    queue: readyq.Queue, db: str, caplog: pytest.LogCaptureFixture
) -> None:
    queue.schedule("s", every=600, job=spec)
    first = firer(queue)
    set_clock(queue, datetime(2026, 6, 1, 12, 1, tzinfo=timezone.utc))
    fire(first)
    with readyq.Queue(db) as other:
        other.schedule("s", cron="*/5 * * * *", job=spec)
        second = firer(other)
        set_clock(other, datetime(2026, 6, 1, 12, 11, tzinfo=timezone.utc))
        with caplog.at_level(logging.WARNING, logger="readyq.schedules"):
            assert fire(second) == 0
            assert fire(second) == 0
        warned = [r for r in caplog.records if getattr(r, "event", "") == "schedule_conflict"]
        assert len(warned) == 1  # once per worker
        (info,) = other.schedules()
        assert info.definition == "every 600s, catch_up=latest"  # the first one stands
        assert info.conflict == "cron */5 * * * * UTC, catch_up=latest"
        assert info.conflict_at is not None
        assert fired_at(queue) == []
        set_clock(queue, datetime(2026, 6, 1, 12, 11, tzinfo=timezone.utc))
        assert fire(first) == 1  # the definition that stands still fires
        # Forgetting the row lets the next definition take its place.
        assert other.forget_schedule("s") is True
        assert fire(second) == 0
        assert other.schedules()[0].definition.startswith("cron */5")
        set_clock(other, datetime(2026, 6, 1, 12, 16, tzinfo=timezone.utc))
        assert fire(second) == 1 and fire(first) == 0


def _tables_untouched(queue: readyq.Queue) -> bool:
    t = queue.store.tables
    with queue.engine.connect() as conn:
        return all(
            conn.execute(sa.select(sa.func.count()).select_from(table)).scalar() == 0
            for table in (t.schedules, t.schedule_fires, t.jobs)
        )


@pytest.mark.parametrize("kwargs", [
    {"cron": "0 3 * *"},  # four fields
    {"cron": "61 * * * *"},
    {"cron": "0 0 30 2 *"},  # never
    {"cron": "@daily"},
    {"cron": 5},
    {"every": 0},
    {"every": -60},
    {"every": timedelta(milliseconds=1500)},
    {"every": float("inf")},
    {"every": True},
    {"every": "5m"},
    {"cron": "0 3 * * *", "every": 60},
    {},
    {"every": 60, "tz": "Mars/Olympus"},
    {"every": 60, "tz": ""},
    {"every": 60, "tz": "../etc/passwd"},
    {"every": 60, "catch_up": "some"},
    {"every": 60, "job": "not callable"},
    {"every": 60, "name": ""},
    {"every": 60, "name": " padded"},
    {"every": 60, "name": 7},
])
def test_bad_definitions_raise_and_write_nothing(
    queue: readyq.Queue, kwargs: dict[str, Any]
) -> None:
    args: dict[str, Any] = {"name": "s", "job": spec, **kwargs}
    name = args.pop("name")
    with pytest.raises(readyq.InvalidSchedule):
        queue.schedule(name, **args)
    assert queue.schedules() == [] and _tables_untouched(queue)


def test_a_name_defined_twice_on_one_queue(queue: readyq.Queue) -> None:
    queue.schedule("s", every=60, job=spec)
    with pytest.raises(readyq.InvalidSchedule, match="already defined"):
        queue.schedule("s", every=60, job=spec)


def test_a_job_factory_that_fails_is_logged_and_writes_nothing(
    queue: readyq.Queue, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(at: datetime) -> readyq.JobSpec:
        return readyq.JobSpec("report", {"bad": {1, 2}})  # a set is not JSON

    queue.schedule("s", every=60, job=broken)
    f = firer(queue)
    fire(f)
    (before,) = queue.schedules()
    shift_clock(queue, 61)
    with caplog.at_level(logging.ERROR, logger="readyq.schedules"):
        assert fire(f) == 0
    assert [r for r in caplog.records if getattr(r, "event", "") == "schedule_failed"]
    assert queue.schedules() == [before] and fire_rows(queue) == []
    assert queue.counts() == {}
