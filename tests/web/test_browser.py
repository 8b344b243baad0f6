"""The dashboard in a real headless Chromium (Debian's, driven by Playwright), against a
served dashboard on each database: every page opens without a script error or a
Content-Security-Policy violation; the jobs filter; a failed job is retried and seen to
run (a worker in a thread, the page updating itself); a waiting job is cancelled after
the confirmation; a container's graph draws exactly the database's jobs.

Each test works on jobs of a group of its own, on a dashboard shared by the session's
tests of its database. Screenshots of every page go to the test's temporary directory
(and, with READYQ_SCREENSHOTS=DIR, to DIR as well: how docs/screenshots/ is made).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from readyq import JobState

from .conftest import Served
from .support import BROKEN, seed

TIMEOUT = 20_000  # ms


@pytest.fixture
def page(browser: Any, served: Served) -> Iterator[Any]:
    """A fresh browser page that records console errors and uncaught exceptions."""
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    p = context.new_page()
    p.set_default_timeout(TIMEOUT)
    p.errors = []  # type: ignore[attr-defined]
    p.on("console", lambda m: p.errors.append(m.text) if m.type == "error" else None)
    p.on("pageerror", lambda e: p.errors.append(str(e)))
    try:
        yield p
    finally:
        context.close()


def shoot(page: Any, tmp_path: Path, name: str, served: Served) -> None:
    page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)
    target = os.environ.get("READYQ_SCREENSHOTS")
    if target and served.name == "postgresql":
        Path(target).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(target) / f"{name}.png"), full_page=False)


def group() -> str:
    return "t-" + uuid.uuid4().hex[:8]


def test_each_page_opens_and_the_jobs_filter(
    page: Any, served: Served, tmp_path: Path
) -> None:
    q = served.queue
    g = group()
    p = seed(q, group=g)
    # Two jobs running under a rate limit while the pages are shot: the overview shows
    # them in flight and the limit's use, the workers page the worker that holds them.
    release = threading.Event()
    if "hold" not in q.handlers:
        q.rate_limit("partner-api", 5, per=60)
        name = served.name
        q.handler("hold", rate_limit="partner-api")(lambda job: HOLDS[name].wait(30) and None)
    HOLDS[served.name] = release
    held = [q.enqueue("hold", {"gate": True, "i": i}, group=g) for i in range(2)]
    worker = q.worker(concurrency=2, poll_interval=0.05, types=["hold"])
    thread = threading.Thread(target=worker.run, kwargs={"handle_signals": False}, daemon=True)
    thread.start()
    try:
        _pages(page, served, tmp_path, p, held)
    finally:
        release.set()
        worker.stop()
        thread.join(timeout=15)


HOLDS: dict[str, threading.Event] = {}


def _pages(page: Any, served: Served, tmp_path: Path, p: Any, held: list[int]) -> None:
    q = served.queue
    g = p.group
    deadline = time.monotonic() + 20
    while not all(q.get(i).state is JobState.RUNNING for i in held):
        assert time.monotonic() < deadline, "the held jobs did not start"
        time.sleep(0.05)
    pages = [
        ("overview", "/", "#by-group"),
        ("jobs", "/jobs", "#jobs-table tbody tr[data-job-id]"),
        ("jobs-failed", "/jobs?state=failed", "#jobs-table tbody tr[data-state=failed]"),
        ("job", f"/jobs/{p.failed[0]}", "#error"),
        ("graph", f"/jobs/{p.box}/graph", "#graph svg g.node"),
        ("workers", "/workers", f"#workers-table a[data-job-id='{held[0]}']"),
    ]
    for name, path, ready in pages:
        page.goto(served.url + path)
        page.wait_for_selector(ready)
        assert page.title().endswith("readyq")
        shoot(page, tmp_path, name, served)
    page.goto(served.url + "/jobs/999999999")
    assert page.locator("[data-status='404']").count() == 1
    # The one error: the 404 of that page itself.
    assert len(page.errors) == 1 and "404" in page.errors[0], page.errors
    page.errors.clear()
    # The live part refreshes itself: the pause button stops it.
    page.goto(served.url + "/")
    page.click("[data-action=pause-live]")
    assert page.get_attribute("body", "data-live-paused") == "yes"
    assert "paused" in page.inner_text("#live-status")
    page.click("[data-action=pause-live]")
    assert page.get_attribute("body", "data-live-paused") == "no"

    # The filters and the state tabs.
    page.goto(served.url + "/jobs")
    page.fill("input[name=group]", g)
    page.fill("input[name=type]", "transform")
    page.click("[data-action=filter]")
    page.wait_for_url("**/jobs?*")
    rows = page.locator("#jobs-table tbody tr[data-job-id]")
    shown = sorted(int(rows.nth(i).get_attribute("data-job-id")) for i in range(rows.count()))
    assert shown == sorted(p.chunks)
    page.click("nav.tabs a[data-tab=failed]")
    page.wait_for_selector("nav.tabs a[data-tab=failed][aria-current=page]")
    rows = page.locator("#jobs-table tbody tr[data-job-id]")
    listed = served.queue.jobs(state="failed", type="transform", group=g)
    assert [int(rows.nth(i).get_attribute("data-job-id")) for i in range(rows.count())] == [
        j.id for j in listed]
    assert {rows.nth(i).get_attribute("data-state") for i in range(rows.count())} == {"failed"}
    shoot(page, tmp_path, "jobs-filtered", served)
    assert page.errors == [], page.errors


def test_retry_a_failed_job_and_watch_it_run(page: Any, served: Served, tmp_path: Path) -> None:
    q = served.queue
    g = group()
    p = seed(q, group=g)
    target = p.failed[0]
    BROKEN.discard(g)  # the cause is fixed: the next attempt succeeds
    page.goto(f"{served.url}/jobs/{target}")
    assert page.get_attribute("h1[data-job-id]", "data-state") == "failed"
    page.click("button[data-action=retry]")
    page.wait_for_selector(f"h1[data-job-id='{target}'][data-state=ready]")
    assert "Retried" in page.inner_text(".notice")
    worker = q.worker(concurrency=2, poll_interval=0.05, types=["transform"])
    thread = threading.Thread(target=worker.run, kwargs={"handle_signals": False}, daemon=True)
    thread.start()
    try:
        # No reload: the page's live region turns done by itself.
        page.wait_for_selector(f"h1[data-job-id='{target}'][data-state=done]")
    finally:
        worker.stop()
        thread.join(timeout=15)
    assert q.get(target).state is JobState.DONE
    assert page.inner_text("#attempts").startswith("2 of")
    shoot(page, tmp_path, "job-retried", served)
    assert page.errors == [], page.errors


def test_cancel_a_waiting_job(page: Any, served: Served, tmp_path: Path) -> None:
    q = served.queue
    g = group()
    p = seed(q, group=g)
    page.goto(f"{served.url}/jobs?group={g}&state=waiting")
    page.check(f"#jobs-table tr[data-job-id='{p.waiting}'] input[name=id]")
    page.click("[data-action=cancel-selected]")
    page.wait_for_selector("section.confirm[data-confirmed=no]")
    assert page.get_attribute("section.confirm", "data-changed") == "1"
    assert q.get(p.waiting).state is JobState.WAITING  # nothing changes before the confirm
    shoot(page, tmp_path, "confirm", served)
    page.click("[data-action=confirm]")
    page.wait_for_selector("section.confirm[data-confirmed=yes]")
    assert q.get(p.waiting).state is JobState.CANCELLED
    page.goto(f"{served.url}/jobs/{p.waiting}")
    assert page.get_attribute("h1[data-job-id]", "data-state") == "cancelled"
    assert page.errors == [], page.errors


def test_a_refresh_in_flight_does_not_swap_away_the_selected_rows(
    page: Any, served: Served
) -> None:
    """A live refresh sent before a row was selected answers after it: its answer is not
    swapped in (the form would then cancel nothing), and the page says it waits."""
    q = served.queue
    g = group()
    p = seed(q, group=g)
    page.goto(f"{served.url}/jobs?group={g}&state=waiting")
    page.wait_for_load_state("load")  # the deferred scripts, htmx's included, have run
    # (An attribute, not a script waited on: the page's policy forbids eval.)
    page.evaluate(
        "() => document.body.addEventListener('htmx:afterRequest',"
        " () => document.body.setAttribute('data-test-answered', 'yes'))"
    )
    box = f"#jobs-table tr[data-job-id='{p.waiting}'] input[name=id]"
    page.check(box)
    # The refresh as the timer sends it when nothing is selected yet.
    page.evaluate("document.body.dispatchEvent(new Event('rq-refresh'))")
    page.wait_for_selector("body[data-test-answered=yes]", state="attached")
    assert page.is_checked(box)
    assert page.is_visible("[data-selection-note]")
    page.click("[data-action=cancel-selected]")
    page.wait_for_selector("section.confirm[data-confirmed=no]")
    assert page.get_attribute("section.confirm", "data-changed") == "1"
    assert page.errors == [], page.errors


def test_a_container_s_graph_draws_the_database_s_jobs(
    page: Any, served: Served, tmp_path: Path
) -> None:
    q = served.queue
    p = seed(q, group=group(), chunks=8)
    page.goto(f"{served.url}/jobs/{p.box}/graph")
    page.wait_for_selector("#graph[data-drawn]")
    graph = q.store.graph(p.box, max_nodes=200)
    nodes = page.locator("#graph svg g.node")
    drawn = {
        int(nodes.nth(i).get_attribute("data-job-id")): nodes.nth(i).get_attribute("data-state")
        for i in range(nodes.count())
    }
    # The container is drawn once, as a box around its children, labelled with its type.
    box = page.locator(f"#graph g.cluster[data-container-id='{p.box}']")
    assert box.count() == 1 and p.box not in drawn
    drawn[p.box] = box.get_attribute("data-state")
    assert f"#{p.box} {graph.nodes[p.box].type}" in box.text_content()
    assert drawn == {i: n.state for i, n in graph.nodes.items()}
    assert set(drawn) == {p.fetch, p.parse, p.box, *p.chunks, p.report}
    edges = page.locator("#graph svg path.edge")
    assert edges.count() == len(graph.deps)
    shoot(page, tmp_path, "graph-box", served)
    # A click on a node opens its job.
    page.click(f"#graph svg g.node[data-job-id='{p.report}']")
    page.wait_for_url(f"**/jobs/{p.report}")
    assert page.errors == [], page.errors


def test_a_graph_of_5000_jobs_is_cut_and_can_be_widened(
    page: Any, served: Served, tmp_path: Path
) -> None:
    if served.name != "postgresql":
        pytest.skip("one database is enough for the size of the drawing (the query is tested "
                    "on every database over HTTP)")
    from readyq import JobSpec

    q = served.queue
    box = q.enqueue_container("huge", group=group())
    q.enqueue_many([JobSpec("later", {"i": i}, parent=box, run_after=3600) for i in range(5000)])
    page.goto(f"{served.url}/jobs/{box}/graph")
    page.wait_for_selector("#graph[data-drawn]")
    summary = page.locator("#graph-summary")
    assert summary.get_attribute("data-shown") == "200"
    assert summary.get_attribute("data-hidden") == "4801"
    # The container in its box, and 199 of its children.
    assert page.locator("#graph svg g.node, #graph svg g.cluster").count() == 200
    page.click("[data-action=widen]")
    page.wait_for_selector("#graph[data-drawn='400']")
    # The page answers while and after it lays out 800 jobs.
    assert page.evaluate("1 + 1") == 2
    shoot(page, tmp_path, "graph-wide", served)
    assert page.errors == [], page.errors


# Rich markup and HTML that would run if it were not escaped: shown as text.
MEMORY_HOSTILE = '[red]x[/red] <script>window.pwned=1</script><img src=x onerror="window.pwned=2">'
MEMORY_GATES: dict[str, tuple[threading.Event, threading.Event]] = {}


def test_a_running_job_s_progress_bar_moves_and_its_text_stays_text(
    page: Any, served: Served, tmp_path: Path
) -> None:
    """The job list and the job page draw a running job's progress as a bar; the job
    page's bar moves by itself when the job reports more; a hostile message, state and
    step name are shown as the text they are."""
    q = served.queue
    if "remember" not in q.handlers:
        name = served.name

        def remember(job: Any) -> None:
            more, release = MEMORY_GATES[name]
            job.step(MEMORY_HOSTILE, lambda: 1)
            job.save_state({"cursor": MEMORY_HOSTILE})
            job.progress(250, 1000, MEMORY_HOSTILE)
            more.wait(30)
            time.sleep(1.1)  # past the throttle of one progress write a second
            job.progress(750, 1000, MEMORY_HOSTILE)
            release.wait(30)

        q.handler("remember")(remember)
    more, release = threading.Event(), threading.Event()
    MEMORY_GATES[served.name] = (more, release)
    g = group()
    job_id = q.enqueue("remember", {}, group=g)
    worker = q.worker(concurrency=1, poll_interval=0.05, types=["remember"])
    thread = threading.Thread(target=worker.run, kwargs={"handle_signals": False}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while q.get(job_id).progress is None:
            assert time.monotonic() < deadline, "the job reported no progress"
            time.sleep(0.05)
        page.goto(f"{served.url}/jobs?group={g}")
        bar = page.locator(f"#jobs-table tr[data-job-id='{job_id}'] .progress progress")
        assert bar.get_attribute("value") == "0.25" and bar.is_visible()
        assert page.get_attribute(f"#jobs-table tr[data-job-id='{job_id}'] .progress",
                                  "title") == MEMORY_HOSTILE
        page.goto(f"{served.url}/jobs/{job_id}")
        assert page.locator("#progress-bar progress").get_attribute("value") == "0.25"
        assert page.inner_text("#progress-message") == MEMORY_HOSTILE
        assert MEMORY_HOSTILE.replace('"', '\\"') in page.inner_text("#saved-state")
        assert MEMORY_HOSTILE in page.inner_text("#steps")
        assert page.locator("#progress script, #saved-state img, #steps img").count() == 0
        shoot(page, tmp_path, "job-progress", served)
        more.set()
        # No reload: the live region redraws the bar once the job reports more.
        page.wait_for_selector("#progress-bar[data-fraction='0.75']")
        assert page.locator("#progress-bar progress").get_attribute("value") == "0.75"
        assert "750 of 1,000 (75%)" in page.inner_text("#progress-count")
        assert page.evaluate("() => window.pwned === undefined")
    finally:
        more.set()
        release.set()
        worker.stop()
        thread.join(timeout=15)
    assert page.errors == [], page.errors
