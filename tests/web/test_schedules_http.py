"""The dashboard's schedules: shown on the overview and in the JSON API, paused and
resumed by buttons and API calls behind the CSRF check, refused in read-only mode,
names escaped. On every database."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

import readyq

from .support import HOSTILE, csrf_of


def _stored(queue: readyq.Queue, name: str) -> None:
    """Define ``name`` and let a worker's firer write its row."""
    queue.handler("report")(lambda job: None)
    queue.schedule(name, every=600, job=lambda at: readyq.JobSpec("report", {}))
    firer = queue.worker().firer
    assert firer is not None
    firer.reset()
    firer.run_once()


def test_schedules_on_the_overview_paused_and_resumed(
    client: TestClient, queue: readyq.Queue
) -> None:
    assert "No schedule has fired yet." in client.get("/").text
    _stored(queue, "nightly")
    home = client.get("/")
    assert 'data-schedule="nightly" data-paused="no"' in home.text
    assert "every 600" in home.text or "every 10" in home.text
    token = csrf_of(home.text)
    forged = client.post("/schedules/pause", data={"csrf": "forged", "name": "nightly"})
    assert forged.status_code == 403 and not queue.schedules()[0].paused
    done = client.post("/schedules/pause", data={"csrf": token, "name": "nightly"},
                       follow_redirects=False)
    assert done.status_code == 303 and queue.schedules()[0].paused
    assert 'data-schedule="nightly" data-paused="yes"' in client.get("/").text
    missing = client.post("/schedules/pause", data={"csrf": token, "name": "nope"})
    assert missing.status_code == 404
    client.post("/schedules/resume", data={"csrf": token, "name": "nightly"})
    assert not queue.schedules()[0].paused


def test_the_json_api_lists_and_pauses_schedules(client: TestClient, queue: readyq.Queue) -> None:
    _stored(queue, "tick")
    (listed,) = client.get("/api/schedules").json()["schedules"]
    assert listed["name"] == "tick" and listed["paused"] is False and listed["next_fire"]
    assert client.get("/api/overview").json()["schedules"][0]["name"] == "tick"
    h = {"x-csrf-token": client.get("/api/csrf").json()["token"]}
    out = client.post("/api/schedules/pause", data={"name": "tick"}, headers=h).json()
    assert out["did"] == "paused" and out["schedules"][0]["paused"] is True
    assert client.post("/api/schedules/resume", data={"name": "tick"}).status_code == 403
    assert client.post("/api/schedules/stop", data={"name": "tick"}, headers=h).status_code == 404


def test_read_only_shows_schedules_without_buttons_and_escapes_names(
    make_client: Any, queue: readyq.Queue
) -> None:
    name = "x" + HOSTILE.replace(" ", "")[:60]
    _stored(queue, name)
    ro = make_client(read_only=True)
    home = ro.get("/")
    assert 'id="schedules"' in home.text and "&lt;script&gt;" in home.text
    assert "<script>" not in home.text.split('id="schedules"')[1].split("</section>")[0]
    assert 'data-action="pause"' not in home.text.split('id="schedules"')[1].split("</section>")[0]
    token = ro.get("/api/csrf").json()["token"]
    r = ro.post("/schedules/pause", data={"csrf": token, "name": name})
    assert r.status_code == 403 and not queue.schedules()[0].paused
