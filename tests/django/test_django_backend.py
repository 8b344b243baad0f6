"""readyq's backend of django.tasks: the contract of Django's BaseTaskBackend, the
TaskResult mapping, the worker's run of a task, and readyq's extras, on SQLite,
PostgreSQL and MariaDB (each test runs once per dialect; see conftest.py)."""

from __future__ import annotations

import asyncio
import warnings
from datetime import timedelta
from functools import partial
from typing import Any

import pytest

pytest.importorskip("django.tasks")

from django.conf import settings
from django.db import transaction
from django.tasks import TaskResultStatus, task_backends
from django.tasks.exceptions import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultMismatch,
)
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.test import override_settings
from django.utils import timezone
from shop import tasks
from shop.models import Order

import readyq
from readyq.django import JobEndedError, ReadyqBackend
from readyq.django.backend import close_queues


def job_of(backend: Any, result: Any) -> readyq.JobInfo:
    return backend.queue.get(int(result.id))


class Caught:
    """Collects what a Django signal sends."""

    def __init__(self, signal: Any) -> None:
        self.signal = signal
        self.seen: list[tuple[Any, str, str]] = []

    def __call__(self, sender: Any, task_result: Any, **kwargs: Any) -> None:
        self.seen.append((sender, task_result.id, str(task_result.status)))

    def __enter__(self) -> Caught:
        self.signal.connect(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.signal.disconnect(self)


def test_the_backend_says_it_supports_every_feature(backend: Any) -> None:
    assert isinstance(backend, ReadyqBackend)
    assert backend.supports_defer and backend.supports_async_task
    assert backend.supports_get_result and backend.supports_priority


def test_enqueue_returns_a_ready_result_backed_by_a_job(backend: Any) -> None:
    before = timezone.now()
    result = tasks.send_email.enqueue("ada@example.com")
    assert result.status == TaskResultStatus.READY
    assert result.task.func is tasks.send_email.func
    assert result.args == ["ada@example.com"] and result.kwargs == {}
    assert result.backend == "default"
    assert result.enqueued_at is not None
    assert before - timedelta(seconds=5) <= result.enqueued_at <= timezone.now()
    assert result.started_at is None and result.finished_at is None
    assert result.errors == [] and result.worker_ids == []
    job = job_of(backend, result)
    # The queue is the job type; the priority the job's; the task by its module path.
    assert job.type == "django:emails"
    assert job.priority == 5
    assert job.args == {"task": "shop.tasks.send_email", "args": ["ada@example.com"],
                        "kwargs": {}}


def test_a_worker_runs_the_task_and_refresh_reads_its_end(backend: Any, drain: Any) -> None:
    result = tasks.add.enqueue(2, b=3)
    stats = drain()
    assert stats.done == 1
    assert result.status == TaskResultStatus.READY  # until refreshed
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.started_at is not None and result.finished_at is not None
    assert result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at
    assert result.errors == []
    assert result.attempts == 1 and result.worker_ids[0]
    again = tasks.add.get_result(result.id)
    assert again.status == TaskResultStatus.SUCCESSFUL and again.return_value == 5
    assert again.args == [2] and again.kwargs == {"b": 3}


def test_a_task_writes_to_the_applications_own_tables(
    backend: Any, drain: Any, alias: str
) -> None:
    result = tasks.record.enqueue(alias, "first order")
    drain()
    result.refresh()
    assert Order.objects.using(alias).get(pk=result.return_value).label == "first order"


def test_get_result_of_an_unknown_id_raises_does_not_exist(backend: Any) -> None:
    for bad in ("999999", "abc", "-1", "", "1" * 40):
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(bad)
    # A job of the same tables that is no Django task.
    with readyq.Queue(backend.url, prefix=backend.prefix) as plain:
        other = plain.enqueue("resize", {"path": "a.png"})
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result(str(other))


def test_get_result_through_another_task_is_a_mismatch(backend: Any) -> None:
    result = tasks.add.enqueue(1, 1)
    with pytest.raises(TaskResultMismatch):
        tasks.send_email.get_result(result.id)


def test_a_failure_keeps_the_exception_class_and_traceback(backend: Any, drain: Any) -> None:
    result = tasks.fail.enqueue("out of stock")
    assert drain().failed == 1
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.finished_at is not None
    [error] = result.errors
    assert error.exception_class_path == "shop.tasks.Boom"
    assert error.exception_class is tasks.Boom
    assert error.traceback.startswith("Traceback (most recent call last):")
    assert "raise Boom(message)" in error.traceback
    assert error.traceback.rstrip().endswith("shop.tasks.Boom: out of stock")
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value


def test_retries_give_the_task_readyqs_attempt_as_its_context(
    backend: Any, drain: Any
) -> None:
    recovered = tasks.flaky.enqueue(3)
    exhausted = tasks.flaky.enqueue(5)
    drain()
    recovered.refresh()
    assert recovered.status == TaskResultStatus.SUCCESSFUL
    assert recovered.return_value == 3  # the attempt the task saw in its context
    assert recovered.attempts == 3 == job_of(backend, recovered).attempts
    # The attempts before the success keep their errors (readyq's attempt history).
    assert [e.traceback.rstrip().splitlines()[-1] for e in recovered.errors] == [
        "ValueError: attempt 1", "ValueError: attempt 2"]
    assert len(recovered.worker_ids) == 3 and all(recovered.worker_ids)
    assert recovered.started_at < recovered.last_attempted_at  # the first and the third
    exhausted.refresh()
    assert exhausted.status == TaskResultStatus.FAILED
    assert exhausted.attempts == 3
    assert len(exhausted.errors) == 3  # one per attempt, oldest first
    error = exhausted.errors[-1]
    assert error.exception_class_path == "builtins.ValueError"
    assert error.exception_class is ValueError
    assert error.traceback.rstrip().endswith("ValueError: attempt 3")


def test_a_task_sees_its_context(backend: Any, drain: Any) -> None:
    result = tasks.whoami.enqueue()
    drain(worker_id="worker-one")
    result.refresh()
    assert result.return_value == {"attempt": 1, "id": result.id, "worker": "worker-one",
                                   "status": "RUNNING"}
    assert result.worker_ids == ["worker-one"]


def test_async_tasks_aenqueue_and_aget_result(backend: Any, drain: Any) -> None:
    result = asyncio.run(tasks.async_add.aenqueue(20, 22))
    assert result.status == TaskResultStatus.READY
    drain()
    fetched = asyncio.run(tasks.async_add.aget_result(result.id))
    assert fetched.status == TaskResultStatus.SUCCESSFUL and fetched.return_value == 42
    asyncio.run(result.arefresh())
    assert result.return_value == 42


def test_run_after_defers_the_task(backend: Any, drain: Any) -> None:
    when = timezone.now() + timedelta(seconds=1.5)
    result = tasks.add.using(run_after=when).enqueue(1, 2)
    assert result.task.run_after == when
    assert job_of(backend, result).run_after == when
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.started_at >= when
    assert tasks.add.get_result(result.id).task.run_after == when


def test_priority_orders_the_runs(backend: Any, drain: Any, alias: str) -> None:
    low = tasks.record.using(priority=-10).enqueue(alias, "low")
    high = tasks.record.using(priority=50).enqueue(alias, "high")
    middle = tasks.record.enqueue(alias, "middle")
    drain(concurrency=1)
    order = [r.status for r in (low, high, middle)]
    assert order == [TaskResultStatus.READY] * 3
    ids = {}
    for name, result in (("low", low), ("high", high), ("middle", middle)):
        result.refresh()
        ids[name] = result.return_value
    assert ids["high"] < ids["middle"] < ids["low"]
    assert tasks.record.get_result(high.id).task.priority == 50


def test_priority_out_of_djangos_range_is_refused(backend: Any) -> None:
    with pytest.raises(InvalidTask):
        tasks.add.using(priority=101)


def test_a_queue_the_backend_does_not_have_is_refused(backend: Any) -> None:
    with pytest.raises(InvalidTask):
        tasks.add.using(queue_name="reports")


def test_a_worker_runs_only_the_queues_it_is_given(backend: Any, drain: Any) -> None:
    email = tasks.send_email.enqueue("bob@example.com")
    added = tasks.add.enqueue(1, 1)
    drain(types=["django:default"])
    email.refresh()
    added.refresh()
    assert added.status == TaskResultStatus.SUCCESSFUL
    assert email.status == TaskResultStatus.READY


def test_the_signals_are_sent(backend: Any, drain: Any) -> None:
    sender = type(backend)
    with Caught(task_enqueued) as enqueued, Caught(task_started) as started, \
            Caught(task_finished) as finished:
        good = tasks.add.enqueue(1, 2)
        bad = tasks.fail.enqueue("no")
        drain()
    assert enqueued.seen == [(sender, good.id, "READY"), (sender, bad.id, "READY")]
    assert sorted(started.seen) == sorted([(sender, good.id, "RUNNING"),
                                           (sender, bad.id, "RUNNING")])
    assert sorted(finished.seen) == sorted([(sender, good.id, "SUCCESSFUL"),
                                            (sender, bad.id, "FAILED")])


def test_task_finished_waits_for_the_last_attempt(backend: Any, drain: Any) -> None:
    with Caught(task_started) as started, Caught(task_finished) as finished:
        result = tasks.flaky.enqueue(2)
        drain()
    assert [s for _, _, s in started.seen] == ["RUNNING", "RUNNING"]
    assert finished.seen == [(type(backend), result.id, "SUCCESSFUL")]


def test_check_reports_missing_tables_and_unusable_databases(
    backend: Any, alias: str, prefix: str
) -> None:
    assert backend.check(databases=[alias]) == []
    backend.queue.drop_schema()
    try:
        [error] = backend.check(databases=[alias])
        assert error.id == "readyq.E002" and prefix in error.msg
        assert backend.check() == []  # without databases, no connection is made
    finally:
        backend.queue.create_schema()
    memory = {"default": {"BACKEND": "readyq.django.ReadyqBackend",
                          "OPTIONS": {"url": "nosuchdb://app:hunter2@db/app"}}}
    with override_settings(TASKS=memory):
        [error] = task_backends["default"].check()
        assert error.id == "readyq.E001"
        assert "hunter2" not in error.msg  # the URL's password is not shown
    in_memory = {"default": {"BACKEND": "readyq.django.ReadyqBackend",
                             "OPTIONS": {"database": "memory"}}}
    databases = {**settings.DATABASES,
                 "memory": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
    with warnings.catch_warnings():
        # Django warns that other parts of it would not see the change; the backend does.
        warnings.simplefilter("ignore", UserWarning)
        with override_settings(TASKS=in_memory, DATABASES=databases):
            [error] = task_backends["default"].check()
        assert error.id == "readyq.E001" and "in-memory SQLite" in error.msg
    close_queues()


def test_unknown_options_are_refused() -> None:
    from django.tasks.exceptions import InvalidTaskBackend

    with pytest.raises(InvalidTaskBackend, match="retries"):
        ReadyqBackend("default", {"OPTIONS": {"retries": 3}})
    with pytest.raises(InvalidTaskBackend, match="QUEUES"):
        ReadyqBackend("default", {"QUEUES": []})


def test_enqueue_inside_atomic_joins_djangos_transaction(
    backend: Any, alias: str, drain: Any
) -> None:
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        Order.objects.using(alias).create(label="rolled back")
        gone = tasks.add.enqueue(1, 2)
        assert gone.status == TaskResultStatus.READY and gone.enqueued_at is not None
        raise RuntimeError("rollback")
    assert not Order.objects.using(alias).filter(label="rolled back").exists()
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result(gone.id)  # rolled back with the row
    with transaction.atomic(using=alias):
        Order.objects.using(alias).create(label="committed")
        first = tasks.add.enqueue(1, 2)
        second = tasks.add.using(depends_on=[first]).enqueue(3, 4)
        again = tasks.add.using(unique_key="block").enqueue(5, 6)
        assert tasks.add.using(unique_key="block").enqueue(7, 8).id == again.id
        # Not visible outside the block before it commits (readyq's own connection).
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(first.id)
    assert job_of(backend, second).depends_on == (int(first.id),)
    drain()
    for result, value in ((first, 3), (second, 7), (again, 11)):
        result.refresh()
        assert result.return_value == value


def test_enqueue_on_another_database_than_djangos_commits_on_its_own(
    alias: str, prefix: str, tmp_path: Any
) -> None:
    """With its own ``url``, readyq cannot join: a rollback leaves the job."""
    setting = {"default": {"BACKEND": "readyq.django.ReadyqBackend",
                           "OPTIONS": {"url": f"sqlite:///{tmp_path}/own.db"}}}
    with override_settings(TASKS=setting):
        backend = task_backends["default"]
        backend.queue.create_schema()
        try:
            with pytest.raises(RuntimeError), transaction.atomic(using=alias):
                Order.objects.using(alias).create(label="rolled back")
                kept = tasks.add.enqueue(1, 2)
                raise RuntimeError("rollback")
            assert job_of(backend, kept).state == "ready"
        finally:
            close_queues()


def test_on_commit_ties_the_job_to_the_transaction(backend: Any, alias: str) -> None:
    enqueued: list[Any] = []

    def enqueue(label: str) -> None:
        enqueued.append(tasks.record.enqueue(alias, label))

    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        Order.objects.using(alias).create(label="gone")
        transaction.on_commit(partial(enqueue, "gone"), using=alias)
        raise RuntimeError("rollback")
    assert enqueued == []
    assert sum(backend.queue.counts().values()) == 0
    with transaction.atomic(using=alias):
        Order.objects.using(alias).create(label="kept")
        transaction.on_commit(partial(enqueue, "kept"), using=alias)
        assert enqueued == []  # not before the commit
    [result] = enqueued
    assert job_of(backend, result).state == "ready"


def test_depends_on_runs_after_and_fails_with_upstream(backend: Any, drain: Any) -> None:
    first = tasks.add.enqueue(1, 2)
    second = tasks.add.using(depends_on=[first]).enqueue(3, 4)
    broken = tasks.fail.enqueue("upstream")
    downstream = tasks.add.using(depends_on=[broken.id]).enqueue(5, 6)
    assert job_of(backend, second).depends_on == (int(first.id),)
    assert job_of(backend, second).state == "waiting"
    assert second.status == TaskResultStatus.READY
    drain()
    second.refresh()
    first.refresh()
    assert second.status == TaskResultStatus.SUCCESSFUL
    assert second.started_at >= first.finished_at
    downstream.refresh()
    assert downstream.status == TaskResultStatus.FAILED
    assert job_of(backend, downstream).state == "upstream_failed"
    [error] = downstream.errors
    assert error.exception_class is JobEndedError
    assert error.traceback == f"dependency {broken.id} ended failed"


def test_group_weight_uses_and_limits_reach_the_job(backend: Any, drain: Any) -> None:
    result = tasks.add.using(group="tenant-42", weight=3, max_attempts=2,
                             timeout=60).enqueue(1, 1)
    job = job_of(backend, result)
    assert (job.group, job.weight, job.max_attempts) == ("tenant-42", 3, 2)
    gpu = tasks.on_gpu.enqueue("model")
    assert backend.queue.resource_stats()["gpu"].wanted == 1
    drain()
    gpu.refresh()
    assert gpu.status == TaskResultStatus.SUCCESSFUL and gpu.return_value == "model"


def test_a_unique_key_returns_the_running_tasks_result(backend: Any, drain: Any) -> None:
    first = tasks.add.using(unique_key="sum:1").enqueue(1, 1)
    second = tasks.add.using(unique_key="sum:1").enqueue(9, 9)
    assert second.id == first.id and second.args == [1, 1]
    drain()
    third = tasks.add.using(unique_key="sum:1").enqueue(2, 2)
    assert third.id != first.id  # the key is free once its task ended


def test_an_unknown_extra_is_refused(backend: Any) -> None:
    with pytest.raises(TypeError):
        tasks.add.using(retries=3)


def test_args_are_stored_as_json_and_others_are_refused(backend: Any) -> None:
    result = tasks.add.enqueue((1, 2), b=(3,))
    assert result.args == [[1, 2]] and result.kwargs == {"b": [3]}
    assert job_of(backend, result).args["args"] == [[1, 2]]
    with pytest.raises(TypeError):
        tasks.add.enqueue({1, 2}, 3)
    assert sum(backend.queue.counts().values()) == 1  # the refused call wrote nothing


def test_a_job_naming_no_task_fails_in_the_worker(backend: Any, drain: Any) -> None:
    with readyq.Queue(backend.url, prefix=backend.prefix) as plain:
        job_id = plain.enqueue("django:default", {"task": "shop.tasks.nothing",
                                                  "args": [], "kwargs": {}})
    drain()
    job = backend.queue.get(job_id)
    assert job.state == "failed"
    assert "TaskNotFound: task 'shop.tasks.nothing' cannot be imported" in job.error
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result(str(job_id))
