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


def beat(job: readyq.Job) -> bool:
    """Heartbeats once (the worker's heartbeats then use a connection of their own)."""
    return job.heartbeat()


def note(path: str, *fields: object) -> None:
    """Append one line to ``path`` (one write: lines from several processes never mix)."""
    with open(path, "a") as f:
        f.write(" ".join(str(x) for x in fields) + "\n")


def heartbeat_timed(job: readyq.Job, path: str, who: str) -> None:
    """``job.heartbeat()``, its answer and how long it took, noted in ``path``."""
    began = time.monotonic()
    try:
        answer = "extended" if job.heartbeat() else "unanswered"
    except readyq.LeaseLost:
        answer = "lost"
    except Exception as exc:
        answer = f"error:{type(exc).__name__}"
    note(path, "heartbeat", who, began, time.monotonic(), answer)


def partition_child(job: readyq.Job) -> None:
    """Notes that it is alive every 20 ms and heartbeats every 0.5 s, until killed."""
    path = job.args["events"]
    note(path, "start", "child", time.monotonic(), os.getpid())
    last_beat = time.monotonic()
    while True:
        note(path, "alive", "child", time.monotonic())
        if time.monotonic() - last_beat >= 0.5:
            heartbeat_timed(job, path, "child")
            last_beat = time.monotonic()
        time.sleep(0.02)


def noted_sleep(job: readyq.Job) -> dict[str, Any]:
    """Notes its start, that it is alive every 20 ms, and its end, in the file
    ``job.args["events"]``; runs ``job.args["seconds"]``."""
    path, who = job.args["events"], f"attempt{job.attempt}"
    note(path, "start", who, time.monotonic(), os.getpid())
    end = time.monotonic() + job.args["seconds"]
    while time.monotonic() < end:
        note(path, "alive", who, time.monotonic())
        time.sleep(0.02)
    note(path, "end", who, time.monotonic())
    return {"attempt": job.attempt}


def heartbeat_forever(job: readyq.Job) -> None:
    """Writes its pid to ``job.args["pid_file"]``, then heartbeats every 0.2 s for ever."""
    path = Path(job.args["pid_file"])
    tmp = path.with_suffix(".tmp")
    tmp.write_text(str(os.getpid()))
    tmp.rename(path)
    while True:
        job.heartbeat()
        time.sleep(0.2)


def save_state_forever(job: readyq.Job) -> None:
    """Writes its pid to ``job.args["pid_file"]``, then saves its state every 0.2 s for
    ever (each save a request the worker runs against the database)."""
    path = Path(job.args["pid_file"])
    tmp = path.with_suffix(".tmp")
    tmp.write_text(str(os.getpid()))
    tmp.rename(path)
    i = 0
    while True:
        i += 1
        job.save_state(i)
        time.sleep(0.2)


def parent_pid(job: readyq.Job) -> dict[str, Any]:
    """This child's parent: its pid and command line."""
    ppid = os.getppid()
    with open(f"/proc/{ppid}/cmdline", "rb") as f:
        cmdline = f.read().replace(b"\0", b" ").decode()
    return {"parent": ppid, "parent_cmdline": cmdline}


def write_pid(path: str, pid: int) -> None:
    tmp = Path(path + ".tmp")
    tmp.write_text(str(pid))
    tmp.rename(path)


def stuck_in_c(job: readyq.Job) -> None:
    """Writes its pid, then calls C's sleep while holding the GIL (a ``PyDLL`` call), so
    that no Python thread of the child can run: only a kill from outside ends it."""
    write_pid(job.args["pid_file"], os.getpid())
    ctypes.PyDLL(None).sleep(600)


def with_grandchild(job: readyq.Job) -> None:
    """Starts a grandchild in a session of its own (out of the child's process group),
    writes its pid, and waits."""
    import subprocess

    grandchild = subprocess.Popen(["sleep", "600"], start_new_session=True)
    write_pid(job.args["pid_file"], grandchild.pid)
    time.sleep(600)


def forge_answers(job: readyq.Job) -> str:
    """Leaves a thread behind that, once this job is over, writes an answer for it into
    the child's pipe, as if the child spoke for the next job."""
    import gc
    import json
    import multiprocessing.connection
    import threading

    from readyq.isolation import JobRequest

    objects = gc.get_objects()
    conn = next(o for o in objects if isinstance(o, multiprocessing.connection.Connection))
    req = next(o for o in objects if isinstance(o, JobRequest) and o.id == job.id)

    def later() -> None:
        time.sleep(job.args["after"])
        if not hasattr(req, "token"):  # a pipe of pickles, as readyq once had
            from readyq.isolation import ChildEnd

            conn.send(("end", ChildEnd(result_json='"forged"')))
            return
        conn.send_bytes(json.dumps({
            "token": req.token, "kind": "end", "result_json": '"forged"', "error": None,
            "error_type": None,
        }).encode())

    threading.Thread(target=later, daemon=True).start()
    return "own"


def garbage_answer(job: readyq.Job) -> str:
    """Writes bytes into the child's pipe that are no answer of readyq's."""
    import gc
    import multiprocessing.connection

    conn = next(o for o in gc.get_objects()
                if isinstance(o, multiprocessing.connection.Connection))
    conn.send_bytes(b"\x80\x04not an answer")
    time.sleep(5)
    return "never seen"


def slow_echo(job: readyq.Job) -> Any:
    time.sleep(job.args["seconds"])
    return job.args["value"]


def overrun(job: readyq.Job) -> str:
    """Runs ``job.args["seconds"]``, whatever it is told (cancel, timeout)."""
    time.sleep(job.args["seconds"])
    return "overran"


def _note(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")


def remembers(job: readyq.Job) -> dict[str, Any]:
    """Job memory from a child: a setup step logged to ``log``, state counted up, progress;
    attempt 1 fails after its first save."""
    setup = job.step("setup", lambda: _note(job.args["log"], "setup") or {"n": 3})
    start = job.state or 0
    job.progress(start, 10, "going")
    job.save_state(start + setup["n"])
    if job.attempt == 1:
        raise RuntimeError("fails after saving")
    job.progress(9, 10, "almost")
    return {"start": start, "state": job.state, "setup": setup,
            "upstream": job.upstream_results(by="key")}


def misuses_memory(job: readyq.Job) -> dict[str, str]:
    """What a child's memory refuses, each error by its type's name."""
    seen: dict[str, str] = {}
    for what, call in (
        ("connection", lambda: job.save_state(1, connection=object())),
        ("name", lambda: job.step("", lambda: 1)),
        ("state", lambda: job.save_state({1, 2})),
        ("progress", lambda: job.progress(float("nan"))),
        ("by", lambda: job.upstream_results(by="nope")),
    ):
        try:
            call()
        except readyq.ReadyqError as exc:
            seen[what] = type(exc).__name__
    job.step("once", lambda: 1)
    try:
        job.step("once", lambda: 2)
    except readyq.ReadyqError as exc:
        seen["twice"] = type(exc).__name__
    return seen


def until_stopping(job: readyq.Job) -> None:
    """Writes its pid to ``pid_file``, then waits for ``job.stopping`` and saves how long
    it waited."""
    target = Path(job.args["pid_file"])
    part = target.with_name(target.name + ".part")
    part.write_text(f"{os.getpid()} {job.attempt}")
    os.replace(part, target)
    waited = 0
    while not job.stopping and waited < 3000:
        time.sleep(0.01)
        waited += 1
    job.save_state({"stopping": job.stopping})
    raise RuntimeError("stopping: come back later")


def spawner(job: readyq.Job) -> dict[str, Any]:
    """Spawns ``n`` parts and a merge that depends on them (a datetime and a timedelta
    among their fields), tries a bad spawn, then fails its first attempt."""
    from datetime import datetime, timedelta, timezone

    n = int(job.args["n"])
    job.spawn([readyq.JobSpec("part", {"i": i}, key=f"p{i}", timeout=timedelta(minutes=5))
               for i in range(n)]
              + [readyq.JobSpec("merge", {}, depends_on=[f"p{i}" for i in range(n)],
                                run_after=datetime(2000, 1, 1, tzinfo=timezone.utc))])
    refused = []
    try:
        job.spawn([readyq.JobSpec("part", {}, key="x"), readyq.JobSpec("part", {}, key="x")])
    except readyq.InvalidJobOption as exc:
        refused.append(type(exc).__name__)
    if job.attempt == 1:
        raise RuntimeError("the first attempt fails after its spawn")
    return {"refused": refused}


def big_state(job: readyq.Job) -> int:
    """Saves a state of ``n`` two-byte characters (each sent as six across the pipe)."""
    job.save_state("é" * int(job.args["n"]))
    return len(job.state)
