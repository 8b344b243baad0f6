"""The dashboard's pauses: shown on the overview and in the JSON API, paused and resumed
by buttons and API calls behind the CSRF check, refused in read-only mode, keys escaped.
On every database."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

import readyq

from .support import HOSTILE, csrf_of


def test_pause_and_resume_from_the_overview(client: TestClient, queue: readyq.Queue) -> None:
    home = client.get("/")
    assert "Nothing is paused." in home.text and 'data-action="pause"' in home.text
    token = csrf_of(home.text)
    forged = client.post("/pauses/pause", data={"csrf": "forged", "group": "tenant-b"})
    assert forged.status_code == 403 and queue.pauses() == []
    done = client.post("/pauses/pause", data={"csrf": token, "group": "tenant-b",
                                              "until": "30m"}, follow_redirects=False)
    assert done.status_code == 303
    (p,) = queue.pauses()
    assert p.group == "tenant-b" and p.type is None and p.until is not None
    home = client.get("/")
    assert 'data-pause-group="tenant-b"' in home.text and "Group tenant-b paused until" in home.text
    assert 'data-action="resume"' in home.text
    bad = client.post("/pauses/pause", data={"csrf": token, "until": "soon"})
    assert bad.status_code == 400 and len(queue.pauses()) == 1
    resumed = client.post("/pauses/resume", data={"csrf": token, "group": "tenant-b"},
                          follow_redirects=False)
    assert resumed.status_code == 303 and queue.pauses() == []


def test_the_json_api_lists_pauses_and_makes_them(client: TestClient, queue: readyq.Queue) -> None:
    queue.pause(type="render")
    assert client.get("/api/pauses").json()["pauses"][0]["type"] == "render"
    assert client.get("/api/overview").json()["pauses"][0]["group"] is None
    token = client.get("/api/csrf").json()["token"]
    h = {"x-csrf-token": token}
    out = client.post("/api/pauses/pause", data={"group": "g", "type": "t"}, headers=h).json()
    assert out["did"] == "paused"
    assert {(p["group"], p["type"]) for p in out["pauses"]} == {(None, "render"), ("g", "t")}
    out = client.post("/api/pauses/resume", data={"type": "render"}, headers=h).json()
    assert [(p["group"], p["type"]) for p in out["pauses"]] == [("g", "t")]
    assert client.post("/api/pauses/pause", data={"group": "x"}).status_code == 403


def test_read_only_shows_pauses_without_buttons(make_client: Any, queue: readyq.Queue) -> None:
    queue.pause(group=HOSTILE)
    ro = make_client(read_only=True)
    home = ro.get("/")
    assert 'data-action="resume"' not in home.text and 'data-action="pause"' not in home.text
    assert HOSTILE not in home.text and "&lt;script&gt;" in home.text
    token = ro.get("/api/csrf").json()["token"]
    r = ro.post("/pauses/resume", data={"csrf": token, "group": HOSTILE})
    assert r.status_code == 403 and "read-only" in r.text
    assert len(queue.pauses()) == 1


def test_the_jobs_page_marks_paused_jobs_and_pauses_its_filter(
    client: TestClient, queue: readyq.Queue
) -> None:
    held = queue.enqueue("render", {}, group="tenant-b")
    free = queue.enqueue("render", {}, group="tenant-a")
    page = client.get("/jobs", params={"group": "tenant-b"})
    assert 'data-action="pause"' in page.text and "Pause this group" in page.text
    token = csrf_of(page.text)
    done = client.post("/pauses/pause", data={"csrf": token, "group": "tenant-b",
                                              "back": "jobs"}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/jobs?group=tenant-b"
    listing = client.get("/jobs").text
    row = listing.split(f'<tr data-job-id="{held}"', 1)[1].split("</tr>", 1)[0]
    other = listing.split(f'<tr data-job-id="{free}"', 1)[1].split("</tr>", 1)[0]
    assert 'data-paused="1"' in row and 'data-paused="1"' not in other
    page = client.get("/jobs", params={"group": "tenant-b"})
    assert "Group tenant-b paused until resumed" in page.text
    assert 'data-action="resume"' in page.text
    client.post("/pauses/resume", data={"csrf": token, "group": "tenant-b", "back": "jobs"})
    assert queue.pauses() == []
