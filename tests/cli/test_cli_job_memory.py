"""What a job's attempts keep, as the CLI shows it: `readyq show` (text and --json), the
progress column of `readyq jobs` and the table of `readyq top`, with a handler's hostile
text (terminal escapes, rich markup) shown as it was written, never interpreted."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import readyq

from .support import Run, run_until_idle, wait_for

# Rich markup, HTML and a terminal escape (which would turn the terminal red).
HOSTILE = "[red]x[/red] <script>alert(1)</script> \x1b[31mred"


@pytest.fixture
def running(mq: readyq.Queue) -> Iterator[tuple[int, Any]]:
    """A job held running by a worker in a thread, after it stored a step, saved a state
    and reported progress (each with hostile text)."""
    release = threading.Event()

    @mq.handler("long")
    def long(job: readyq.Job) -> None:
        job.step("fetch", lambda: {"rows": "é" * 10})
        job.save_state({"cursor": HOSTILE, "pad": "z" * 2000})
        job.progress(1234, 10_000, HOSTILE)
        release.wait(30)

    job_id = mq.enqueue("long", {})
    worker = mq.worker(concurrency=1, poll_interval=0.02, lease_ttl=30, heartbeat_interval=1)
    thread = threading.Thread(target=worker.run, kwargs={"handle_signals": False}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: mq.get(job_id).progress is not None)
        yield job_id, worker
    finally:
        release.set()
        worker.stop()
        thread.join(20)


def test_show_prints_progress_state_and_steps_as_text(
    migrated: Run, mq: readyq.Queue, running: tuple[int, Any]
) -> None:
    job_id, _ = running
    out = migrated("show", str(job_id))
    assert out.code == 0, out.err
    text = out.out
    assert "1,234 of 10,000 (12%)" in text and "██░░" in text
    # The message and the state as written: markup and HTML as text, the escape visible.
    assert "[red]x[/red] <script>alert(1)</script> \\x1b[31mred" in text
    assert "\x1b" not in text
    assert '"cursor": "[red]x[/red] <script>' in text
    assert "z" * 300 not in text and "chars)" in text  # the state cut short
    assert "by attempt 1" in text and "bytes" in text
    assert "Steps: 1" in text and "fetch" in text
    # {"rows": "é" * 10}, compact: 9 + 20 + 2 bytes.
    [line] = [x for x in text.splitlines() if "fetch" in x]
    assert " 31 " in line

    data = migrated("show", str(job_id), "--json").json()
    assert data["progress"]["current"] == 1234 and data["progress"]["total"] == 10_000
    assert data["progress"]["fraction"] == 0.1234 and data["progress"]["message"] == HOSTILE
    assert data["progress"]["updated_at"].endswith("+00:00")
    saved = data["saved_state"]
    assert saved["value"]["cursor"] == HOSTILE and saved["attempt"] == 1
    assert saved["bytes"] > 2000 and saved["saved_at"] is not None
    assert data["steps"] == [{"name": "fetch", "attempt": 1, "bytes": 31,
                              "stored_at": data["steps"][0]["stored_at"]}]
    assert data["step_count"] == 1


def test_jobs_and_top_show_the_progress_of_jobs_in_flight(
    migrated: Run, mq: readyq.Queue, running: tuple[int, Any]
) -> None:
    job_id, worker = running
    other = mq.enqueue("long", {}, run_after=3600)  # ready, not due: no progress
    listing = migrated("jobs")
    assert listing.code == 0, listing.err
    [row] = [x for x in listing.out.splitlines() if f" {job_id} " in x and "long" in x]
    assert "12%" in row and "█" in row
    assert "progress" in listing.out
    [quiet] = [x for x in listing.out.splitlines() if f" {other} " in x and "ready" in x]
    assert "%" not in quiet
    page = migrated("jobs", "--json").json()
    by_id = {j["id"]: j for j in page["jobs"]}
    assert by_id[job_id]["progress"]["fraction"] == 0.1234
    assert by_id[other]["progress"] is None

    frame = migrated("top", "--once")
    assert frame.code == 0, frame.err
    assert "Jobs in flight reporting progress" in frame.out
    [line] = [x for x in frame.out.splitlines() if worker.worker_id in x and "12%" in x]
    assert "[red]x[/red]" in line and "\x1b" not in frame.out


def test_a_listing_of_jobs_without_progress_has_no_progress_column(
    migrated: Run, mq: readyq.Queue
) -> None:
    mq.enqueue("plain", {})
    out = migrated("jobs")
    assert out.code == 0 and "plain" in out.out and "progress" not in out.out
    assert "Jobs in flight reporting progress" not in migrated("top", "--once").out


def test_show_lists_the_first_steps_by_name_and_counts_all(
    migrated: Run, mq: readyq.Queue
) -> None:
    @mq.handler("many")
    def many(job: readyq.Job) -> None:
        for i in range(105):
            job.step(f"s{i:03d}", lambda i=i: i)

    job_id = mq.enqueue("many", {})
    run_until_idle(mq)
    data = migrated("show", str(job_id), "--json").json()
    assert data["step_count"] == 105
    assert [s["name"] for s in data["steps"]] == [f"s{i:03d}" for i in range(100)]
    assert data["progress"] is None and data["saved_state"] is None
    text = migrated("show", str(job_id)).out
    assert "Steps: 105, the first 100 by name" in text and "... 5 more" in text
    assert "s099" in text and "s100" not in text
