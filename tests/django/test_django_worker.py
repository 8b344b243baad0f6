"""``manage.py readyq_worker``: readyq's worker with Django set up, its flags, its
queues, and a graceful stop on SIGTERM, on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("django.tasks")

from django.core.management import call_command
from django.core.management.base import CommandError
from django.tasks import TaskResultStatus
from shop import tasks
from shop.models import Order

PROJECT = Path(__file__).parent


def test_the_command_runs_the_queues_it_is_given(backend: Any) -> None:
    added = tasks.add.enqueue(1, 2)
    email = tasks.send_email.enqueue("carol@example.com")
    call_command("readyq_worker", "--queue", "default", "--until-idle", "--concurrency", "2",
                 "--poll-interval", "0.05", "--worker-id", "django-worker")
    added.refresh()
    email.refresh()
    assert added.status == TaskResultStatus.SUCCESSFUL and added.return_value == 3
    assert added.worker_ids == ["django-worker"]
    assert email.status == TaskResultStatus.READY
    call_command("readyq_worker", "--until-idle", "--poll-interval", "0.05")
    email.refresh()
    assert email.status == TaskResultStatus.SUCCESSFUL


def test_the_command_refuses_a_queue_the_backend_does_not_have(backend: Any) -> None:
    with pytest.raises(CommandError, match="no queue 'reports'"):
        call_command("readyq_worker", "--queue", "reports", "--until-idle")


def test_the_command_refuses_bad_flags_as_readyq_worker_does(backend: Any) -> None:
    with pytest.raises(CommandError, match="--concurrency must be at least 1"):
        call_command("readyq_worker", "--concurrency", "0", "--until-idle")


def test_the_command_refuses_process_isolation(backend: Any) -> None:
    with pytest.raises(CommandError, match="--isolation process"):
        call_command("readyq_worker", "--isolation", "process", "--until-idle")


def test_sigterm_lets_the_running_task_finish_within_the_grace(
    backend: Any, alias: str, prefix: str
) -> None:
    result = tasks.nap.enqueue(1.0, alias, "finished after SIGTERM")
    env = {**os.environ, "READYQ_DJANGO_DATABASE": alias, "READYQ_DJANGO_PREFIX": prefix,
           "PYTHONPATH": str(PROJECT)}
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "readyq_worker", "--shutdown-grace", "10",
         "--poll-interval", "0.05"],
        cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while backend.queue.get(int(result.id)).state != "running":
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the worker never started the task"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "stopped: claimed 1, done 1" in out
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert Order.objects.using(alias).get(pk=result.return_value).label == (
        "finished after SIGTERM"
    )
