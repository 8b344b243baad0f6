"""A readyq job as Django's ``TaskResult``: status, instants, errors, workers, value.

What readyq records, and so what a result can say:

* ``status``: waiting, ready and leased jobs are ``READY``; running ``RUNNING``; done
  ``SUCCESSFUL``; failed, cancelled and upstream_failed ``FAILED``.
* ``started_at`` is the start of the first attempt that started, ``last_attempted_at``
  the start of the latest.
* ``errors``: one ``TaskError`` per attempt that ended with an error, from readyq's
  attempt history (``Queue.attempts``), oldest first, kept after a later success. Its
  traceback is the one the worker stored; an attempt or a job that readyq itself ended
  (timed out, its lease expired, cancelled, a dependency failed) has readyq's
  description there, under :class:`JobEndedError`.
* ``worker_ids``: one entry per attempt, so that ``attempts`` (and a task's
  ``context.attempt``) is readyq's attempt number, each the worker that ran it ("" for
  an attempt handed back by a stopping worker, which readyq does not count).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from django.tasks import Task, TaskResult, TaskResultStatus
from django.tasks.base import TaskError

from readyq.model import JobInfo, JobState, from_epoch
from readyq.reports import AttemptRecord

_STATUS = {
    JobState.WAITING: TaskResultStatus.READY,
    JobState.READY: TaskResultStatus.READY,
    JobState.LEASED: TaskResultStatus.READY,
    JobState.RUNNING: TaskResultStatus.RUNNING,
    JobState.DONE: TaskResultStatus.SUCCESSFUL,
    JobState.FAILED: TaskResultStatus.FAILED,
    JobState.CANCELLED: TaskResultStatus.FAILED,
    JobState.UPSTREAM_FAILED: TaskResultStatus.FAILED,
}
_TRACEBACK_HEAD = "Traceback (most recent call last):"
# The line that names the exception at the end of a traceback: "pkg.mod.Error: text",
# "Error: text" for a builtin, or the bare name.
_EXCEPTION_LINE = re.compile(r"([A-Za-z_][\w.]*)(?::\s|:?$)")


class JobEndedError(Exception):
    """Names, in a ``TaskError``, an end that readyq gave a job with no exception of
    the task behind it: a timeout, a cancel, a failed dependency, a dead child."""


def status_of(state: JobState) -> TaskResultStatus:
    """Django's status for a readyq state (an unknown state reads as ``READY``)."""
    return _STATUS.get(state, TaskResultStatus.READY)


def exception_path(error: str) -> str:
    """The exception's class path in a stored traceback (``builtins.`` for a builtin),
    or :class:`JobEndedError`'s for text that is not a traceback."""
    if not error.startswith(_TRACEBACK_HEAD):
        return f"{JobEndedError.__module__}.{JobEndedError.__qualname__}"
    # The exception line is the last unindented line (notes added to an exception
    # come after it, indented or not: the first match from the end that names a class).
    for line in reversed(error.rstrip("\n").splitlines()):
        if not line or line[0].isspace():
            continue
        match = _EXCEPTION_LINE.match(line)
        if match:
            name = match.group(1)
            return name if "." in name else f"builtins.{name}"
    return f"{JobEndedError.__module__}.{JobEndedError.__qualname__}"


def _error(text: str) -> TaskError:
    return TaskError(exception_class_path=exception_path(text), traceback=text)


def errors_of(job: JobInfo, attempts: list[AttemptRecord]) -> list[TaskError]:
    """A TaskError per attempt that ended with an error, then the job's own error when
    no attempt carries it (a job that ended without running: its dependency failed)."""
    errors = [_error(a.error) for a in attempts if a.error and a.outcome != "handed back"]
    if job.error is not None and job.state is not JobState.DONE and not any(
        a.error == job.error for a in attempts
    ):
        errors.append(_error(job.error))
    return errors


def worker_ids_of(job: JobInfo, attempts: list[AttemptRecord]) -> list[str]:
    """One id per attempt number, the worker that ran it ("" where none is known)."""
    if job.attempts <= 0:
        return []
    ids = [""] * job.attempts
    for a in attempts:
        if 1 <= a.attempt <= job.attempts and a.outcome != "handed back":
            ids[a.attempt - 1] = a.worker or ""
    if job.lease_owner and not ids[-1]:
        ids[-1] = job.lease_owner
    return ids


def first_start(job: JobInfo, attempts: list[AttemptRecord]) -> Any:
    """When the first attempt that started did, or the row's start."""
    starts = [a.started_at for a in attempts if a.started_at is not None]
    return from_epoch(min(starts)) if starts else job.started_at


def task_result(
    task: Any, job: JobInfo, call: dict[str, Any], backend: str,
    attempts: list[AttemptRecord] | None = None,
) -> TaskResult:
    """The result of ``task`` (a Django Task) run as ``job``; ``call`` is the stored
    ``{"args": [...], "kwargs": {...}}``, ``attempts`` the job's (``Queue.attempts``)."""
    attempts = attempts or []
    result = TaskResult(
        task=task,
        id=str(job.id),
        status=status_of(job.state),
        enqueued_at=job.created_at,
        started_at=first_start(job, attempts),
        finished_at=job.finished_at if job.state.is_terminal else None,
        last_attempted_at=job.started_at,
        args=list(call.get("args") or []),
        kwargs=dict(call.get("kwargs") or {}),
        backend=backend,
        errors=errors_of(job, attempts),
        worker_ids=worker_ids_of(job, attempts),
    )
    if job.state is JobState.DONE:
        # The value is not a field of the constructor; Django's own backends set it so.
        object.__setattr__(result, "_return_value", job.result)
    return result


def with_call_options(task: Task, row: JobInfo, queue_name: str) -> Task:
    """``task`` as the job was enqueued: its priority, queue and run_after."""
    changes: dict[str, Any] = {"priority": row.priority, "queue_name": queue_name}
    if row.run_after is not None:
        changes["run_after"] = row.run_after
    return replace(task, **changes)


def new_result(task: Any, job_id: int, call: dict[str, Any], backend: str,
               enqueued_at: Any) -> TaskResult:
    """The result of a job just written in a transaction that has not committed (no
    other connection can read it yet)."""
    return TaskResult(
        task=task, id=str(job_id), status=TaskResultStatus.READY, enqueued_at=enqueued_at,
        started_at=None, finished_at=None, last_attempted_at=None,
        args=list(call.get("args") or []), kwargs=dict(call.get("kwargs") or {}),
        backend=backend, errors=[], worker_ids=[],
    )
