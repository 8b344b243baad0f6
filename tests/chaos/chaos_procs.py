"""Starting ``chaos_worker.py`` processes from a test, and always cleaning them up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

HERE = Path(__file__).resolve().parent
WORKER = HERE / "chaos_worker.py"
T = TypeVar("T")


def crashes(log: str) -> list[str]:
    """Tracebacks in a worker's log, except the ones SQLAlchemy's pool logs when it
    resets a connection that the server (or the nemesis) already closed: it logs them
    and discards the connection, nothing failed."""
    lines = log.splitlines()
    found = []
    exempt = False
    for n, line in enumerate(lines):
        if line.startswith("Traceback") or "Exception in thread" in line:
            before = lines[n - 1] if n else ""
            chained = n >= 2 and lines[n - 2].startswith(CHAINED)
            if "sqlalchemy.pool" in before and "Exception during reset" in before:
                exempt = True
                continue
            if chained and exempt:
                continue  # the same logged reset, as its exception chain goes on
            exempt = False
            found.append("\n".join(lines[max(0, n - 1): n + 30]))
    return found


# The lines between two tracebacks of one exception chain.
CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    stats_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"worker {self.name} still running after {timeout:g}s:\n{self.log()[-3000:]}"
            ) from None

    def wait_ok(self, timeout: float) -> dict[str, Any]:
        code = self.wait(timeout)
        text = self.log()
        assert code == 0 and not crashes(text), f"{self.name} exited {code}:\n{text}"
        data: dict[str, Any] = json.loads(self.stats_path.read_text())
        return data


class Procs:
    def __init__(self, url: str, directory: Path) -> None:
        self.url = url
        self.directory = directory
        self.procs: list[Proc] = []

    def start(self, name: str, *, concurrency: int = 4, lease_ttl: float = 2.0,
              heartbeat: float = 0.5, poll: float = 0.05, **options: Any) -> Proc:
        log_path = self.directory / f"{name}.log"
        stats_path = self.directory / f"{name}.json"
        cmd = [
            sys.executable, str(WORKER), "--url", self.url, "--worker-id", name,
            "--concurrency", str(concurrency), "--lease-ttl", str(lease_ttl),
            "--heartbeat", str(heartbeat), "--poll", str(poll), "--stats-file", str(stats_path),
        ]
        for key, value in options.items():
            cmd += [f"--{key.replace('_', '-')}", str(value)]
        with open(log_path, "wb") as out:
            popen = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=HERE)
        proc = Proc(name, popen, log_path, stats_path)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            if proc.alive():
                proc.signal(signal.SIGKILL)
            proc.popen.wait()


def wait_for(condition: Callable[[], T], *, timeout: float, what: str,
             interval: float = 0.02) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)
