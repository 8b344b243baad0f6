"""What a job's attempts keep, on the dashboard over HTTP (Starlette's TestClient), on
every database: the job list's progress bar, the job page's progress, saved state and
steps, and the JSON API's job endpoints; a handler's hostile text reaches the page
escaped."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from markupsafe import escape
from starlette.testclient import TestClient

import readyq

from .support import HOSTILE, WORKER

MARKUP = "[red]x[/red]"


@pytest.fixture
def held(queue: readyq.Queue) -> Iterator[int]:
    """A job running in a worker's thread after it stored two steps, saved a state and
    reported progress, each with hostile text."""
    release = threading.Event()

    @queue.handler("long")
    def long(job: readyq.Job) -> None:
        job.step("fetch", lambda: {"rows": list(range(10))})
        job.step(HOSTILE, lambda: MARKUP)
        job.save_state({"cursor": HOSTILE + MARKUP, "pad": "z" * 5000})
        job.progress(250, 1000, HOSTILE + MARKUP)
        release.wait(30)

    job_id = queue.enqueue("long", {})
    worker = queue.worker(**{**WORKER, "concurrency": 1})
    thread = threading.Thread(target=worker.run, kwargs={"handle_signals": False}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 15
        while queue.get(job_id).progress is None:
            assert time.monotonic() < deadline, "the job did not report progress"
            time.sleep(0.05)
        yield job_id
    finally:
        release.set()
        worker.stop()
        thread.join(20)


def test_the_job_page_shows_progress_state_and_steps_escaped(
    client: TestClient, held: int
) -> None:
    page = client.get(f"/jobs/{held}")
    assert page.status_code == 200
    text = page.text
    assert '<progress max="1" value="0.25">25%</progress>' in text
    assert "250 of 1,000 (25%)" in text
    escaped = escape(HOSTILE + MARKUP)
    assert f'<p class="progress-message" id="progress-message">{escaped}</p>' in text
    assert "<script>alert" not in text and "onerror=alert(1)>" not in text
    # The state, cut short, escaped; the JSON API has all of it.
    assert 'id="saved-state"' in text and "z" * 2500 not in text
    assert "the JSON API has all of it" in text
    assert 'id="steps"' in text and "<td>fetch</td>" in text
    assert f"<td>{escape(HOSTILE)}</td>" in text
    # The progress is inside the live region, which the page refreshes in place.
    assert text.index('id="live"') < text.index('id="progress"')

    api = client.get(f"/api/jobs/{held}").json()
    assert api["progress"]["fraction"] == 0.25 and api["progress"]["message"] == HOSTILE + MARKUP
    assert api["saved_state"]["value"]["pad"] == "z" * 5000
    assert api["saved_state"]["attempt"] == 1 and api["saved_state"]["bytes"] > 5000
    assert sorted(s["name"] for s in api["steps"]) == sorted(["fetch", HOSTILE])
    assert api["step_count"] == 2
    assert all(s["attempt"] == 1 and s["bytes"] > 0 and s["stored_at"] for s in api["steps"])


def test_the_job_list_shows_a_bar_for_jobs_in_flight_with_progress(
    client: TestClient, queue: readyq.Queue, held: int
) -> None:
    later = queue.enqueue("long", {}, run_after=3600)
    text = client.get("/jobs").text
    row = text[text.index(f'<tr data-job-id="{held}"'):]
    row = row[: row.index("</tr>")]
    assert '<progress max="1" value="0.25">25%</progress>' in row
    assert f'title="{escape(HOSTILE + MARKUP)}"' in row
    other = text[text.index(f'<tr data-job-id="{later}"'):]
    assert "<progress" not in other[: other.index("</tr>")]
    api = client.get("/api/jobs").json()
    by_id = {j["id"]: j for j in api["jobs"]}
    assert by_id[held]["progress"]["current"] == 250 and by_id[later]["progress"] is None


def test_a_job_without_memory_shows_none_of_it(client: TestClient, queue: readyq.Queue) -> None:
    job_id = queue.enqueue("plain", {})
    text = client.get(f"/jobs/{job_id}").text
    assert 'id="progress"' not in text and 'id="saved-state"' not in text
    assert 'id="steps"' not in text
    api = client.get(f"/api/jobs/{job_id}").json()
    assert api["progress"] is None and api["saved_state"] is None
    assert api["steps"] == [] and api["step_count"] == 0
