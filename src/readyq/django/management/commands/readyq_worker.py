"""``python manage.py readyq_worker``: ``readyq worker`` with Django set up.

The flags are those of ``readyq worker`` (concurrency, leases, isolation, grace...),
with ``--queue NAME`` (repeatable) for ``--type``, and ``--backend`` for the TASKS
entry; SIGTERM and SIGINT stop it as they stop ``readyq worker``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, ClassVar

from django.core.management.base import BaseCommand, CommandError
from django.tasks import task_backends

from readyq.cli import CLIError, add_worker_flags, run_worker
from readyq.django.backend import ReadyqBackend, job_type
from readyq.errors import ReadyqError
from readyq.untrusted import one_line


class Command(BaseCommand):
    help = "Run a readyq worker for the tasks of a readyq task backend."
    # The worker checks its own tables; Django's checks would connect to every backend.
    requires_system_checks: ClassVar[list[str]] = []

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--backend", default="default", help="the TASKS entry to run (default: default)"
        )
        add_worker_flags(
            parser,
            types_flag="--queue",
            types_help="run only this queue's tasks (repeatable; default: every queue of "
            "the backend)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        alias = options["backend"]
        try:
            backend = task_backends[alias]
        except Exception as exc:
            raise CommandError(f"TASKS has no usable {alias!r} entry: {exc}") from None
        if not isinstance(backend, ReadyqBackend):
            raise CommandError(f"TASKS[{alias!r}] is not readyq's backend")
        if options["isolation"] == "process":
            # A child process would run the task without Django set up.
            raise CommandError("--isolation process is not available for Django tasks")
        queues = options["types"]
        if queues is not None:
            unknown = sorted(set(queues) - backend.queues)
            if unknown:
                raise CommandError(
                    f"TASKS[{alias!r}] has no queue "
                    f"{', '.join(repr(one_line(name)) for name in unknown)} "
                    f"(it has {', '.join(sorted(backend.queues))})"
                )
            options["types"] = [job_type(name) for name in queues]
        try:
            code = run_worker(backend.queue, argparse.Namespace(**options))
        except CLIError as exc:
            raise CommandError(str(exc), returncode=exc.code) from None
        except ReadyqError as exc:
            raise CommandError(str(exc)) from None
        if code:
            sys.exit(code)
