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
* ``spawn``: ``specs`` (``readyq.JobSpec`` fields as JSON, :func:`spec_to_wire`),
  ``join`` (a boolean) and ``parent`` (a job id or null): checked and staged by the
  worker's own ``Job.spawn``, so that bad specs raise in the handler and the jobs are
  inserted with the attempt's ``done`` as in a thread.

A child's write cannot join a transaction of its own: it has no connection to the
database, so ``connection=`` is refused there with :class:`readyq.InvalidState`.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from readyq import errors
from readyq.checkpoints import MemoryBackend, check_progress, check_step_name
from readyq.model import JobSpec
from readyq.store.memory import Progress, Upstream

# Each operation's fields, besides ``token``, ``kind`` and ``op``.
OPS: dict[str, tuple[str, ...]] = {
    "load": (),
    "save_state": ("state",),
    "store_step": ("name", "result"),
    "save_progress": ("current", "total", "message"),
    "upstream": ("include_children",),
    "spawn": ("specs", "join", "parent"),
}
# The JobSpec fields a spawn request may carry.
SPEC_FIELDS = frozenset({
    "type", "args", "key", "group", "weight", "priority", "depends_on", "parent",
    "run_after", "max_attempts", "timeout", "container", "unique_key", "uses",
})
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
        elif op == "spawn":
            if not isinstance(msg["join"], bool):
                raise BadRequest("join is not a boolean")
            parent = msg["parent"]
            if parent is not None and (isinstance(parent, bool) or not isinstance(parent, int)):
                raise BadRequest("parent is not a job id")
            specs = msg["specs"]
            if not isinstance(specs, list) or not all(
                isinstance(s, dict) and "type" in s and set(s) <= SPEC_FIELDS for s in specs
            ):
                raise BadRequest("specs are not JobSpec fields")
            msg = {**msg, "specs": [spec_from_wire(s) for s in specs]}
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


def spec_to_wire(spec: Any) -> dict[str, Any]:
    """A JobSpec's fields as JSON: a datetime as ``{"datetime": ISO 8601}``, a timedelta
    as ``{"timedelta": seconds}``; fields left at their default are left out."""
    if not isinstance(spec, JobSpec):
        raise errors.InvalidJobOption(f"spawn takes readyq.JobSpec items, not {spec!r}")
    out: dict[str, Any] = {}
    for spec_field in dataclasses.fields(JobSpec):
        key = spec_field.name
        value = getattr(spec, key)
        if value == spec_field.default and key != "type":
            continue
        if isinstance(value, datetime):
            if value.tzinfo is None:
                raise errors.InvalidJobOption(f"{key} must be an aware datetime")
            value = {"datetime": value.isoformat()}
        elif isinstance(value, timedelta):
            value = {"timedelta": value.total_seconds()}
        elif key == "depends_on":
            value = list(value)
        elif key == "uses" and value is not None:
            value = dict(value)
        out[key] = value
    return out


def spec_from_wire(fields: dict[str, Any]) -> Any:
    """The JobSpec :func:`spec_to_wire` wrote (its values are checked by ``Job.spawn``).
    Raises BadRequest for a datetime or timedelta that is not one."""
    made: dict[str, Any] = {}
    for name, value in fields.items():
        if isinstance(value, dict) and name in ("run_after", "timeout"):
            try:
                if set(value) == {"datetime"} and name == "run_after":
                    value = datetime.fromisoformat(value["datetime"])
                elif set(value) == {"timedelta"}:
                    value = timedelta(seconds=float(value["timedelta"]))
                else:
                    raise ValueError(value)
            except (TypeError, ValueError, OverflowError):
                raise BadRequest(f"{name} is neither a datetime nor a timedelta") from None
        made[name] = value
    return JobSpec(**made)


def perform(backend: MemoryBackend, msg: dict[str, Any],
            stage: Callable[..., None] | None = None) -> Any:
    """Run a checked request against ``backend`` (a spawn with ``stage``, the worker's
    ``Job.spawn``); its answer's value (JSON-able)."""
    op = msg["op"]
    if op == "spawn":
        if stage is None:
            raise errors.InvalidJobOption("this job cannot spawn here")
        stage(msg["specs"], join=msg["join"], parent=msg["parent"])
        return None
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


def start(backend: MemoryBackend, msg: dict[str, Any],
          stage: Callable[..., None] | None = None) -> Callable[[], Answer | None]:
    """Run a checked request on a thread of its own; returns what polls its answer (None
    while it runs). The caller's thread never waits for the database, so the worker's
    watch of the child keeps its deadline whatever the database does."""
    done: list[Answer] = []

    def run() -> None:
        try:
            answer: Answer = (perform(backend, msg, stage), None, None)
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

    def spawn(self, specs: Any, *, join: bool, parent: int | None) -> None:
        """Stage a spawn in the worker (``Job.spawn`` of a child's job)."""
        self._call("spawn", specs=[spec_to_wire(s) for s in specs], join=join, parent=parent)

    def upstream(self, include_children: bool) -> list[Upstream]:
        return [Upstream(int(i), key, result, state)
                for i, key, result, state in self._call("upstream",
                                                       include_children=include_children)]
