"""Job.spawn under SIGKILL: worker processes killed at random while handlers spawn.

Checked from the rows once everything has run: a spawned job exists only if its
spawner's attempt committed ``done`` (each spawner's jobs exist once, whatever attempts
were killed on the way), and a joined dependent never started before every job its
spawner spawned was done.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

import readyq
from readyq import JobSpec

pytestmark = pytest.mark.slow

APP = Path(__file__).with_name("spawn_app.py")
SPLITS = 6
PARTS = 4


def test_spawned_jobs_exist_only_after_their_spawners_done_under_sigkill(
    queue: readyq.Queue, db: str, tmp_path: Path
) -> None:
    for name in ("split", "part", "merge"):
        queue.handler(name)(lambda job: None)
    pairs = [
        queue.enqueue_many([JobSpec("split", {"parts": PARTS}, key="s"),
                            JobSpec("merge", {}, depends_on=["s"])])
        for _ in range(SPLITS)
    ]
    rng = random.Random(7)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    logs: list[Path] = []
    kills = 0

    def start(name: str) -> None:
        log = tmp_path / f"{name}.log"
        logs.append(log)
        with open(log, "wb") as fh:
            procs[name] = subprocess.Popen(
                [sys.executable, str(APP), "--url", db, "--worker-id", name],
                stdout=fh, stderr=subprocess.STDOUT)

    generation = 0
    for slot in range(3):
        start(f"w{slot}.{generation}")
    deadline = time.monotonic() + 90
    j = queue.store.tables.jobs
    try:
        # The first kill hits a worker holding a spawner that already spawned.
        owner = None
        while owner is None and time.monotonic() < deadline:
            time.sleep(0.05)
            with queue.engine.connect() as conn:
                owner = conn.execute(
                    sa.select(j.c.lease_owner).where(j.c.type == "split", j.c.state == "running")
                ).scalars().first()
        time.sleep(0.3)  # past the spawn, before the done (a first attempt sleeps 1 s)
        if owner in procs:
            dead = procs.pop(owner)
            dead.send_signal(signal.SIGKILL)
            dead.wait()
            kills += 1
            generation += 1
            start(f"{owner.split('.')[0]}.{generation}")
        while time.monotonic() < deadline:
            counts = queue.counts()
            if sum(counts.values()) == counts.get("done", 0):
                break
            time.sleep(rng.uniform(0.15, 0.5))
            if kills < 12:
                victim = rng.choice(sorted(procs))
                dead = procs.pop(victim)
                dead.send_signal(signal.SIGKILL)
                dead.wait()
                kills += 1
                generation += 1
                start(f"{victim.split('.')[0]}.{generation}")
        else:
            tail = "\n".join(p.read_text(errors="replace")[-2000:] for p in logs)
            raise AssertionError(f"the run did not finish: {queue.counts()}\n{tail}")
    finally:
        for p in procs.values():
            p.send_signal(signal.SIGKILL)
            p.wait()

    with queue.engine.connect() as conn:
        rows = {int(r.id): r for r in conn.execute(sa.select(j))}
    assert all(r.state == "done" for r in rows.values())
    spawned: dict[int, list[int]] = {}
    for r in rows.values():
        if r.spawned_by is not None:
            spawned.setdefault(int(r.spawned_by), []).append(int(r.id))
    assert kills >= 3
    # Some spawner was killed after its spawn and before its done: its jobs were dropped
    # with that attempt, and a later attempt spawned them again.
    assert sum(int(rows[s].attempts) for s, _ in pairs) > SPLITS
    for split_id, merge_id in pairs:
        kids = spawned.get(split_id, [])
        # Exactly one attempt's spawn was kept: the one whose done committed.
        assert len(kids) == PARTS, (split_id, kids)
        # The merge waited for the spawned jobs (joined) as well as for the spawner.
        first_start = min(
            [a.started_at for a in queue.attempts(merge_id) if a.started_at is not None]
        )
        assert all(rows[k].finished_at <= first_start for k in kids), (merge_id, kids)
        assert rows[split_id].finished_at <= first_start
    assert set(spawned) == {s for s, _ in pairs}
