"""The dashboard over HTTP (Starlette's TestClient), on every database: every page and
API route answers with the database's data; every action is a POST refused without its
CSRF token, refused in read-only mode and by the authorize hook; user data is escaped
and every response carries the Content-Security-Policy; a bad id is a 404 and a bad
filter a 400, never a traceback."""

from __future__ import annotations

import threading
import time
from typing import Any

from starlette.testclient import TestClient

import readyq
from readyq import JobFilter, JobState
from readyq.listing import encode_cursor

from .support import HOSTILE, WORKER, csrf_of, seed

PAGES = ("/", "/jobs", "/workers")


def assert_secure(response: Any) -> None:
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["x-frame-options"] == "DENY"


def test_every_page_shows_the_database(client: TestClient, queue: readyq.Queue) -> None:
    p = seed(queue)
    counts = queue.counts()
    home = client.get("/")
    assert home.status_code == 200
    assert_secure(home)
    assert f'<div class="value">{sum(counts.values())}</div>' in home.text
    assert 'id="by-group"' in home.text and 'data-key="tenant-a"' in home.text
    assert 'id="by-type"' in home.text and 'data-key="transform"' in home.text
    assert "/ 4</div>" in home.text  # in flight against the cap given
    jobs = client.get("/jobs")
    assert jobs.status_code == 200
    for job_id in (p.fetch, p.box, *p.chunks, p.report, p.waiting):
        state = queue.get(job_id).state.value
        assert f'<tr data-job-id="{job_id}" data-state="{state}">' in jobs.text
    assert 'data-action="retry-matching"' in jobs.text
    failed = client.get("/jobs", params={"state": "failed"})
    rows = failed.text.count("<tr data-job-id=")
    assert rows == len(p.failed) + 1 == counts["failed"]  # the chunks and their container
    job = client.get(f"/jobs/{p.failed[0]}")
    assert job.status_code == 200
    assert "RuntimeError: chunk 1: schema mismatch" in job.text and "Traceback" in job.text
    assert f'href="/jobs/{p.box}" data-job-id="{p.box}"' in job.text  # its container
    assert 'data-action="retry"' in job.text and 'data-action="cancel"' in job.text
    waiting = client.get(f"/jobs/{p.waiting}")
    assert "tenant-a-w" in waiting.text  # the unique key
    assert f'data-job-id="{p.gate}" data-state="ready"' in waiting.text  # its dependency
    graph = client.get(f"/jobs/{p.box}/graph")
    assert graph.status_code == 200
    for job_id in (p.parse, p.fetch, *p.chunks, p.report):
        assert f'data-job-id="{job_id}" data-state="{queue.get(job_id).state.value}"' in graph.text
    workers = client.get("/workers")
    assert workers.status_code == 200 and "data-worker-id=" in workers.text
    for path in PAGES:
        assert_secure(client.get(path))
    static = client.get("/static/app.js")
    assert static.status_code == 200 and "rq-refresh" in static.text
    assert_secure(static)


def test_the_api_serves_each_page_s_data(client: TestClient, queue: readyq.Queue) -> None:
    p = seed(queue)
    overview = client.get("/api/overview").json()
    assert overview["states"] == {s.value: queue.counts().get(s.value, 0) for s in JobState}
    assert overview["cap"] == 4 and overview["types"]["transform"]["failed"] == 2
    assert sum(b["failed"] for b in overview["series"]["buckets"]) == 3  # with the box
    assert sum(b["done"] for b in overview["series"]["buckets"]) == 6  # fetch parse 4 chunks
    assert {g["group"] for g in overview["group_shares"]} == {"tenant-a"}
    page = client.get("/api/jobs", params={"state": "failed", "limit": 1}).json()
    assert [j["id"] for j in page["jobs"]] == [p.failed[1]]
    more = client.get("/api/jobs", params={"state": "failed", "limit": 2,
                                           "cursor": page["next_cursor"]}).json()
    assert [j["id"] for j in more["jobs"]] == [p.failed[0], p.box]
    assert more["next_cursor"] is None
    by_parent = client.get("/api/jobs", params={"parent": p.box, "order": "oldest"}).json()
    assert [j["id"] for j in by_parent["jobs"]] == p.chunks
    since = client.get("/api/jobs", params={"since": "1h", "time": "finished",
                                            "type": "transform"}).json()
    assert len(since["jobs"]) == 6
    detail = client.get(f"/api/jobs/{p.report}").json()
    assert detail["state"] == "upstream_failed" and detail["dependencies"][0]["id"] == p.box
    graph = client.get(f"/api/jobs/{p.box}/graph").json()
    assert {n["id"] for n in graph["nodes"]} == {p.fetch, p.parse, p.box, *p.chunks, p.report}
    assert graph["hidden"] == 0 and graph["truncated"] is False
    workers = client.get("/api/workers").json()["workers"]
    assert workers and workers[0]["held"] == [] and workers[0]["finished_recently"] == 8
    assert workers[0]["pid"] is not None and workers[0]["host"]
    csrf = client.get("/api/csrf").json()
    assert csrf["token"] and csrf["header"] == "x-csrf-token"


def test_a_big_graph_says_how_much_is_hidden(client: TestClient, queue: readyq.Queue) -> None:
    box = queue.enqueue_container("box")
    kids = [queue.enqueue("t", {"i": i}, parent=box) for i in range(40)]  # no handlers
    assert kids
    cut = client.get(f"/api/jobs/{box}/graph", params={"max_nodes": 10}).json()
    assert (cut["shown"], cut["total"], cut["hidden"], cut["truncated"]) == (10, 41, 31, True)
    page = client.get(f"/jobs/{box}/graph", params={"max_nodes": 10})
    assert 'data-hidden="31"' in page.text and "31 more hidden" in page.text
    assert 'data-action="widen"' in page.text and "max_nodes=20" in page.text
    assert client.get(f"/jobs/{box}/graph", params={"max_nodes": 5000}).status_code == 400
    # The count walks what the graph walks: the same jobs, from any job of a pipeline.
    p = seed(queue, group="g")
    for job_id in (p.fetch, p.box, p.chunks[0], p.report, p.waiting):
        whole = queue.store.graph(job_id, max_nodes=10_000)
        assert queue.store.graph_size(job_id, limit=10_000) == len(whole.nodes)
        assert queue.store.graph_size(job_id, limit=3) == min(3, len(whole.nodes))


def test_user_data_is_escaped_everywhere(client: TestClient, queue: readyq.Queue) -> None:
    @queue.handler(HOSTILE, max_attempts=1)
    def hostile(job: readyq.Job) -> None:
        raise RuntimeError(HOSTILE)

    box = queue.enqueue_container(HOSTILE, {HOSTILE: HOSTILE}, group=HOSTILE)
    job = queue.enqueue(HOSTILE, {"html": HOSTILE}, group=HOSTILE, parent=box,
                        unique_key=HOSTILE[:150])
    queue.run_worker(until_idle=True, **WORKER)
    assert queue.get(job).state is JobState.FAILED
    for path in ("/", "/jobs", f"/jobs/{job}", f"/jobs/{box}/graph", "/workers",
                 "/jobs?state=failed", f"/jobs?group={HOSTILE}"):
        r = client.get(path)
        assert r.status_code == 200, path
        assert "<script>alert" not in r.text and "<img src=x" not in r.text, path
        assert "onerror=alert(1)>" not in r.text.replace("&gt;", ">").replace(
            "&lt;img", "") or "&lt;img" in r.text, path
        assert_secure(r)
    detail = client.get(f"/jobs/{job}").text
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in detail
    # Every script the pages load is a file of the package's own.
    assert detail.count("<script") == detail.count('<script src="/static/')
    assert client.get(f"/api/jobs/{job}").json()["group"] == HOSTILE  # JSON, not HTML


def test_actions_are_refused_without_a_valid_csrf_token(
    client: TestClient, queue: readyq.Queue
) -> None:
    p = seed(queue)
    target = p.failed[0]
    page = client.get(f"/jobs/{target}")
    token = csrf_of(page.text)
    for data, headers in (({}, {}), ({"csrf": "forged"}, {}),
                          ({"csrf": token}, {"origin": "https://evil.example"})):
        refused = client.post(f"/jobs/{target}/retry", data=data, headers=headers,
                              follow_redirects=False)
        assert refused.status_code == 403
        assert_secure(refused)
    # Another browser (no cookie) with this page's token: refused too.
    stranger = TestClient(client.app, base_url="http://127.0.0.1", raise_server_exceptions=False)
    assert stranger.post(f"/jobs/{target}/retry", data={"csrf": token}).status_code == 403
    assert stranger.post("/api/jobs/retry", data={"state": "failed"},
                         headers={"x-csrf-token": token}).status_code == 403
    assert queue.get(target).state is JobState.FAILED
    done = client.post(f"/jobs/{target}/retry", data={"csrf": token}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == f"/jobs/{target}?did=retried"
    assert queue.get(target).state is JobState.READY
    shown = client.get(done.headers["location"])
    assert "Retried:" in shown.text
    # Cancel: the waiting job ends cancelled.
    cancelled = client.post(f"/jobs/{p.waiting}/cancel", data={"csrf": token},
                            follow_redirects=False)
    assert cancelled.status_code == 303
    assert queue.get(p.waiting).state is JobState.CANCELLED
    # A job that cannot be retried: a 409 page that says why, nothing changed.
    refused = client.post(f"/jobs/{p.fetch}/retry", data={"csrf": token})
    assert refused.status_code == 409 and "is done" in refused.text
    assert client.get(f"/jobs/{target}/retry").status_code == 405  # a GET never acts


def test_bulk_actions_confirm_with_the_count_first(
    client: TestClient, queue: readyq.Queue
) -> None:
    p = seed(queue)
    token = csrf_of(client.get("/jobs").text)
    form = {"csrf": token, "do": "retry:matching", "filter": "state=failed&group=tenant-a"}
    preview = client.post("/jobs/actions", data=form)
    assert preview.status_code == 200
    # The container and its two failed chunks match; its retry revives the chunks and the
    # report and reopens the container: four jobs change.
    assert 'data-confirmed="no" data-matched="3" data-changed="4"' in preview.text
    assert 'data-action="confirm"' in preview.text and "Nothing has changed yet" in preview.text
    assert [queue.get(i).state for i in p.failed] == [JobState.FAILED] * 2
    done = client.post("/jobs/actions", data={**form, "confirm": "yes"})
    assert 'data-confirmed="yes" data-matched="3" data-changed="4"' in done.text
    assert queue.get(p.box).state is JobState.ACTIVE
    assert [queue.get(i).state for i in p.failed] == [JobState.READY] * 2
    assert queue.get(p.report).state is JobState.WAITING
    # Selected rows: only those.
    extra = [queue.enqueue("later", {"i": i}) for i in range(3)]
    sel = {"csrf": token, "do": "cancel:selected", "id": [str(extra[0]), str(extra[2])],
           "filter": ""}
    preview = client.post("/jobs/actions", data=sel)
    assert 'data-matched="2" data-changed="2"' in preview.text
    client.post("/jobs/actions", data={**sel, "confirm": "yes"})
    assert [queue.get(i).state for i in extra] == [
        JobState.CANCELLED, JobState.READY, JobState.CANCELLED]
    nothing = client.post("/jobs/actions", data={"csrf": token, "do": "cancel:selected"})
    assert nothing.status_code == 400 and "no job is selected" in nothing.text
    no_filter = client.post("/jobs/actions", data={"csrf": token, "do": "retry:matching"})
    assert no_filter.status_code == 400 and "needs a filter" in no_filter.text


def test_the_api_acts_with_the_token_in_a_header(client: TestClient, queue: readyq.Queue) -> None:
    p = seed(queue)
    token = client.get("/api/csrf").json()["token"]
    h = {"x-csrf-token": token}
    dry = client.post("/api/jobs/retry", data={"state": "failed", "dry_run": "1"}, headers=h)
    assert dry.json()["dry_run"] is True and dry.json()["changed"] == 4
    assert queue.get(p.failed[0]).state is JobState.FAILED
    one = client.post(f"/api/jobs/{p.failed[0]}/retry", headers=h).json()
    assert one["revived"][0] == {"id": p.failed[0], "state": "ready"}
    cancel = client.post(f"/api/jobs/{p.waiting}/cancel", headers=h).json()
    assert cancel["after"] == "cancelled"
    bulk = client.post("/api/jobs/cancel?group=tenant-a", headers=h).json()
    assert bulk["dry_run"] is False and bulk["changed"] >= 2
    gone = client.post(f"/api/jobs/{p.waiting}/cancel", headers=h)
    assert gone.status_code == 409 and "already ended" in gone.json()["error"]
    assert client.post(f"/api/jobs/{p.fetch}/cancel").status_code == 403  # no token


def test_read_only_refuses_every_action(make_client: Any, queue: readyq.Queue) -> None:
    p = seed(queue)
    ro = make_client(read_only=True)
    job_page = ro.get(f"/jobs/{p.failed[0]}")
    assert job_page.status_code == 200 and 'data-action="retry"' not in job_page.text
    assert 'data-action="retry-matching"' not in ro.get("/jobs").text
    token = ro.get("/api/csrf").json()["token"]
    h = {"x-csrf-token": token}
    for path, data in ((f"/jobs/{p.failed[0]}/retry", {}), (f"/jobs/{p.waiting}/cancel", {}),
                       ("/jobs/actions", {"do": "retry:matching", "filter": "state=failed"}),
                       (f"/api/jobs/{p.failed[0]}/retry", {}), ("/api/jobs/cancel",
                                                                 {"group": "tenant-a"})):
        r = ro.post(path, data={**data, "csrf": token}, headers=h)
        assert r.status_code == 403, path
        assert "read-only" in r.text
    assert queue.get(p.failed[0]).state is JobState.FAILED
    assert queue.get(p.waiting).state is JobState.WAITING


def test_the_authorize_hook_decides(make_client: Any, queue: readyq.Queue) -> None:
    p = seed(queue)
    asked: list[tuple[str, str]] = []

    async def authorize(request: Any, action: str) -> bool:
        asked.append((request.url.path, action))
        return action != "cancel" and request.headers.get("x-user") != "mallory"

    c = make_client(authorize=authorize)
    assert c.get("/jobs").status_code == 200
    assert c.get("/jobs", headers={"x-user": "mallory"}).status_code == 403
    token = csrf_of(c.get(f"/jobs/{p.waiting}").text)
    assert c.post(f"/jobs/{p.waiting}/cancel", data={"csrf": token}).status_code == 403
    assert queue.get(p.waiting).state is JobState.WAITING
    ok = c.post(f"/jobs/{p.failed[0]}/retry", data={"csrf": token}, follow_redirects=False)
    assert ok.status_code == 303
    assert ("/jobs", "view") in asked and (f"/jobs/{p.waiting}/cancel", "cancel") in asked
    assert (f"/jobs/{p.failed[0]}/retry", "retry") in asked
    sync = make_client(authorize=lambda request, action: False)
    assert sync.get("/").status_code == 403 and sync.get("/api/overview").status_code == 403


def test_a_foreign_host_name_is_refused(make_client: Any, queue: readyq.Queue) -> None:
    """DNS rebinding: a site whose name its DNS points at 127.0.0.1 is, to the browser, of
    the dashboard's own origin, so the Origin and CSRF checks let its page through. Its
    requests name its own host, and are refused before anything else happens."""
    p = seed(queue)
    local = make_client()
    token = local.get("/api/csrf").json()["token"]
    app = local.app
    for base in ("http://rebind.attacker.example", "http://127.0.0.1.nip.io:8765",
                 "http://localhost.attacker.example"):
        foreign = TestClient(app, base_url=base, raise_server_exceptions=False)
        page = foreign.get("/jobs")
        assert page.status_code == 400 and "not served under the host" in page.text
        assert_secure(page)
        api = foreign.get("/api/jobs")
        assert api.status_code == 400 and api.json()["status"] == 400
        csrf = foreign.get("/api/csrf")
        assert csrf.status_code == 400 and "token" not in csrf.text
        assert "set-cookie" not in csrf.headers
        # The token and cookie of the real host do not help either.
        cookie = f"readyq_csrf={local.cookies.get('readyq_csrf')}"
        cancel = foreign.post(f"/api/jobs/{p.waiting}/cancel",
                              headers={"x-csrf-token": token, "origin": base, "cookie": cookie})
        assert cancel.status_code == 400
        assert foreign.get("/static/app.css").status_code == 400
        foreign.close()
    assert queue.get(p.waiting).state is JobState.WAITING
    # The host is shown escaped; a request without a Host header is refused too.
    hostile = local.get("/jobs", headers={"host": '"><script>alert(1)</script>'})
    assert hostile.status_code == 400 and "<script>" not in hostile.text
    assert "&lt;script&gt;" in hostile.text
    # The loopback names, with or without a port and in any case, are served.
    for host in ("localhost", "LOCALHOST:8765", "127.0.0.1:80", "[::1]:8765", "localhost."):
        assert local.get("/jobs", headers={"host": host}).status_code == 200, host


def test_the_hosts_it_is_configured_with_are_served(
    make_client: Any, queue: readyq.Queue
) -> None:
    import pytest
    from starlette.applications import Starlette
    from starlette.routing import Mount

    from readyq.web import create_app

    c = make_client(allowed_hosts=["Jobs.Example.com", "*.corp.example", "10.0.0.5",
                                   "[fe80::1]"])
    for host, status in (("jobs.example.com", 200), ("jobs.example.com:443", 200),
                         ("a.jobs.example.com", 400), ("x.corp.example", 200),
                         ("a.b.corp.example", 200), ("corp.example", 400),
                         ("evilcorp.example", 400), ("10.0.0.5:8765", 200),
                         ("10.0.0.6", 400), ("[fe80::1]:80", 200), ("localhost", 200)):
        assert c.get("/api/overview", headers={"host": host}).status_code == status, host
    anything = make_client(allowed_hosts=["*"])
    assert anything.get("/", headers={"host": "whatever.example"}).status_code == 200
    # Mounted in an application, under a path: the same check, the API's answer in JSON.
    outer = Starlette(routes=[Mount("/admin/jobs", app=create_app(queue))])
    with TestClient(outer, base_url="http://rebind.attacker.example") as foreign:
        r = foreign.get("/admin/jobs/api/overview")
        assert r.status_code == 400 and r.json()["status"] == 400
        assert foreign.get("/admin/jobs/").status_code == 400
    with TestClient(outer, base_url="http://localhost") as local:
        assert local.get("/admin/jobs/api/overview").status_code == 200
    for bad in ("example.com:80", "http://example.com", "", "a/b", 5, "exa mple.com"):
        with pytest.raises(readyq.ConfigurationError, match="allowed_hosts"):
            create_app(queue, allowed_hosts=[bad])  # type: ignore[list-item]


BAD_REQUESTS = [
    ("/jobs/987654", 404), ("/jobs/987654/graph", 404), ("/api/jobs/987654", 404),
    ("/api/jobs/987654/graph", 404), ("/jobs/0", 404), ("/jobs/99999999999999999999", 404),
    ("/jobs/abc", 404), ("/nowhere", 404),
    ("/jobs?state=finished", 400), ("/jobs?limit=0", 400), ("/jobs?limit=x", 400),
    ("/jobs?cursor=bogus", 400), ("/jobs?since=yesterday", 400), ("/jobs?parent=-3", 400),
    ("/jobs?id=1,x", 400), ("/jobs?time=later&since=1h", 400), ("/jobs?order=up", 400),
    ("/api/jobs?state=finished", 400), ("/api/jobs?type=" + "x" * 201, 400),
    ("/jobs/1/graph?max_nodes=0", 400), ("/api/events?timeout=nan", 400),
    # Past the ids and instants the columns hold: a 404 or a 400, on every database.
    ("/jobs/9223372036854775808", 404), ("/api/jobs/9223372036854775808/graph", 404),
    ("/jobs/" + "9" * 5000, 404), ("/api/jobs/" + "9" * 5000 + "/graph", 404),
    ("/jobs?parent=9223372036854775808", 400), ("/api/jobs?id=9223372036854775808", 400),
    ("/jobs?since=1e300", 400), ("/api/jobs?since=200000w", 400),
    ("/api/jobs?until=9999-12-31T23:00:00-12:00", 400),
    # Tampered cursors: a cursor whose digest matches its filter, with an id past the
    # column, or none at all.
    ("/jobs?cursor=" + encode_cursor(JobFilter(), "newest", 2**63), 400),
    ("/api/jobs?state=failed&cursor="
     + encode_cursor(JobFilter(state=("failed",)), "newest", 2**70), 400),
    ("/api/jobs?order=oldest&cursor=" + encode_cursor(JobFilter(), "oldest", 0), 400),
    ("/api/jobs?cursor=c1." + "A" * 190, 400),
]


def test_bad_ids_and_filters_get_a_404_or_400_page(
    client: TestClient, queue: readyq.Queue
) -> None:
    queue.enqueue_container("t")
    for path, status in BAD_REQUESTS:
        r = client.get(path)
        assert r.status_code == status, path
        assert "Traceback" not in r.text and 'File "' not in r.text, path
        assert_secure(r)
        if path.startswith("/api/"):
            assert r.json()["status"] == status and r.json()["error"], path
        else:
            assert f'data-status="{status}"' in r.text, path


def test_the_event_stream_passes_on_notifications(
    client: TestClient, queue: readyq.Queue
) -> None:
    listens = queue.store.dialect.capabilities.listen_notify
    if listens:
        # A job made ready while the stream is open: a change event (PostgreSQL).
        timer = threading.Timer(0.3, lambda: queue.enqueue("later"))
        timer.start()
    started = time.monotonic()
    with client.stream("GET", "/api/events", params={"timeout": 1.5 if listens else 0.3}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        assert_secure(r)
        text = "".join(r.iter_text())
    assert time.monotonic() - started < 30
    mode = "notify" if listens else "poll"
    assert f"event: hello\ndata: {mode}" in text
    assert ("event: change" in text) is listens
    page = client.get("/")
    assert f'data-live-mode="{mode}"' in page.text



def test_an_async_queue_s_dashboard(db: str) -> None:
    """create_app takes an AsyncQueue too: its calls run on the server's event loop."""
    import asyncio
    import socket

    import httpx
    import uvicorn

    from async_support import async_engine
    from readyq.web import create_app

    async def scenario() -> None:
        engine = async_engine(db)
        aq = readyq.AsyncQueue(engine)
        await aq.create_schema()
        job = await aq.enqueue("t", {"x": 1})
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn.Config(create_app(aq), log_level="warning",
                                               lifespan="off"))
        task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            while not server.started:
                await asyncio.sleep(0.02)
            url = f"http://127.0.0.1:{sock.getsockname()[1]}"
            async with httpx.AsyncClient(base_url=url) as c:
                for path in ("/", "/jobs", f"/jobs/{job}", f"/jobs/{job}/graph", "/workers"):
                    assert (await c.get(path)).status_code == 200, path
                token = (await c.get("/api/csrf")).json()["token"]
                r = await c.post(f"/api/jobs/{job}/cancel", headers={"x-csrf-token": token})
                assert r.json()["after"] == "cancelled"
            assert (await aq.get(job)).state is JobState.CANCELLED
        finally:
            server.should_exit = True
            await task
            await aq.close()
            await engine.dispose()

    from async_support import Runner

    runner = Runner()
    try:
        runner.run(scenario())
    finally:
        runner.close()


def test_the_overview_names_the_types_no_worker_seems_to_run(
    client: TestClient, queue: readyq.Queue
) -> None:
    queue.enqueue(HOSTILE)
    assert 'id="unclaimed-types"' not in client.get("/").text  # not waited a minute yet
    queue.store.clock_offset = 120
    page = client.get("/").text
    assert 'id="unclaimed-types"' in page and "No worker seems to run job type" in page
    assert "<script>alert" not in page  # the type, user data, escaped
    assert_secure(client.get("/"))


def test_the_overview_and_its_api_list_what_is_stuck(
    client: TestClient, queue: readyq.Queue
) -> None:
    box = queue.enqueue_container(HOSTILE)
    after = queue.enqueue("later", {}, depends_on=[box])
    assert 'id="stuck"' not in client.get("/").text  # empty for less than a minute
    assert client.get("/api/overview").json()["stuck"] == []
    queue.store.clock_offset = 120
    page = client.get("/").text
    assert 'id="stuck"' in page and "1 job(s) cannot progress on their own" in page
    assert f'<tr data-job-id="{box}" data-reason="empty_container">' in page
    assert f"readyq close {box}" in page
    assert "<script>alert" not in page  # the container's type, user data, escaped
    [found] = client.get("/api/overview").json()["stuck"]
    assert found["id"] == box and found["reason"] == "empty_container" and found["blocks"] == 1
    queue.close_container(box)
    assert 'id="stuck"' not in client.get("/").text
    assert queue.get(after).state is JobState.READY


def test_the_graph_api_names_what_is_stuck(client: Any, queue: readyq.Queue) -> None:
    """An empty container with nothing to wait for is stuck; the graph says so, and a
    job that depends on it is not."""
    box = queue.enqueue_container("forgotten")
    after = queue.enqueue("t", depends_on=[box])
    jobs = queue.store.tables.jobs
    with queue.engine.begin() as conn:  # unchanged for longer than the overview's minute
        conn.execute(jobs.update().where(jobs.c.id == box).values(updated_at=0.0))
    data = client.get(f"/api/jobs/{after}/graph").json()
    assert data["stuck"] == [box]


def test_spawned_jobs_are_marked_in_the_graph_and_on_their_page(
    client: Any, queue: readyq.Queue
) -> None:
    @queue.handler("split")
    def split(job: readyq.Job) -> None:
        job.spawn([readyq.JobSpec("part", {})])

    queue.handler("part")(lambda job: None)
    spawner = queue.enqueue("split", {})
    after = queue.enqueue("part", {}, depends_on=[spawner])
    queue.run_worker(until_idle=True, types=["split"], poll_interval=0.02)
    nodes = client.get(f"/api/jobs/{after}/graph").json()["nodes"]
    (spawned,) = [n["id"] for n in nodes if n["spawned_by"] == spawner]
    page = client.get(f"/jobs/{after}/graph").text
    assert f'spawned by <a href="/jobs/{spawner}">#{spawner}</a>' in page
    job_page = client.get(f"/jobs/{spawned}").text
    assert 'id="spawned-by"' in job_page and f"#{spawner}</a>" in job_page
