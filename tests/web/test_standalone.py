"""`readyq dashboard` (the standalone server) and what the package ships: basic
credentials from the environment, 127.0.0.1 unless told otherwise, a base path; every
asset a page names is a file of the package, none comes from another host, and each
vendored library ships with its licence."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import readyq
from readyq.cli import main, served_hosts

WEB = Path(readyq.__file__).parent / "web"


def test_every_asset_is_in_the_package_and_none_is_remote() -> None:
    named: set[str] = set()
    for template in (WEB / "templates").glob("*.html"):
        text = template.read_text()
        assert not re.search(r"""(src|href)=["']https?://""", text), template
        named |= set(re.findall(r"/static/([\w./-]+)", text))
    for script in (WEB / "static").glob("*.js"):
        text = script.read_text()
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", ""), script
        assert "https://" not in text, script
        named |= {"vendor/" + m for m in re.findall(r"vendor/([\w.-]+\.js)", text)}
    assert named >= {"app.css", "app.js", "graph.js", "vendor/htmx-2.0.11.min.js"}
    for name in named:
        assert (WEB / "static" / name).is_file(), name
    vendored = sorted((WEB / "static" / "vendor").glob("*.min.js"))
    assert vendored
    for lib in vendored:
        licence = lib.with_name(lib.name.replace(".min.js", ".LICENSE.txt"))
        assert licence.is_file() and "Permission" in licence.read_text(), licence


def test_a_network_address_needs_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("READYQ_DASHBOARD_USER", raising=False)
    monkeypatch.delenv("READYQ_DASHBOARD_PASSWORD", raising=False)
    db = f"sqlite:///{tmp_path / 'q.db'}"
    assert main(["--db", db, "migrate"]) == 0
    assert main(["--db", db, "dashboard", "--host", "0.0.0.0"]) == 2
    assert "without a password" in capsys.readouterr().err
    monkeypatch.setenv("READYQ_DASHBOARD_USER", "ops")
    assert main(["--db", db, "dashboard", "--host", "127.0.0.1"]) == 2  # user, no password
    assert "READYQ_DASHBOARD_PASSWORD" in capsys.readouterr().err
    assert main(["--db", db, "dashboard", "--base-path", "jobs?x"]) == 2
    monkeypatch.delenv("READYQ_DASHBOARD_USER")
    for bad in ("http://jobs.internal", "jobs.internal:8765", "a/b"):
        assert main(["--db", db, "dashboard", "--allowed-host", bad]) == 2
        assert "--allowed-host" in capsys.readouterr().err


def test_the_standalone_server_answers_the_names_it_is_served_under() -> None:
    """Loopback names always; the address bound to unless it is every address; the
    --allowed-host names."""
    assert served_hosts("127.0.0.1", []) == (True, [])
    assert served_hosts("localhost", ["jobs.internal"]) == (True, ["jobs.internal"])
    assert served_hosts("::1", []) == (True, [])
    assert served_hosts("0.0.0.0", []) == (False, [])
    assert served_hosts("::", ["Ops.Example.com"]) == (False, ["ops.example.com"])
    assert served_hosts("10.1.2.3", ["jobs.internal"]) == (
        False, ["jobs.internal", "10.1.2.3"])
    assert served_hosts("fe80::1", []) == (False, ["[fe80::1]"])
    assert served_hosts("box.lan", []) == (False, ["box.lan"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_standalone_server_asks_for_its_credentials(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'q.db'}"
    assert main(["--db", db, "migrate"]) == 0
    q = readyq.Queue(db)
    job = q.enqueue("hello", {"name": "<b>world</b>"})
    q.close()
    port = free_port()
    env = {**os.environ, "READYQ_DASHBOARD_USER": "ops", "READYQ_DASHBOARD_PASSWORD": "s3cret"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "readyq.cli", "--db", db, "dashboard", "--port", str(port),
         "--base-path", "/ops/jobs", "--read-only", "--allowed-host", "jobs.internal"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}/ops/jobs"
        deadline = time.monotonic() + 30
        while True:
            try:
                first = httpx.get(base + "/", timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the dashboard did not start"
                time.sleep(0.1)
        assert first.status_code == 401 and first.headers["www-authenticate"].startswith("Basic")
        wrong = httpx.get(base + "/", auth=("ops", "nope"))
        assert wrong.status_code == 401
        page = httpx.get(f"{base}/jobs/{job}", auth=("ops", "s3cret"))
        assert page.status_code == 200 and "&lt;b&gt;world&lt;/b&gt;" in page.text
        assert 'href="/ops/jobs/static/app.css"' in page.text
        assert "content-security-policy" in page.headers
        token = httpx.get(base + "/api/csrf", auth=("ops", "s3cret"))
        refused = httpx.post(f"{base}/api/jobs/{job}/cancel", auth=("ops", "s3cret"),
                             headers={"x-csrf-token": token.json()["token"]},
                             cookies=token.cookies)
        assert refused.status_code == 403  # --read-only
        # DNS rebinding: a foreign host name is refused, the names given are served.
        for host, status in (("rebind.attacker.example", 400), ("jobs.internal", 200),
                             (f"localhost:{port}", 200), ("sub.jobs.internal", 400)):
            r = httpx.get(base + "/api/overview", auth=("ops", "s3cret"), headers={"host": host})
            assert r.status_code == status, host
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=15)
    assert "127.0.0.1" in err and "read-only" in err, err
