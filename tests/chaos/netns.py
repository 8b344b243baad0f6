"""A network namespace joined to this host by a veth pair, and a cut that drops packets.

The test's worker process runs inside the namespace (``ip netns exec``) and reaches the
database through a forwarder bound to the host's end of the pair. ``cut()`` makes both
ends of the pair drop every packet they would send (a queue of length 0), so the worker
sees exactly what a broken network shows: writes accepted by its kernel, never
acknowledged, and no reply; nothing is refused or reset. ``heal()`` removes the drop.
Everything is torn down by ``close()``.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

_COUNTER = [0]


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)


class Netns:
    """A namespace ``name`` with address ``inner`` whose peer on the host is ``outer``."""

    def __init__(self) -> None:
        _COUNTER[0] += 1
        tag = f"{os.getpid() % 100000}x{_COUNTER[0]}"
        self.name = f"rq{tag}"
        self.host_if = f"rqh{tag}"[:15]
        self.inner_if = f"rqi{tag}"[:15]
        subnet = 200 + (os.getpid() + _COUNTER[0]) % 50
        self.outer = f"10.{subnet}.{_COUNTER[0] % 250}.1"
        self.inner = f"10.{subnet}.{_COUNTER[0] % 250}.2"
        self.made = False

    def create(self) -> str | None:
        """Set it up; returns why it could not be made (then nothing is left), or None."""
        steps = [
            ("ip", "netns", "add", self.name),
            ("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.inner_if),
            ("ip", "link", "set", self.inner_if, "netns", self.name),
            ("ip", "addr", "add", f"{self.outer}/30", "dev", self.host_if),
            ("ip", "link", "set", self.host_if, "up"),
            *[self.inside(*cmd) for cmd in (
                ("ip", "addr", "add", f"{self.inner}/30", "dev", self.inner_if),
                ("ip", "link", "set", self.inner_if, "up"),
                ("ip", "link", "set", "lo", "up"),
            )],
        ]
        self.made = True
        for step in steps:
            try:
                done = _run(*step)
            except (OSError, subprocess.SubprocessError) as exc:
                self.close()
                return f"{' '.join(step)}: {exc}"
            if done.returncode != 0:
                self.close()
                return f"{' '.join(step)}: {done.stderr.strip()}"
        # The cut needs a queue discipline this kernel may not have: try it once.
        probe = _run("tc", "qdisc", "add", "dev", self.host_if, "root", "pfifo", "limit", "0")
        if probe.returncode != 0:
            self.close()
            return f"tc cannot add a pfifo queue: {probe.stderr.strip()}"
        _run("tc", "qdisc", "del", "dev", self.host_if, "root")
        return None

    def inside(self, *argv: str) -> tuple[str, ...]:
        """``argv`` run inside the namespace."""
        return ("ip", "netns", "exec", self.name, *argv)

    def cut(self) -> None:
        for cmd in (
            ("tc", "qdisc", "add", "dev", self.host_if, "root", "pfifo", "limit", "0"),
            self.inside("tc", "qdisc", "add", "dev", self.inner_if, "root", "pfifo",
                        "limit", "0"),
        ):
            done = _run(*cmd)
            assert done.returncode == 0, done.stderr

    def heal(self) -> None:
        _run("tc", "qdisc", "del", "dev", self.host_if, "root")
        _run(*self.inside("tc", "qdisc", "del", "dev", self.inner_if, "root"))

    def close(self) -> None:
        if not self.made:
            return
        self.made = False
        _run("ip", "link", "del", self.host_if)
        _run("ip", "netns", "del", self.name)

    def __enter__(self) -> Netns:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
