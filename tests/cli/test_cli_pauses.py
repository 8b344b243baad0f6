"""`readyq pause`, `resume`, `pauses`, and where pauses show: `status`, `jobs` (a marker),
`show` (what the job waits for). On every database."""

from __future__ import annotations

import pytest

import readyq
from readyq.untrusted import printable

from .support import Run

EVIL = "t\x1b[31mred"


def test_pause_resume_and_where_a_pause_shows(migrated: Run, mq: readyq.Queue) -> None:
    cli = migrated
    held = mq.enqueue("render", {}, group="tenant-b")
    free = mq.enqueue("render", {}, group="tenant-a")
    out = cli("pause", "--group", "tenant-b", "--until", "30m")
    assert out.code == 0 and out.out.startswith("group tenant-b paused until ")
    (p,) = mq.pauses()
    assert p.until is not None and 1790 < (p.until - p.since).total_seconds() <= 1801
    listed = cli("pauses", "--json").json()
    assert [(x["group"], x["type"]) for x in listed] == [("tenant-b", None)]
    assert "group tenant-b paused until" in cli("pauses").out
    status = cli("status")
    assert "group tenant-b paused until" in status.out
    assert cli("status", "--json").json()["pauses"][0]["group"] == "tenant-b"
    jobs = cli("jobs", "--state", "ready").out
    (held_line,) = [line for line in jobs.splitlines() if f" {held} " in line]
    (free_line,) = [line for line in jobs.splitlines() if f" {free} " in line]
    assert "ready (paused)" in held_line and "paused" not in free_line
    listed = cli("jobs", "--json").json()
    assert listed["paused_ids"] == [held] and listed["pauses"][0]["group"] == "tenant-b"
    show = cli("show", str(held))
    assert "waits for" in show.out and "group tenant-b paused until" in show.out
    assert cli("show", str(held), "--json").json()["waits_for"][0].startswith(
        "group tenant-b paused until")
    assert "paused" not in cli("show", str(free)).out
    assert cli("resume", "--group", "tenant-b").out.strip() == "resumed"
    assert mq.pauses() == []
    again = cli("resume", "--group", "tenant-b")
    assert again.one_line_error and "no such pause" in again.err


def test_bad_pauses_are_one_line_errors_and_keys_are_escaped(
    migrated: Run, mq: readyq.Queue
) -> None:
    cli = migrated
    assert cli("pause").one_line_error
    with pytest.raises(SystemExit) as usage:
        cli("pause", "--group", "a", "--until", "soon")
    assert usage.value.code == 2
    assert mq.pauses() == []
    out = cli("pause", "--type", EVIL)
    assert out.code == 0 and "\x1b" not in out.out and printable(EVIL) in out.out
    assert "\x1b" not in cli("pauses").out and "\x1b" not in cli("status").out
    (p,) = mq.pauses()
    assert p.type == EVIL and p.until is None
