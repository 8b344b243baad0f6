"""Handlers of the job-memory process tests, registered by ``app.py``: module-level, so
that a child process (``--isolation process``) can import them by module and name.

Each notes what it does, one line at a time, in the file its ``log`` arg names: lines
are appended whole (a short ``write`` to a file opened for appending), by any process.
"""

from __future__ import annotations

import time
from typing import Any

import readyq


def note(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")


def count(job: readyq.Job) -> dict[str, Any]:
    """Counts the job's state from where the last attempt left it up to ``steps``, one
    save per step, after a ``setup`` step that must run once per job. The first attempt
    holds still once it saved ``hold_at`` (for the test to kill its worker)."""
    a = job.args
    job.step("setup", note, a["log"], f"setup {job.attempt}")
    start = job.state or 0
    note(a["log"], f"start {job.attempt} {start}")
    for i in range(start, a["steps"]):
        time.sleep(a["pause"])
        job.save_state(i + 1)
        if job.attempt == 1 and i + 1 == a["hold_at"]:
            time.sleep(120)
    return {"start": start, "attempt": job.attempt}


def saver(job: readyq.Job) -> dict[str, Any]:
    """Saves ``{"attempt", "i"}`` again and again: the first attempt every ``gap`` seconds
    for ever, a later one every 0.1 s up to ``last`` saves. Notes every save that was
    stored, and returns at the first that was fenced out (LeaseLost)."""
    a = job.args
    i = 0
    while True:
        i += 1
        try:
            job.save_state({"attempt": job.attempt, "i": i})
        except readyq.LeaseLost:
            note(a["log"], f"lease_lost {job.attempt} {i}")
            return {"attempt": job.attempt, "lost": True}
        note(a["log"], f"saved {job.attempt} {i}")
        if job.attempt > 1 and i >= a["last"]:
            return {"attempt": job.attempt, "i": i}
        time.sleep(a["gap"] if job.attempt == 1 else 0.1)


HANDLERS = {"count": count, "saver": saver}
