"""The spawner: the one process that starts a worker's isolated children, and ends them.

A worker runs its ``isolation="process"`` handlers in children of a spawner of its own,
a fresh interpreter started as ``python -m readyq.spawner``. It imports readyq and the
handlers' modules, nothing else, and forks each child from that state (it has one
thread, so a fork of it is safe). Three guarantees follow.

* **A child never runs the worker's** ``__main__``. multiprocessing's ``spawn`` and
  ``forkserver`` run the parent's main module again in each child (or in the server);
  a script without an ``if __name__ == "__main__":`` guard then enqueued its jobs again
  and started another worker in every child.
* **The spawner lives exactly as long as its worker.** It waits on its control socket;
  when the worker is gone, however it ended (SIGKILL included, which closes the socket),
  it kills every process below it and exits. A child stuck in C code without the GIL
  to spare cannot outlive its worker, since it is killed from outside.
* **Nothing a handler starts escapes.** On Linux the spawner and every child are
  subreapers (``PR_SET_CHILD_SUBREAPER``): a grandchild that leaves its process group
  (a new session, a double fork) stays below them, where :func:`kill_tree` finds it. A
  child also gets SIGKILL when the spawner dies (``PR_SET_PDEATHSIG``), and processes
  left behind by a child that ended are killed by the spawner.

Elsewhere on POSIX the first two hold; without subreapers a process that leaves its
child's process group and outlives its parent is not found there.

The control protocol is frames of a 4-byte length and a JSON object. The worker sends
``{"op": "hello", "path": [...], "entry": "module:function", "preload": [...]}`` once
(each child calls that function with its connection to the worker), then ``{"op": "fork"}`` with
one end of a socket pair attached (SCM_RIGHTS): that end becomes the child's pipe to the
worker, and the spawner answers ``{"pid": N}``. When a child ends the spawner says
``{"exit": pid, "code": c}`` (``c`` as ``multiprocessing`` reports it: the exit status,
or minus the signal that killed it).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

_LINUX = sys.platform.startswith("linux")
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
# How often the spawner looks for processes left behind below it.
ORPHAN_SCAN = 0.5


def _prctl(option: int, value: int) -> bool:
    if not _LINUX:
        return False
    try:
        import ctypes

        return int(ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)) == 0
    except Exception:
        return False


# -- the process tree ---------------------------------------------------------------------


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process (Linux's /proc)."""
    found: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        found[int(entry)] = int(fields[1])
    return found


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, parents before their children (empty where /proc
    cannot tell)."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    out: list[int] = []
    todo = deque(children.get(pid, []))
    while todo:
        p = todo.popleft()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def kill_tree(pid: int, sig: int) -> None:
    """``sig`` to ``pid``, its process group and every process below it.

    For SIGKILL the tree is stopped first (SIGSTOP), and looked at again until no new
    process shows up, so that nothing forks its way out between the look and the kill.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
    if sig != signal.SIGKILL:
        for p in [pid, *descendants(pid)]:
            _signal(p, sig)
        return
    seen: set[int] = set()
    for _ in range(10):
        tree = [pid, *descendants(pid)]
        new = [p for p in tree if p not in seen]
        if not new:
            break
        for p in new:
            _signal(p, signal.SIGSTOP)
        seen.update(new)
    for p in seen:
        _signal(p, signal.SIGKILL)


# -- frames --------------------------------------------------------------------------------

_LENGTH = struct.Struct(">I")
MAX_FRAME = 1 << 20


def frame(message: dict[str, Any]) -> bytes:
    data = json.dumps(message).encode()
    return _LENGTH.pack(len(data)) + data


class Frames:
    """Splits a byte stream into frames (and keeps the descriptors that came with it, in
    order: each one belongs to the next ``fork`` frame)."""

    def __init__(self) -> None:
        self.buffer = b""
        self.fds: deque[int] = deque()

    def feed(self, data: bytes, fds: Sequence[int] = ()) -> list[dict[str, Any]]:
        self.buffer += data
        self.fds.extend(fds)
        out = []
        while len(self.buffer) >= _LENGTH.size:
            (n,) = _LENGTH.unpack_from(self.buffer)
            if n > MAX_FRAME:
                raise ValueError(f"a frame of {n} bytes")
            if len(self.buffer) < _LENGTH.size + n:
                break
            body = self.buffer[_LENGTH.size:_LENGTH.size + n]
            self.buffer = self.buffer[_LENGTH.size + n:]
            message = json.loads(body)
            if not isinstance(message, dict):
                raise ValueError("a frame that is not an object")
            out.append(message)
        return out


# -- the spawner's side --------------------------------------------------------------------


def _exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1


def _run_child(control: socket.socket, fd: int, entry: str) -> None:
    """In a freshly forked child: cut loose from the spawner, then call ``entry``
    (``module:function``) with a connection on ``fd``."""
    code = 0
    try:
        control.close()
        os.setsid()  # its own process group: a kill reaches what it starts in its group
        parent = os.getppid()
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the spawner died before the request took hold
            os._exit(1)
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        from multiprocessing.connection import Connection

        module, _, name = entry.partition(":")
        getattr(importlib.import_module(module), name)(Connection(fd))
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def serve(control: socket.socket) -> None:
    """The spawner's loop: fork children on request, report their ends, and when the
    worker is gone kill everything below and return."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    me = os.getpid()
    frames = Frames()
    children: set[int] = set()
    entry = ""
    last_scan = 0.0
    try:
        while True:
            ready, _, _ = select.select([control], [], [], ORPHAN_SCAN)
            if ready:
                data, fds, _, _ = socket.recv_fds(control, 65536, 16)
                if not data:
                    return  # the worker is gone
                for message in frames.feed(data, fds):
                    op = message.get("op")
                    if op == "hello":
                        sys.path[:] = [str(p) for p in message.get("path", [])]
                        entry = str(message["entry"])
                        for name in message.get("preload", []):
                            # A module that fails here fails in the child, with its error.
                            with contextlib.suppress(Exception):
                                importlib.import_module(str(name))
                    elif op == "fork":
                        fd = frames.fds.popleft()
                        pid = os.fork()
                        if pid == 0:
                            _run_child(control, fd, entry)
                        os.close(fd)
                        children.add(pid)
                        control.sendall(frame({"pid": pid}))
                    elif op == "stop":
                        return
            reaped = False
            while True:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                if pid in children:
                    children.discard(pid)
                    control.sendall(frame({"exit": pid, "code": _exit_code(status)}))
                reaped = True
            now = time.monotonic()
            if _LINUX and (reaped or now - last_scan >= ORPHAN_SCAN):
                last_scan = now
                # Processes reparented here from a child that ended: left behind.
                for pid, parent in _parents().items():
                    if parent == me and pid not in children:
                        kill_tree(pid, signal.SIGKILL)
    finally:
        for pid in [*children, *descendants(me)]:
            kill_tree(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass


def main() -> int:
    fd = int(sys.argv[1])
    control = socket.socket(fileno=fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the worker to handle
    with contextlib.suppress(OSError, ValueError):  # the worker's end broke: it is gone
        serve(control)
    return 0


# -- the worker's side ---------------------------------------------------------------------


class Spawner:
    """The worker's handle on its spawner: starts it, asks it for children that run
    ``entry`` (``module:function``, called with the child's connection), and learns how
    they ended."""

    def __init__(self, entry: str, preload: tuple[str, ...] = ()) -> None:
        import subprocess

        ours, theirs = socket.socketpair()
        self._control = ours
        self._process = subprocess.Popen(
            [sys.executable, "-m", "readyq.spawner", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self._send_lock = threading.Lock()
        self._state = threading.Condition()
        self._forked: deque[int] = deque()
        self._exits: dict[int, int] = {}
        self._closed = False
        self._reader = threading.Thread(target=self._read, name="readyq-spawner",
                                        daemon=True)
        self._reader.start()
        self._send({"op": "hello", "path": list(sys.path), "entry": entry,
                    "preload": list(preload)})

    def _send(self, message: dict[str, Any], fd: int | None = None) -> None:
        data = frame(message)
        with self._send_lock:
            if fd is None:
                self._control.sendall(data)
            else:
                socket.send_fds(self._control, [data], [fd])

    def _read(self) -> None:
        frames = Frames()
        try:
            while True:
                data = self._control.recv(65536)
                if not data:
                    break
                for message in frames.feed(data):
                    with self._state:
                        if "pid" in message:
                            self._forked.append(int(message["pid"]))
                        elif "exit" in message:
                            self._exits[int(message["exit"])] = int(message["code"])
                        self._state.notify_all()
        except (OSError, ValueError):
            pass
        finally:
            with self._state:
                self._closed = True
                self._state.notify_all()

    def fork(self, fd: int) -> int:
        """A new child whose pipe to the worker is ``fd`` (a socket; the caller closes
        its copy); returns its pid."""
        with self._send_lock:  # one fork at a time: answers come back in order
            with self._state:
                self._forked.clear()
            socket.send_fds(self._control, [frame({"op": "fork"})], [fd])
            with self._state:
                self._state.wait_for(lambda: self._forked or self._closed, timeout=30)
                if not self._forked:
                    raise OSError("the spawner of child processes is gone")
                return self._forked.popleft()

    def exit_code(self, pid: int) -> int | None:
        """How child ``pid`` ended, or None while it runs (-9 once the spawner is gone:
        it kills its children on the way out)."""
        with self._state:
            if pid in self._exits:
                return self._exits[pid]
            return -signal.SIGKILL if self._closed else None

    def wait(self, pid: int, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds for child ``pid`` to end; its exit code."""
        with self._state:
            self._state.wait_for(lambda: pid in self._exits or self._closed, timeout=timeout)
        return self.exit_code(pid)

    def forget(self, pid: int) -> None:
        with self._state:
            self._exits.pop(pid, None)

    def close(self) -> None:
        """Stop the spawner: it kills every process below it, and exits."""
        with contextlib.suppress(OSError):
            self._send({"op": "stop"})
        with contextlib.suppress(OSError):
            self._control.shutdown(socket.SHUT_WR)
        try:
            self._process.wait(10)
        except Exception:
            self._process.kill()
            self._process.wait()
        self._control.close()
        self._reader.join(5)


if __name__ == "__main__":
    sys.exit(main())
