"""Handlers that run in child processes in the tests: importable by module and name, as a
child needs them to be."""

from __future__ import annotations

import ctypes
import os
import signal
import time
from pathlib import Path
from typing import Any

import pydantic

import readyq


def spin(job: readyq.Job) -> None:
    """Spins for ever, deaf to SIGTERM."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        pass


def late(job: readyq.Job) -> dict[str, Any]:
    """Returns after ``seconds``, deaf to SIGTERM meanwhile."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(job.args["seconds"])
    return {"late": True}


def quick(job: readyq.Job) -> dict[str, Any]:
    return {"pid": os.getpid(), "attempt": job.attempt}


def abort(job: readyq.Job) -> None:
    os.abort()


def segfault(job: readyq.Job) -> None:
    ctypes.string_at(0)


def hog(job: readyq.Job) -> int:
    """Holds ``mib`` MiB of touched memory for a while."""
    block = bytearray(job.args["mib"] * 2**20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    time.sleep(30)
    return len(block)


def sleeper(job: readyq.Job) -> dict[str, Any]:
    """Writes its pid to ``pid_file`` (once per attempt), sleeps ``seconds``, heartbeating
    each second when ``beat`` is set; reports whether it saw a cancel."""
    # Written whole or not at all: a test polls for the file and reads it at once.
    target = Path(job.args["pid_file"])
    part = target.with_name(target.name + ".part")
    part.write_text(f"{os.getpid()} {job.attempt}")
    os.replace(part, target)
    end = time.monotonic() + job.args["seconds"]
    while time.monotonic() < end:
        time.sleep(0.05)
        if job.args.get("beat"):
            job.heartbeat()
    return {"pid": os.getpid(), "cancelled": job.cancelled}


class Size(pydantic.BaseModel):
    width: int
    height: int


class Area(pydantic.BaseModel):
    area: int
    pid: int


def area(job: readyq.Job) -> Area:
    args = job.args
    assert isinstance(args, Size)
    return Area(area=args.width * args.height, pid=os.getpid())


def echo_args(job: readyq.Job) -> Any:
    return job.args
