"""What a readyq worker runs for a Django task: the handler of each queue's job type.

It imports the task by its module path, tells Django's signals, hands a
``takes_context`` task its ``TaskContext`` and returns the value for readyq to store;
an exception is raised on, for readyq to record its traceback and retry or fail the
job. ``task_finished`` is sent when the task has ended: on success, and on a failure
that leaves no attempt.
"""

from __future__ import annotations

import traceback
from typing import Any

from django.db import close_old_connections
from django.tasks import Task, TaskContext, TaskResultStatus
from django.tasks.base import TaskError
from django.tasks.signals import task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from readyq.django.results import task_result
from readyq.model import Job, JobInfo


class TaskNotFound(LookupError):
    """A job names a task that cannot be imported, or that is not a Django task."""


def load_task(path: Any) -> Task:
    """The task object at the module path ``path``."""
    try:
        found = import_string(path) if isinstance(path, str) else None
    except ImportError as exc:
        raise TaskNotFound(f"task {path!r} cannot be imported: {exc}") from None
    if not isinstance(found, Task):
        raise TaskNotFound(f"{path!r} is not a Django task (decorate it with @task)")
    return found


class TaskRunner:
    """The readyq handler of a backend's job types.

    Args:
        backend: the backend (the signals' sender is its class).
        read: reads a job's row (``Queue.get``): a task's result shows its whole row.
    """

    def __init__(self, backend: Any, read: Any) -> None:
        self.backend = backend
        self.read = read

    def __call__(self, job: Job) -> Any:
        call = job.args if isinstance(job.args, dict) else {}
        task = load_task(call.get("task"))
        row: JobInfo = self.read(job.id)
        result = task_result(task, row, call, self.backend.alias)
        # The row is read after the claim: this attempt, on this worker.
        attempts = [""] * (job.attempt - 1) + [job.worker_id]
        object.__setattr__(result, "status", TaskResultStatus.RUNNING)
        object.__setattr__(result, "worker_ids", attempts)
        object.__setattr__(result, "errors", [])
        sender = type(self.backend)
        # The worker's threads live long: give the task the connection rules of a request.
        close_old_connections()
        try:
            task_started.send(sender=sender, task_result=result)
            try:
                if task.takes_context:
                    value = task.call(TaskContext(task_result=result), *result.args,
                                      **result.kwargs)
                else:
                    value = task.call(*result.args, **result.kwargs)
                value = normalize_json(value)
            except Exception as exc:
                if job.attempt >= job.max_attempts:
                    self._finished(result, TaskResultStatus.FAILED, exc)
                raise
            self._finished(result, TaskResultStatus.SUCCESSFUL, None, value)
            return value
        finally:
            close_old_connections()

    def _finished(
        self, result: Any, status: TaskResultStatus, exc: BaseException | None,
        value: Any = None,
    ) -> None:
        object.__setattr__(result, "status", status)
        object.__setattr__(result, "finished_at", timezone.now())
        if exc is not None:
            kind = type(exc)
            object.__setattr__(result, "errors", [TaskError(
                exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
                traceback="".join(traceback.format_exception(kind, exc, exc.__traceback__)),
            )])
        else:
            # Not a constructor field: Django's own backends set it the same way.
            object.__setattr__(result, "_return_value", value)
        task_finished.send(sender=type(self.backend), task_result=result)

