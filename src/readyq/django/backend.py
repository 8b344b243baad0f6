"""``ReadyqBackend``: Django's task backend contract on readyq's tables.

A Django queue is a readyq job type, ``django:<queue_name>``: workers choose the types
they run (``readyq_worker --queue emails`` runs ``django:emails``), which is what a
Django queue means, while readyq's groups stay free for fair share between tenants
(the ``group`` extra). A task's priority is the job's priority, ``run_after`` the job's,
and the task is stored by its module path with its args and kwargs as JSON.

Inside ``transaction.atomic()`` on the database readyq's tables are in (no ``url``
option), ``enqueue`` joins Django's transaction (:mod:`readyq.django.transactions`): the
job commits or rolls back with the block's rows. Elsewhere it writes on readyq's own
connection and commits at once.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core import checks
from django.tasks import TaskResult
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone
from django.utils.json import normalize_json

from readyq.admin import check_schema
from readyq.django.databases import url_of
from readyq.django.results import new_result, task_result, with_call_options
from readyq.django.runner import TaskNotFound, TaskRunner, load_task
from readyq.django.tasks import ReadyqTask
from readyq.django.transactions import driver_of, in_transaction, joined
from readyq.errors import (
    ConfigurationError,
    InvalidJobId,
    JobNotFound,
    SchemaNotFound,
    UnsupportedDatabase,
)
from readyq.model import JobInfo
from readyq.planning.backoff import DEFAULT_RETRY_BASE
from readyq.queue import Queue
from readyq.schema import DEFAULT_PREFIX

TYPE_PREFIX = "django:"
OPTIONS = frozenset(
    {"url", "database", "prefix", "max_attempts", "retry_backoff", "group", "resources"}
)
DEFAULT_MAX_ATTEMPTS = 1

# One readyq Queue (engine and pool) per backend configuration, shared by the threads:
# Django builds a backend object per thread.
_queues: dict[tuple[Any, ...], Queue] = {}
_queues_lock = threading.Lock()


def job_type(queue_name: str) -> str:
    """The readyq job type of a Django queue."""
    return TYPE_PREFIX + queue_name


def close_queues() -> None:
    """Close every readyq queue the backends opened (they reopen on next use): after a
    fork, or when a test changes the TASKS setting."""
    with _queues_lock:
        queues = list(_queues.values())
        _queues.clear()
    for queue in queues:
        queue.close()


class ReadyqBackend(BaseTaskBackend):
    """The ``BACKEND`` of a ``TASKS`` entry.

    OPTIONS (all optional):
        url: readyq's database, a SQLAlchemy URL (default: ``database``'s).
        database: the alias in ``DATABASES`` whose database readyq uses when no ``url``
            is given ("default").
        prefix: readyq's table prefix ("readyq_").
        max_attempts: attempts of a task that sets none (1: a task runs once unless it
            asks for retries with ``@task(max_attempts=...)``).
        retry_backoff: seconds before the first retry, doubling at each (1).
        group: the fair-share group of a task that sets none ("default").
        resources: ``{name: capacity}``, the readyq resources tasks may use.
    """

    task_class = ReadyqTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        unknown = sorted(set(self.options) - OPTIONS)
        if unknown:
            raise InvalidTaskBackend(
                f"TASKS[{alias!r}]['OPTIONS'] has unknown keys {unknown}: readyq's backend "
                f"takes {sorted(OPTIONS)}"
            )
        if not self.queues:
            # Django reads no QUEUES as "any queue"; readyq's workers need the job types.
            raise InvalidTaskBackend(
                f"TASKS[{alias!r}]['QUEUES'] is empty: readyq's backend runs the queues "
                "it lists (the default is ['default'])"
            )
        self.prefix = str(self.options.get("prefix", DEFAULT_PREFIX))
        self.max_attempts = self.options.get("max_attempts", DEFAULT_MAX_ATTEMPTS)
        self.retry_backoff = self.options.get("retry_backoff", DEFAULT_RETRY_BASE)
        self.group = self.options.get("group", "default")
        self.resources: Mapping[str, Any] = self.options.get("resources") or {}

    # -- readyq's queue --------------------------------------------------------------

    @property
    def url(self) -> str | sa.URL:
        """readyq's database: the ``url`` option, else that of ``DATABASES[database]``."""
        url = self.options.get("url")
        if url is not None:
            return url  # type: ignore[no-any-return]
        alias = self.options.get("database", "default")
        if alias not in settings.DATABASES:
            raise ConfigurationError(
                f"TASKS[{self.alias!r}]: DATABASES has no {alias!r} entry to use"
            )
        return url_of(settings.DATABASES[alias], alias)

    @property
    def queue(self) -> Queue:
        """The readyq queue of this backend, with a handler for each of its queues."""
        url = self.url
        key = (self.alias, str(url) if isinstance(url, str)
               else url.render_as_string(hide_password=False), self.prefix,
               self.max_attempts, self.retry_backoff, tuple(sorted(self.queues)),
               tuple(sorted(self.resources.items())))
        with _queues_lock:
            queue = _queues.get(key)
            if queue is None:
                queue = self._open(url)
                _queues[key] = queue
        return queue

    def _open(self, url: str | sa.URL) -> Queue:
        queue = Queue(url, prefix=self.prefix, default_max_attempts=self.max_attempts)
        try:
            for name, capacity in self.resources.items():
                queue.resource(name, capacity=capacity)
            runner = TaskRunner(self, queue.get)
            for name in sorted(self.queues):
                queue.handler(job_type(name), retry_backoff=self.retry_backoff)(runner)
        except Exception:
            queue.close()
            raise
        return queue

    # -- the contract ----------------------------------------------------------------

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        call = {
            "task": task.module_path,
            "args": normalize_json(list(args)),
            "kwargs": normalize_json(dict(kwargs)),
        }
        extras = _extras(task)
        options: dict[str, Any] = {
            "priority": task.priority,
            "run_after": _aware(task.run_after),
            "group": extras.get("group") or self.group,
            "weight": extras.get("weight", 1),
            "depends_on": [_job_id(d) for d in extras.get("depends_on", ())],
            "uses": extras.get("uses"),
            "max_attempts": extras.get("max_attempts"),
            "timeout": extras.get("timeout"),
        }
        queue = self.queue
        alias = self.joined_alias()
        if alias is None:
            job_id, created = self._write(queue, task, call, options, extras, None)
            if not created:  # an earlier task holds the key: its result, untouched
                return self.get_result(str(job_id))
            result = task_result(task, queue.get(job_id), call, self.alias)
        else:
            # Inside atomic() on readyq's own database: the job is written in Django's
            # transaction, where no other connection can read it before the commit.
            with joined(alias) as connection:
                job_id, created = self._write(queue, task, call, options, extras, connection)
            if not created:
                try:
                    return self.get_result(str(job_id))
                except TaskResultDoesNotExist:  # held by a job of this same block
                    pass
            result = new_result(task, job_id, call, self.alias, timezone.now())
        task_enqueued.send(type(self), task_result=result)
        return result

    @staticmethod
    def _write(
        queue: Queue, task: Any, call: dict[str, Any], options: dict[str, Any],
        extras: dict[str, Any], connection: Any,
    ) -> tuple[int, bool]:
        unique_key = extras.get("unique_key")
        if unique_key is not None:
            job_id, created = queue.enqueue_unique(
                job_type(task.queue_name), call, unique_key=unique_key,
                connection=connection, **options,
            )
            return job_id, created
        return queue.enqueue(
            job_type(task.queue_name), call, connection=connection, **options
        ), True

    def joined_alias(self) -> str | None:
        """The Django database whose open transaction an enqueue joins now: the one
        readyq's tables are in (no ``url`` option), inside ``atomic()``; else None."""
        if self.options.get("url") is not None:
            return None
        alias = self.options.get("database", "default")
        if driver_of(alias) is None or not in_transaction(alias):
            return None
        return str(alias)

    async def aenqueue(self, task: Any, args: Any, kwargs: Any) -> TaskResult:
        # readyq's connection is its own, not Django's: any thread may use it.
        return await sync_to_async(self.enqueue, thread_sensitive=False)(task, args, kwargs)

    def get_result(self, result_id: Any) -> TaskResult:
        try:
            row = self.queue.get(int(result_id))
        except (TypeError, ValueError, InvalidJobId, JobNotFound):
            raise TaskResultDoesNotExist(result_id) from None
        return self.result_of(row)

    async def aget_result(self, result_id: Any) -> TaskResult:
        return await sync_to_async(self.get_result, thread_sensitive=False)(result_id)

    def result_of(self, row: JobInfo) -> TaskResult:
        """The TaskResult of a job row; TaskResultDoesNotExist for a job that is not a
        Django task."""
        call = row.args
        if not row.type.startswith(TYPE_PREFIX) or not isinstance(call, dict):
            raise TaskResultDoesNotExist(str(row.id))
        try:
            task = load_task(call.get("task"))
        except TaskNotFound:
            raise TaskResultDoesNotExist(str(row.id)) from None
        # Unless its queue is no longer configured, or its priority was set outside
        # Django's range by hand: then the task as its module defines it.
        with contextlib.suppress(InvalidTask):
            task = with_call_options(task, row, row.type[len(TYPE_PREFIX):])
        return task_result(task, row, call, self.alias, self.queue.attempts(row.id))

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """Configuration problems always; with ``databases`` (``manage.py check
        --database default``, ``migrate``), a database readyq cannot use or its
        missing tables too."""
        errors: list[checks.CheckMessage] = []
        try:
            queue = self.queue
        except sa.exc.ArgumentError:
            # Its message repeats the URL, password included: not for a check's output.
            return [checks.Error(
                f"TASKS[{self.alias!r}]: readyq's url is not a URL of a database readyq "
                "can use (sqlite, postgresql+psycopg, mysql+pymysql...)",
                id="readyq.E001",
            )]
        except (ConfigurationError, ImportError) as exc:
            return [checks.Error(
                f"TASKS[{self.alias!r}]: readyq cannot use its database: {exc}",
                id="readyq.E001",
            )]
        if not kwargs.get("databases"):
            return errors
        try:
            check_schema(queue)
        except SchemaNotFound:
            errors.append(checks.Error(
                f"TASKS[{self.alias!r}]: readyq's tables (prefix {self.prefix!r}) do not "
                f"exist on {queue.database}",
                hint=f"run `readyq migrate --db URL --prefix {self.prefix}`",
                id="readyq.E002",
            ))
        except (UnsupportedDatabase, sa.exc.SQLAlchemyError) as exc:
            errors.append(checks.Error(
                f"TASKS[{self.alias!r}]: readyq cannot use its database: {exc}",
                id="readyq.E001",
            ))
        return errors


def _extras(task: Any) -> dict[str, Any]:
    """The readyq extras a task carries (none for a plain Django Task)."""
    if not isinstance(task, ReadyqTask):
        return {}
    extras: dict[str, Any] = {"weight": task.weight, "depends_on": task.depends_on}
    for name in ("group", "uses", "unique_key", "max_attempts", "timeout"):
        value = getattr(task, name)
        if value is not None:
            extras[name] = value
    return extras


def _job_id(dependency: Any) -> Any:
    """A dependency's job id: a TaskResult's, or an id (readyq checks it)."""
    if isinstance(dependency, TaskResult):
        dependency = dependency.id
    if isinstance(dependency, str) and dependency.isdigit():
        return int(dependency)
    return dependency


def _aware(run_after: datetime | None) -> datetime | None:
    """``run_after`` with a zone: a naive one (USE_TZ off) is in Django's TIME_ZONE."""
    if run_after is None or timezone.is_aware(run_after):
        return run_after
    aware: datetime = timezone.make_aware(run_after)
    return aware
