"""Django's ``Task`` with readyq's own options as extras.

The backend's ``task_class``: ``@task(...)`` builds one, so a task takes the extras in
its decorator (``@task(max_attempts=3, timeout=600)``) and per enqueue with
``.using(...)``::

    report.using(depends_on=[extract_result], group="tenant-42", weight=2,
                 uses={"gpu": 1}, unique_key="report:2026-01-31").enqueue(day)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from django.tasks import Task


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadyqTask(Task):
    """A Django task with readyq's options.

    Attributes:
        depends_on: results (``TaskResult``) or result ids of readyq jobs that must end
            successfully before this task starts; one that fails fails this task.
        group: readyq's fair-share group (None: the backend's, ``"default"`` unless set).
        weight: the group's fair-share weight.
        uses: units of readyq resources the task holds while it runs (``{"gpu": 1}``);
            the worker's queue must define them (backend option ``resources``).
        unique_key: while a task holding the key has not ended, enqueueing another
            returns the existing task's result instead.
        max_attempts: attempts before the task fails for good (None: the backend's
            ``max_attempts``, 1 unless set).
        timeout: seconds (or a timedelta) one attempt may run.
    """

    depends_on: Sequence[Any] = field(default=(), hash=False)
    group: str | None = None
    weight: int = 1
    uses: Mapping[str, int] | None = field(default=None, hash=False)
    unique_key: str | None = None
    max_attempts: int | None = None
    timeout: float | timedelta | None = None

    def using(
        self,
        *,
        priority: int | None = None,
        queue_name: str | None = None,
        run_after: Any = None,
        backend: str | None = None,
        **extras: Any,
    ) -> ReadyqTask:
        """Django's ``using`` (priority, queue_name, run_after, backend), plus any of
        the readyq extras above (``depends_on=``, ``group=``...)."""
        # Named, not super(): slots=True makes the class anew, which breaks super().
        task = Task.using(
            self, priority=priority, queue_name=queue_name, run_after=run_after, backend=backend
        )
        return replace(task, **extras) if extras else task  # type: ignore[no-any-return]
