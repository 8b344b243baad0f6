"""Three worker processes fire the same schedule while their database clocks jump:
each occurrence is enqueued exactly once, none is left out, and every process's worker
could have fired it (the row's lock decides, not the process)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

import readyq

pytestmark = pytest.mark.slow

APP = Path(__file__).with_name("schedule_app.py")
SECONDS = 3.0


def test_three_processes_fire_each_occurrence_once_across_clock_jumps(
    queue: readyq.Queue, db: str, tmp_path: Path
) -> None:
    procs: list[tuple[subprocess.Popen[bytes], Path, Path]] = []
    try:
        for n in range(3):
            log, stats = tmp_path / f"w{n}.log", tmp_path / f"w{n}.json"
            with open(log, "wb") as out:
                popen = subprocess.Popen(
                    [sys.executable, str(APP), db, f"w{n}", str(SECONDS), str(stats)],
                    stdout=out, stderr=subprocess.STDOUT,
                )
            procs.append((popen, log, stats))
        for popen, log, _ in procs:
            assert popen.wait(60) == 0, log.read_text()
    finally:
        for popen, _, _ in procs:
            if popen.poll() is None:
                popen.kill()
                popen.wait()
    fired = [json.loads(stats.read_text())["fired"] for _, _, stats in procs]

    f, j = queue.store.tables.schedule_fires, queue.store.tables.jobs
    with queue.engine.connect() as conn:
        fires = [int(x) for x in conn.execute(
            sa.select(f.c.fire_at).where(f.c.name == "every2").order_by(f.c.fire_at)
        ).scalars()]
        args = [a for a in conn.execute(sa.select(j.c.args)).scalars()]
    firsts = sorted(json.loads(a)["at"] for a in args if "at" in json.loads(a))
    seconds = sorted(json.loads(a)["after"] for a in args if "after" in json.loads(a))
    assert sum(fired) == len(fires), fired
    # Each occurrence's two jobs, once each: no occurrence twice, none without its jobs.
    assert firsts == fires and seconds == fires
    # catch_up="all" across both jumps: every 2 s from the first to the last, no gap.
    assert fires == list(range(fires[0], fires[-1] + 1, 2))
    assert fires[-1] - fires[0] >= 600, "the clock jumps were not fired through"
    (info,) = queue.schedules()
    assert info.conflict is None and info.last_fire is not None
    assert int(info.last_fire.timestamp()) == fires[-1]
