"""Text from rows is data on the operator's terminal and in the worker's log lines.

readyq refuses control characters in the keys it is given, but a row written by hand
(or by an older readyq) may still hold them in its type, group, state or error. The CLI
shows them as escapes (``\\x1b``), never as the terminal commands they would be, and
reads no markup in them; a log line about such a job stays one line.
"""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa

import readyq
from readyq import admin

from .support import Run, set_rows

CLEAR = "\x1b[2J\x1b]0;owned\x07"
HOSTILE = {
    "type": f"t{CLEAR}",
    "group_key": "g\x9b31m[bold red]x[/]",
    "error": f"line one\n{CLEAR}\u202etwo\ttabbed",
}


def hostile_job(mq: readyq.Queue, **extra: object) -> int:
    job_id = mq.enqueue("plain", {"x": 1})
    set_rows(mq, [job_id], **{**HOSTILE, **extra})
    return job_id


def assert_inert(out: str) -> None:
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out
    assert "\u202e" not in out
    assert "\\x1b[2J" in out


def test_show_jobs_status_and_dag_escape_control_characters(
    migrated: Run, mq: readyq.Queue
) -> None:
    cli = migrated
    job_id = hostile_job(mq, state="failed")
    other = hostile_job(mq, state=f"zz{CLEAR}")
    for argv in (("show", str(job_id)), ("jobs",), ("jobs", "--state", "failed"),
                 ("dag", str(job_id)), ("status",), ("show", str(other))):
        result = cli(*argv)
        assert result.code == 0, (argv, result.err)
        assert_inert(result.out + result.err)
    shown = cli("show", str(job_id)).out
    # Newlines and tabs of a traceback stay; the markup is shown, not applied.
    assert "line one\n" in shown and "\\u202etwo" in shown and "\\x09" not in shown
    assert "[bold red]x[/]" in cli("jobs").out


def test_cancel_and_retry_print_stored_states_escaped(
    migrated: Run, mq: readyq.Queue
) -> None:
    job_id = hostile_job(mq, state="failed")
    result = migrated("retry", str(job_id))
    assert result.code == 0, result.err
    assert "\x1b" not in result.out
    set_rows(mq, [job_id], state="odd\x1b[2J")
    result = migrated("cancel", str(job_id))
    assert "\x1b" not in result.out + result.err


def test_a_log_line_about_a_hand_edited_row_stays_one_line(
    queue: readyq.Queue, caplog: pytest.LogCaptureFixture
) -> None:
    """The sweep logs every job whose lease it reclaims, whatever its type."""
    job_id = queue.enqueue("plain")
    jobs = queue.store.tables.jobs
    forged = "plain\nreadyq.worker INFO job 99 (x) attempt 1 done"
    with queue.engine.begin() as conn:
        conn.execute(
            sa.update(jobs).where(jobs.c.id == job_id).values(
                type=forged, state="running", attempts=1, lease_owner="gone",
                lease_token=1, lease_expires=0.0,
            )
        )
    with caplog.at_level(logging.WARNING, logger="readyq"):
        result = queue.store.reclaim_expired()
    assert result.total == 1
    [record] = [r for r in caplog.records if getattr(r, "event", "") == "job_reclaimed"]
    assert "\n" not in record.getMessage()
    assert "plain\\x0areadyq.worker" in record.getMessage()
    assert admin.status(queue).states == {"failed": 1}, admin.status(queue).states
