"""Helpers of the dashboard's tests: a small pipeline of jobs in every state, and the
CSRF token of a page."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import readyq

HOSTILE = '<script>alert("x")</script>"><img src=x onerror=alert(1)>'
WORKER = {"concurrency": 4, "poll_interval": 0.02, "lease_ttl": 10.0, "heartbeat_interval": 2.0}


# Groups whose failing transforms fail (the chunks marked "fail"); a test that fixes the
# cause removes its group.
BROKEN: set[str] = set()


@dataclass
class Pipeline:
    """The ids of a seeded pipeline, by role."""

    group: str
    fetch: int = 0
    parse: int = 0
    box: int = 0
    chunks: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    report: int = 0
    waiting: int = 0
    gate: int = 0


def register(queue: readyq.Queue) -> None:
    """The pipeline's handlers, once per queue."""
    if "fetch" in queue.handlers:
        return
    queue.handler("fetch")(lambda job: {"rows": 120})
    queue.handler("parse")(lambda job: {"ok": True})

    @queue.handler("transform", max_attempts=1)
    def transform(job: readyq.Job) -> Any:
        if job.args.get("fail") and job.group in BROKEN:
            raise RuntimeError(f"chunk {job.args['chunk']}: schema mismatch")
        return {"chunk": job.args["chunk"]}

    queue.handler("report")(lambda job: "ok")
    queue.handler("later")(lambda job: "later")


def seed(queue: readyq.Queue, group: str = "tenant-a", chunks: int = 6) -> Pipeline:
    """fetch -> parse -> a container of ``chunks`` transforms (two of which fail while
    the group is in BROKEN) -> report (upstream_failed); and a job waiting behind a
    deferred gate. Runs a worker until idle."""
    register(queue)
    BROKEN.add(group)
    p = Pipeline(group=group)
    p.fetch = queue.enqueue("fetch", {"source": "s3://bucket/input"}, group=group)
    p.parse = queue.enqueue("parse", {}, group=group, depends_on=[p.fetch])
    p.box = queue.enqueue_container("batch", {"n": chunks}, group=group, depends_on=[p.parse])
    for c in range(chunks):
        fail = c in (1, 3)
        job = queue.enqueue("transform", {"chunk": c, "fail": fail}, group=group, parent=p.box)
        p.chunks.append(job)
        if fail:
            p.failed.append(job)
    p.report = queue.enqueue("report", {}, group=group, depends_on=[p.box])
    # Only the pipeline's types: "later" jobs of earlier seeds wait on a deferred gate.
    queue.run_worker(until_idle=True, types=["fetch", "parse", "transform", "report"], **WORKER)
    p.gate = queue.enqueue("later", {}, group=group, run_after=3600)
    p.waiting = queue.enqueue("later", {"after": "gate"}, group=group, depends_on=[p.gate],
                              unique_key=f"{group}-w")
    return p


def csrf_of(html: str) -> str:
    """The CSRF token in a page's forms."""
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF token on the page"
    return found.group(1)
