"""A child process's job memory, across the pipe to its worker.

A handler with ``isolation="process"`` has the same ``job.step``, ``job.state``,
``job.save_state``, ``job.progress`` and ``job.upstream_results`` as one in a thread: the
child's :class:`readyq.checkpoints.AttemptMemory` checks and encodes what the handler
gives, then hands each read or write to a :class:`PipeBackend`, which sends it to the
worker as a ``memory`` message and waits for the answer. The worker checks the message
(:func:`parse_request`: a child's message is untrusted data), runs it on a thread of its
own against the attempt's :class:`readyq.checkpoints.StoreBackend` (:func:`start`), and
sends back the result, or the error's type and text, which the child raises again as
the same readyq exception (:func:`raise_answer`).

The operations and their fields (besides ``token`` and ``kind``):

* ``load``: none; answered with ``[state_json, {name: result_json}]``.
* ``save_state``: ``state`` (JSON text).
* ``store_step``: ``name`` (a step name) and ``result`` (JSON text).
* ``save_progress``: ``current``, ``total`` (a finite number, or null) and ``message``
  (text or null).
* ``upstream``: ``include_children`` (a boolean); answered with ``[[id, key, result,
  state], ...]``.

A child's write cannot join a transaction of its own: it has no connection to the
database, so ``connection=`` is refused there with :class:`readyq.InvalidState`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from readyq import errors
from readyq.checkpoints import MemoryBackend, check_progress, check_step_name
from readyq.store.memory import Progress, Upstream

# Each operation's fields, besides ``token``, ``kind`` and ``op``.
OPS: dict[str, tuple[str, ...]] = {
    "load": (),
    "save_state": ("state",),
    "store_step": ("name", "result"),
    "save_progress": ("current", "total", "message"),
    "upstream": ("include_children",),
}
# The worker's answer: (value, error type, error text); value is None after an error.
Answer = tuple[Any, str | None, str | None]


class BadRequest(Exception):
    """A child's memory request that readyq's child never sends."""


def parse_request(msg: dict[str, Any], max_payload_bytes: int) -> dict[str, Any]:
    """Check a child's ``memory`` message (``token`` and ``kind`` already checked):
    a known op, exactly its fields, each of its type. Raises BadRequest."""
    op = msg.get("op")
    if not isinstance(op, str) or op not in OPS:
        raise BadRequest(f"unknown memory op {str(op)[:40]!r}")
    if set(msg) != {"token", "kind", "op", *OPS[op]}:
        raise BadRequest(f"memory op {op!r} with other fields than {list(OPS[op])}")
    try:
        if op == "save_state":
            _json_text(msg["state"], max_payload_bytes)
        elif op == "store_step":
            check_step_name(msg["name"])
            _json_text(msg["result"], max_payload_bytes)
        elif op == "save_progress":
            p = check_progress(msg["current"], msg["total"], msg["message"])
            # The child sends what its own check made of the message: nothing to change.
            if p.message != msg["message"]:
                raise BadRequest("a progress message the child would have cut or replaced")
        elif op == "upstream" and not isinstance(msg["include_children"], bool):
            raise BadRequest("include_children is not a boolean")
    except errors.ReadyqError as exc:
        raise BadRequest(str(exc)) from None
    return msg


def _json_text(value: object, max_bytes: int) -> None:
    if not isinstance(value, str):
        raise BadRequest("a JSON value that is not text")
    if len(value.encode("utf-8", "surrogatepass")) > max_bytes:
        raise BadRequest(f"a JSON value over {max_bytes} bytes")
    try:
        json.loads(value)
    except ValueError:
        raise BadRequest("a JSON value that is not JSON") from None


def perform(backend: MemoryBackend, msg: dict[str, Any]) -> Any:
    """Run a checked request against ``backend``; its answer's value (JSON-able)."""
    op = msg["op"]
    if op == "load":
        state, steps = backend.load()
        return [state, steps]
    if op == "save_state":
        backend.save_state(msg["state"], None)
    elif op == "store_step":
        backend.store_step(msg["name"], msg["result"], None)
    elif op == "save_progress":
        backend.save_progress(Progress(float(msg["current"]),
                                       None if msg["total"] is None else float(msg["total"]),
                                       msg["message"]))
    else:
        return [[u.id, u.key, u.result, u.state]
                for u in backend.upstream(msg["include_children"])]
    return None


def start(backend: MemoryBackend, msg: dict[str, Any]) -> Callable[[], Answer | None]:
    """Run a checked request on a thread of its own; returns what polls its answer (None
    while it runs). The caller's thread never waits for the database, so the worker's
    watch of the child keeps its deadline whatever the database does."""
    done: list[Answer] = []

    def run() -> None:
        try:
            answer: Answer = (perform(backend, msg), None, None)
        except Exception as exc:  # every failure goes back to the handler, as in a thread
            answer = (None, type(exc).__name__, str(exc))
        done.append(answer)

    threading.Thread(target=run, name="readyq-child-memory", daemon=True).start()
    return lambda: done[0] if done else None


def raise_answer(answer: Answer) -> Any:
    """In the child: the answer's value, or its error raised again as the readyq
    exception of that name (:class:`readyq.ReadyqError` for any other)."""
    value, error_type, error = answer
    if error_type is None:
        return value
    cls = getattr(errors, error_type, None)
    if isinstance(cls, type) and issubclass(cls, errors.ReadyqError):
        raise cls(error)
    raise errors.ReadyqError(f"{error_type}: {error}")


class PipeBackend:
    """The child's :class:`readyq.checkpoints.MemoryBackend`: every call is a request to
    the worker. ``ask(op, fields)`` sends one and returns the worker's answer; calls are
    made one at a time (a lock), so each answer matches its request."""

    def __init__(self, ask: Callable[[str, dict[str, Any]], Answer]) -> None:
        self.ask = ask
        self.lock = threading.Lock()

    def _call(self, op: str, **fields: Any) -> Any:
        with self.lock:
            return raise_answer(self.ask(op, fields))

    def load(self) -> tuple[str | None, dict[str, str]]:
        state, steps = self._call("load")
        return state, dict(steps)

    def save_state(self, state_json: str, connection: Any) -> None:
        self._call("save_state", state=state_json)

    def store_step(self, name: str, result_json: str, connection: Any) -> None:
        self._call("store_step", name=name, result=result_json)

    def save_progress(self, progress: Progress) -> None:
        self._call("save_progress", current=progress.current, total=progress.total,
                   message=progress.message)

    def upstream(self, include_children: bool) -> list[Upstream]:
        return [Upstream(int(i), key, result, state)
                for i, key, result, state in self._call("upstream",
                                                       include_children=include_children)]
