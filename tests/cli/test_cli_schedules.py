"""`readyq schedules` (the table, --json, --forget) and `readyq pause/resume --schedule`,
with a conflicting definition reported and stored names escaped. On every database."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa

import readyq
from readyq.untrusted import printable

from .support import Run

EVIL = "s\x1b[31mred"


def store_schedules(queue: readyq.Queue, *names: str) -> None:
    """Define ``names`` on ``queue`` and let a worker's firer store them."""

    @queue.handler("report")
    def report(job: Any) -> None:
        return None

    for name in names:
        queue.schedule(name, cron="0 3 * * *", tz="Europe/Berlin",
                       job=lambda at: readyq.JobSpec("report", {}))
    firer = queue.worker().firer
    assert firer is not None
    firer.run_once()


def test_schedules_lists_pauses_and_resumes(migrated: Run, mq: readyq.Queue, db: str) -> None:
    cli = migrated
    assert "no schedules" in cli("schedules").out
    assert cli("schedules", "--json").json() == []
    store_schedules(mq, "nightly")
    out = cli("schedules")
    assert out.code == 0
    (line,) = [x for x in out.out.splitlines() if "nightly" in x]
    assert "cron 0 3 * * * Europe/Berlin, catch_up=latest" in line
    assert " - " in line and "active" in line  # never fired yet
    (info,) = mq.schedules()
    assert info.next_fire.strftime("%Y-%m-%d %H:%M:%S") in line
    listed = cli("schedules", "--json").json()
    assert listed[0]["name"] == "nightly" and listed[0]["last_fire"] is None
    assert listed[0]["paused"] is False and listed[0]["conflict"] is None
    assert datetime.fromisoformat(listed[0]["next_fire"]) == info.next_fire

    assert cli("pause", "--schedule", "nightly").out.strip() == "schedule nightly paused"
    assert mq.schedules()[0].paused
    assert "paused" in cli("schedules").out
    assert cli("schedules", "--json").json()[0]["paused"] is True
    assert cli("resume", "--schedule", "nightly").out.strip() == "schedule nightly resumed"
    again = cli("resume", "--schedule", "nightly")
    assert again.one_line_error and "not paused" in again.err
    missing = cli("pause", "--schedule", "nope")
    assert missing.one_line_error and "no schedule named" in missing.err
    both = cli("pause", "--schedule", "nightly", "--group", "a")
    assert both.code == 2 and both.one_line_error

    # Another application defines the same name differently: reported, not fired.
    with readyq.Queue(db) as other:
        @other.handler("report")
        def report(job: Any) -> None:
            return None

        other.schedule("nightly", every=60, job=lambda at: readyq.JobSpec("report", {}))
        firer = other.worker().firer
        assert firer is not None
        firer.run_once()
    out = cli("schedules").out
    assert "a worker defines it differently: every 60s, catch_up=latest" in out
    assert cli("schedules", "--json").json()[0]["conflict"] == "every 60s, catch_up=latest"
    assert cli("schedules", "--forget", "nightly").out.strip() == "schedule nightly forgotten"
    assert mq.schedules() == []
    assert cli("schedules", "--forget", "nightly").one_line_error


def test_stored_names_are_escaped(migrated: Run, mq: readyq.Queue) -> None:
    cli = migrated
    store_schedules(mq, EVIL)
    out = cli("schedules")
    assert "\x1b" not in out.out and printable(EVIL) in out.out
    paused = cli("pause", "--schedule", EVIL)
    assert paused.code == 0 and "\x1b" not in paused.out
    s = mq.store.tables.schedules
    with mq.engine.connect() as conn:
        assert conn.execute(sa.select(s.c.paused)).scalar_one()
    assert mq.schedules()[0].next_fire > datetime.now(timezone.utc)
